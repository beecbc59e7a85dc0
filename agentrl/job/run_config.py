"""``RunConfig``: the whole run (model, engine, env, rollout, algorithm, trainer, logging) and its cross-field checks.

Field checks live on the sections (``agentrl.config.sections``) and on the plug-ins they name; the checks
here relate fields of different sections, and ``load_config`` runs them for every command. Only the
batch split depends on the number of ranks: the trainer re-checks it at start-up under torchrun
(``cross_field_problems(world_size)``). All problems are reported together, each with its key and fix.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializeAsAny, field_validator, model_validator

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.base import StrictModel
from agentrl.config.problems import Problem, ProblemsError
from agentrl.config.sections import EnvConfig, EvalConfig, LoggingConfig, ModelConfig, RolloutConfig, TrainerConfig
from agentrl.engines.config import EngineConfig
from agentrl.engines.registry import default_engine_config, engine_takes_seed, parse_engine_config


class CrossFieldError(ProblemsError):
    """Raised by ``RunConfig`` validation; carries the structured problems for the loader."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems, source="run config")


class RunConfig(StrictModel):
    """A complete, validated run configuration (load it with ``agentrl.job.loader.load_config``)."""

    seed: int = Field(
        0,
        description="The run's seed: trainer.seed, rollout.seed and engine.seed (for an engine that has one) default "
        "to it; each can still be set on its own.",
    )
    model: ModelConfig = Field(description="The policy model (a local Hugging Face directory).")
    engine: SerializeAsAny[EngineConfig] = Field(
        default_factory=default_engine_config,
        description="The inference engine rollouts sample from: one backend's settings, chosen by engine.kind.",
    )
    env: EnvConfig = Field(description="The environment (registry id or module:Class) and its kwargs.")
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig, description="Episode collection per step, partial rollouts."
    )
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="Loss and advantage settings.")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="Optimisation settings.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Run directory, wandb, progress, plots.")
    eval: EvalConfig = Field(
        default_factory=EvalConfig, description="Held-out evaluation before and after training (agentrl train)."
    )

    def cross_field_problems(self, world_size: int = 1) -> list[Problem]:
        """Problems that involve more than one field or section (empty when the config is consistent).

        ``world_size``: data-parallel ranks the step's episodes are split over (torchrun re-checks at start-up).
        """
        engine, rollout = self.engine, self.rollout
        problems: list[Problem] = list(engine.problems())  # the backend owns its own checks
        if rollout.max_new_tokens >= rollout.max_episode_tokens:
            problems.append(
                Problem(
                    "rollout.max_new_tokens",
                    f"{rollout.max_new_tokens} leaves no room for the prompt within "
                    f"rollout.max_episode_tokens={rollout.max_episode_tokens}",
                    "lower rollout.max_new_tokens or raise rollout.max_episode_tokens",
                )
            )
        if rollout.max_episode_tokens > engine.max_seq_len:
            problems.append(
                Problem(
                    "rollout.max_episode_tokens",
                    f"{rollout.max_episode_tokens} exceeds engine.max_seq_len={engine.max_seq_len}, so long episodes "
                    "would fail in the engine",
                    f"set rollout.max_episode_tokens <= {engine.max_seq_len} or raise engine.max_seq_len",
                )
            )
        problems.extend(self._batch_problems(world_size))
        problems.extend(self._eval_problems(world_size))
        problems.extend(self._training_problems())
        if self.trainer.mode == "async" and world_size > 1:
            problems.append(
                Problem(
                    "trainer.mode",
                    f"'async' overlaps the update with the engine in one process, but this job has {world_size} ranks",
                    "use trainer.mode: sync under torchrun",
                )
            )
        return problems

    def _batch_problems(self, world_size: int) -> list[Problem]:
        """A step's episodes must split into trainer.mini_batches equal mini-batches on every rank."""
        rollout, mini_batches = self.rollout, self.trainer.mini_batches
        episodes = rollout.group_size * rollout.prompts_per_step
        if mini_batches > episodes:
            return [
                Problem(
                    "trainer.mini_batches",
                    f"{mini_batches} mini-batches but a step has only {episodes} episodes "
                    "(rollout.group_size * rollout.prompts_per_step)",
                    f"set trainer.mini_batches <= {episodes}",
                )
            ]
        if episodes % (mini_batches * world_size):
            return [
                Problem(
                    "trainer.mini_batches",
                    f"a step's {episodes} episodes (rollout.group_size={rollout.group_size} x "
                    f"rollout.prompts_per_step={rollout.prompts_per_step}) do not split into {mini_batches} "
                    f"mini-batches x {world_size} ranks",
                    f"make rollout.group_size * rollout.prompts_per_step a multiple of {mini_batches * world_size}",
                )
            ]
        return []

    def _eval_problems(self, world_size: int) -> list[Problem]:
        """eval.precision float32 builds a second embedded engine over the trainer's unsharded weights."""
        if self.eval.precision != "float32" or not self.eval.splits:
            return []
        twin_problem = self.engine.float32_twin_problem()
        if twin_problem is not None:
            return [
                Problem(
                    "eval.precision",
                    f"'float32' evaluates in an in-process float32 twin of the rollout engine, but {twin_problem}",
                    "set eval.precision: rollout (a server engine can make its own decoding deterministic, e.g. "
                    "SGLang's --enable-deterministic-inference), or engine.kind: embedded",
                )
            ]
        if world_size > 1:
            return [
                Problem(
                    "eval.precision",
                    f"'float32' copies the trainer's whole model into an evaluation engine, but this job has "
                    f"{world_size} ranks that each hold a shard",
                    "set eval.precision: rollout under torchrun",
                )
            ]
        return []

    def _training_problems(self) -> list[Problem]:
        """The algorithm's own checks (its loss and scheme) and those relating it to the rollout."""
        rollout, algo = self.rollout, self.algorithm
        problems = algo.problems()
        if rollout.staleness_policy == "mask" and algo.max_token_lag is None:
            problems.append(
                Problem(
                    "algorithm.max_token_lag",
                    "rollout.staleness_policy is 'mask' but no lag bound is set, so stale tokens would be trained",
                    f"set algorithm.max_token_lag (e.g. {rollout.max_staleness})",
                )
            )
        problems.extend(self._async_problems())
        if self.trainer.keep_activations_tokens and not self.trainer.gradient_checkpointing:
            problems.append(
                Problem(
                    "trainer.keep_activations_tokens",
                    f"{self.trainer.keep_activations_tokens}, but trainer.gradient_checkpointing is off, so every "
                    "activation is kept already and the budget would mean nothing",
                    "set trainer.gradient_checkpointing: true, or trainer.keep_activations_tokens: 0",
                )
            )
        if rollout.group_size < 2:
            problems.append(
                Problem(
                    "rollout.group_size",
                    "group_size 1 gives every episode advantage 0 (nothing to learn)",
                    "set rollout.group_size >= 2",
                )
            )
        return problems

    def _async_problems(self) -> list[Problem]:
        """trainer.mode async trains every fresh sample one version late: the staleness bounds must allow it."""
        if self.trainer.mode != "async":
            return []
        problems = []
        if self.rollout.max_staleness < 1:
            problems.append(
                Problem(
                    "rollout.max_staleness",
                    "0, but trainer.mode 'async' trains each batch with weights one version newer than sampled it, "
                    "so every episode would be restarted forever",
                    "set rollout.max_staleness >= 1, or trainer.mode: sync",
                )
            )
        lag = self.algorithm.max_token_lag
        if lag is not None and lag < 1:
            problems.append(
                Problem(
                    "algorithm.max_token_lag",
                    f"{lag}, but trainer.mode 'async' trains tokens one version old, so every token would be masked",
                    "set algorithm.max_token_lag >= 1 (or unset it), or trainer.mode: sync",
                )
            )
        return problems

    @model_validator(mode="before")
    @classmethod
    def _sections_take_the_run_seed(cls, data: Any) -> Any:
        """Every section with a seed of its own and none set takes the run's ``seed``."""
        if not isinstance(data, dict) or "seed" not in data:
            return data
        seeded = dict(data)
        for section in ("trainer", "rollout"):
            value = seeded.get(section, {})
            if isinstance(value, dict) and "seed" not in value:
                seeded[section] = {**value, "seed": data["seed"]}
        engine = seeded.get("engine")
        engine_data = {} if engine is None else engine
        if isinstance(engine_data, dict) and "seed" not in engine_data and engine_takes_seed(engine_data):
            seeded["engine"] = {**engine_data, "seed": data["seed"]}
        return seeded

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_backend(cls, value: Any) -> EngineConfig:
        return parse_engine_config(value)

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        problems = self.cross_field_problems()
        if problems:
            raise CrossFieldError(problems)
        return self
