"""Config sections of a run: model, env, rollout (``agentrl.config.rollout``), algorithm, trainer, logging, eval.

Each field is documented once, here (a plug-in's settings on its own class); the engine section is one model
per backend (``agentrl.engines.registry``). Cross-field checks live in ``agentrl.config.run``.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, SerializeAsAny, field_validator
from pydantic_core import PydanticCustomError

from agentrl.config.base import StrictModel
from agentrl.config.evaluation import EvalConfig, SplitEval
from agentrl.config.offpolicy import ISCorrection, NoCorrection, OffPolicy, Proximal
from agentrl.config.plugins import PluginSettings
from agentrl.config.problems import Problem
from agentrl.config.rollout import RolloutConfig

__all__ = [
    "ModelConfig",
    "EnvConfig",
    "RolloutConfig",
    "AlgorithmConfig",
    "TrainerConfig",
    "LoggingConfig",
    "EvalConfig",
    "SplitEval",
]


class ModelConfig(StrictModel):
    """Which Hugging Face causal LM to train and serve."""

    path: str = Field(
        description="Local Hugging Face model directory (config.json, safetensors, tokenizer). Make one with `agentrl "
        "make-model`."
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16", "bfloat16_if_fast"] = Field(
        "auto",
        description="The engine's weights dtype (the trainer keeps float32 master weights): auto = bfloat16 on "
        "CUDA, float32 on CPU; bfloat16_if_fast = bfloat16 where the device computes it in hardware (CUDA, a CPU "
        "with AVX512-BF16 or AMX), else float32.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the trainer (and embedded engine) run: auto = cuda if available."
    )


class EnvConfig(StrictModel):
    """Which environment to run and its constructor arguments."""

    id: str = Field(description="Gymnasium registry id (agentrl/CodeExec-v0) or 'module:Class'.")
    kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Keyword arguments for the env constructor (checked by the env's config model, if it has one).",
    )
    import_modules: list[str] = Field(
        default_factory=list,
        description="Your modules whose import registers envs (the bundled envs are always there).",
    )
    step_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Seconds an env reset/step may take; a longer call fails its episode (a drop) and sets the env "
        "aside. None: no limit (a notice every 30 s of waiting).",
    )


class AlgorithmConfig(StrictModel):
    """Loss and advantage settings (see shared/GSPO.md). The loss and the scheme are registered plug-ins."""

    import_modules: list[str] = Field(
        default_factory=list,
        description="Modules imported before the loss and turn_advantage names are looked up, so the losses and "
        "schemes they register (agentrl.algos.register_loss / register_scheme) can be named here.",
    )
    loss: SerializeAsAny[PluginSettings] = Field(
        "gspo_token",
        validate_default=True,
        description="Policy loss: a registered name (gspo_token, gspo, grpo, or one you register) or a mapping with "
        "its name and settings, e.g. {name: grpo, eps_low: 0.2}. Bundled settings: eps_low and eps_high (clip range; "
        "gspo/gspo_token 3e-4/4e-4, grpo 0.2/0.28) and log_ratio_clamp (gspo/gspo_token, >= 10, off by default).",
    )
    turn_advantage: SerializeAsAny[PluginSettings] = Field(
        "outcome",
        validate_default=True,
        description="Per-turn advantage scheme (GSPO.md section 3.2): a registered name (outcome, outcome_plus_turn, "
        "discounted_return, or one you register) or a mapping with its name and settings, e.g. {name: "
        "discounted_return, gamma: 0.95}. Settings: lam (outcome_plus_turn); gamma, episode_weight, step_weight "
        "(discounted_return).",
    )
    adv_eps: float = Field(1e-6, gt=0.0, description="Added to the group std when normalising advantages.")
    adv_scale: Literal["std", "none"] = Field(
        "std",
        description="Divide advantages by the group std (std) or not (none, Dr-GRPO; schemes declare which they "
        "support).",
    )
    old_logprobs: Literal["engine", "recompute"] = Field(
        "engine",
        description="pi_old: the engine's logprobs (default, no extra pass) or a trainer recompute that replaces them "
        "(logs the mismatch as mismatch/*).",
    )
    audit_every: int = Field(
        0,
        ge=0,
        description="With old_logprobs engine: every K steps (steps 1, 1+K, ...) recompute the batch's logprobs with "
        "the trainer before the update, without using them, and log the engine-trainer mismatch as audit/*; 0 = off.",
    )
    max_token_lag: int | None = Field(
        None,
        ge=0,
        description="Mask (exclude from the loss) tokens sampled more than this many policy versions ago; None keeps "
        "all.",
    )
    proximal: Proximal | None = Field(
        None,
        description="Decoupled objective (GSPO.md section 5): the clip's policy. behaviour (the engine's logprobs), "
        "recompute (a no-grad trainer forward at the step start), recompute_stale (that forward only for rows with "
        "tokens of older weights; for an engine matching the trainer, as the embedded float32 one) or interpolate "
        "(b + lag/(lag+1) (sg[current] - b) per token, no pass). None follows old_logprobs (engine: behaviour).",
    )
    is_correction: ISCorrection = Field(
        default_factory=NoCorrection,
        description="Importance correction between the proximal and the behaviour policy: none, or a mapping "
        "{name: tis, cap: 2.0} (truncated IS) or {name: mis, low: 0.5, high: 5.0} (masked IS, IcePop-style), each "
        "with level: token | sequence (default: the loss's own, sequence for gspo/gspo_token, token for grpo).",
    )

    plugin_fields: ClassVar[frozenset[str]] = frozenset({"loss", "turn_advantage"})

    @field_validator("import_modules")
    @classmethod
    def _import_plugins(cls, modules: list[str]) -> list[str]:
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                raise PydanticCustomError(
                    "plugin_import",
                    "{message}",
                    {
                        "message": f"cannot import {name!r}: {exc}",
                        "fix": "install it, put its directory on PYTHONPATH, or remove it from the list",
                    },
                ) from exc
        return modules

    @field_validator("loss", mode="before")
    @classmethod
    def _resolve_loss(cls, value: Any) -> Any:
        return _registry("loss").resolve(value, default=cls.model_fields["loss"].default)

    @field_validator("turn_advantage", mode="before")
    @classmethod
    def _resolve_scheme(cls, value: Any) -> Any:
        return _registry("turn_advantage").resolve(value, default=cls.model_fields["turn_advantage"].default)

    @field_validator("is_correction", mode="before")
    @classmethod
    def _correction_by_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @property
    def off_policy(self) -> OffPolicy:
        """The effective decoupled-objective settings (``proximal`` None follows ``old_logprobs``)."""
        default = "recompute" if self.old_logprobs == "recompute" else "behaviour"
        return OffPolicy(proximal=self.proximal or default, is_correction=self.is_correction)

    @classmethod
    def plugin_model(cls, field: str, value: Any) -> type[BaseModel] | None:
        """The settings class a raw ``loss`` / ``turn_advantage`` value selects (for error messages)."""
        if field not in cls.plugin_fields:
            return None
        return _registry(field).settings_model(value, default=cls.model_fields[field].default)

    def problems(self) -> list[Problem]:
        """Checks that relate the loss, the scheme and the other algorithm settings (each plug-in owns its own)."""
        problems = [*self.loss.problems(self), *self.turn_advantage.problems(self)]  # type: ignore[attr-defined]
        problems += self._off_policy_problems()
        if self.audit_every and self.old_logprobs == "recompute":
            problems.append(
                Problem(
                    "algorithm.audit_every",
                    f"{self.audit_every} audits engine logprobs, but old_logprobs 'recompute' already replaces them "
                    "and logs the mismatch every step (mismatch/*)",
                    "set algorithm.audit_every: 0, or old_logprobs: engine",
                )
            )
        return problems

    def _off_policy_problems(self) -> list[Problem]:
        out = []
        if self.old_logprobs == "recompute" and self.proximal not in (None, "recompute"):
            out.append(
                Problem(
                    "algorithm.proximal",
                    f"{self.proximal!r} contradicts old_logprobs 'recompute' (which makes the recompute the proximal)",
                    "drop old_logprobs (keep the default engine) or set proximal: recompute",
                )
            )
        off = self.off_policy
        if off.proximal == "behaviour" and off.is_correction.name != "none":
            out.append(
                Problem(
                    "algorithm.is_correction",
                    f"{off.is_correction.name!r} weights by proximal/behaviour, which is exactly 1 with proximal "
                    "'behaviour' (GSPO.md 2.6: no IS weight against the same engine logprobs)",
                    "set proximal: recompute or interpolate, or is_correction: none",
                )
            )
        level = off.is_correction.level
        if level == "token" and getattr(self.loss, "name", "") == "gspo":
            out.append(
                Problem(
                    "algorithm.is_correction.level",
                    "'token' weights need a per-token surrogate, which loss 'gspo' (one ratio per sequence) lacks",
                    "use level: sequence, or loss: gspo_token",
                )
            )
        return out

    def audit_due(self, step: int) -> bool:
        """True on the steps the engine-logprob audit runs (1, 1 + K, 1 + 2K, ...)."""
        return self.audit_every > 0 and self.old_logprobs == "engine" and (step - 1) % self.audit_every == 0


def _registry(field: str) -> Any:
    """The plug-in registry of an algorithm field (imported late: the algorithms import torch)."""
    from agentrl.algos import LOSSES, SCHEMES

    return LOSSES if field == "loss" else SCHEMES


class TrainerConfig(StrictModel):
    """Optimisation settings of the policy update."""

    steps: int = Field(10, ge=1, description="Training steps (rollout + update) to run.")
    lr: float = Field(1e-6, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="Linear LR warm-up, in optimizer steps.")
    lr_schedule: Literal["constant", "cosine", "linear"] = Field("constant", description="LR schedule after warm-up.")
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping by global norm.")
    mini_batches: int = Field(
        4, ge=1, description="Optimizer steps per rollout batch (the batch is split into this many mini-batches)."
    )
    micro_batch_tokens: int = Field(
        8192, ge=64, description="Token budget of one packed micro-batch (bounds activation memory)."
    )
    gradient_checkpointing: bool = Field(
        True, description="Recompute activations in backward (bounds activation memory; costs part of a forward)."
    )
    keep_activations_tokens: int = Field(
        0,
        ge=0,
        description="With gradient_checkpointing: keep the activations of as many decoder layers as this many tokens "
        "through the whole model would hold. A micro-batch of T tokens recomputes ceil(L x (1 - N/T)) of its L "
        "layers; one of at most N tokens recomputes none. 0 recomputes every layer (trainer/layer_checkpointing.py).",
    )
    share_prefix: bool = Field(
        True,
        description="Forward the episodes that share a prompt as one packed row (the prompt once, a block mask), "
        "in the update and the recompute: the same loss with (G - 1) x prompt fewer tokens per group. Needs "
        "sdpa or eager attention.",
    )
    share_prefix_max_len: int = Field(
        2048,
        ge=64,
        description="Longest packed row (also at most micro_batch_tokens): attention over a packed row costs its "
        "length squared with a dense mask, the blocks its mask allows with packed_attention: blocks.",
    )
    packed_attention: Literal["blocks", "mask"] = Field(
        "blocks",
        description="How an SDPA model attends over packed rows: blocks computes only what the block mask allows (the "
        "prefix, each continuation onto prefix and itself; trainer/block_attention.py); mask runs SDPA over the whole "
        "packed row with the mask. Same logprobs and gradients up to float rounding.",
    )
    precision: Literal["auto", "fp32", "bf16_autocast", "bf16_autocast_if_fast"] = Field(
        "auto",
        description="bf16_autocast: the update's matmuls in bf16 (CUDA or CPU; weights, AdamW, head logits, loss stay "
        "fp32; on a CPU only with bf16 units, see scripts/bench/bench_roofline.py); auto: bf16 on CUDA, fp32 on CPU; "
        "bf16_autocast_if_fast: bf16 where the device computes it in hardware (CUDA, a CPU with AVX512-BF16 or AMX).",
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=16,
        description="Tokens per chunk when computing logprobs, so the full-vocab fp32 log-softmax is never "
        "materialised at once.",
    )
    save_every: int = Field(10, ge=1, description="Checkpoint every N steps (and at the end).")
    save_every_s: float | None = Field(
        600.0,
        gt=0.0,
        description="Also checkpoint at the first step boundary this many seconds after the last checkpoint (or the "
        "job's start), so a killed job loses at most about this long plus one step; null: by step count only.",
    )
    keep_checkpoints: int = Field(2, ge=1, description="How many recent checkpoints to keep.")
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="sync: rollouts, then the update, then the weight sync. async (one step off): step k+1's rollouts "
        "are collected while step k's update runs in a worker thread; weights reach the engine at the step "
        "boundary, so trained tokens are one version old (needs rollout.max_staleness >= 1). See docs/async.md.",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="torch intra-op threads of each busy side (the engine thread and the trainer thread take this "
        "many each). None: every core in sync mode (only one side runs at a time), half the cores in async mode, and "
        "every core for the rest of an async update once the engine has finished collecting.",
    )
    seed: int = Field(0, description="Seed of torch, python and numpy RNGs.")
    deterministic: bool = Field(
        False, description="Use deterministic algorithms (CPU runs then reproduce exactly across kill/resume)."
    )


class LoggingConfig(StrictModel):
    """Where and how a run reports."""

    run_root: str = Field("runs", description="Run directories are created under this folder.")
    run_name: str | None = Field(None, description="Run directory name (default: <config stem>-<timestamp>).")
    wandb_project: str | None = Field(
        "agentrl", description="wandb project; runs offline (saved in the run directory) unless WANDB_API_KEY is set."
    )
    wandb_mode: Literal["auto", "online", "offline", "disabled"] = Field(
        "auto", description="auto: online with an API key, else offline."
    )
    progress: bool = Field(True, description="Show the rich progress bar with live metrics.")
    plot_every: int = Field(1, ge=1, description="Refresh the PNG plots every N steps.")
