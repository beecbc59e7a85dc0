"""The ``eval`` section: held-out evaluation settings, per split where they differ (re-exported by sections)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from agentrl.config.base import StrictModel


class SplitEval(StrictModel):
    """How one held-out split is evaluated where it differs from the eval section's ``samples``/``temperature``."""

    samples: int | None = Field(None, ge=1, description="Episodes per task on this split (None: eval.samples).")
    temperature: float | None = Field(
        None, ge=0.0, description="Sampling temperature on this split; 0 = greedy (None: eval.temperature)."
    )


class EvalConfig(StrictModel):
    """Held-out evaluation run by ``agentrl train`` before the first and after the last step (and every N steps)."""

    splits: list[str] = Field(
        default_factory=list,
        description="Values of env.kwargs.split to evaluate on (e.g. [test_kinds, test_instances]); empty: no "
        "evaluation.",
    )
    samples: int = Field(1, ge=1, description="Episodes per held-out task (n of pass@k).")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature of evaluation episodes; 0 = greedy.")
    max_tasks: int | None = Field(None, ge=1, description="Evaluate only the first N tasks of each split (None: all).")
    concurrency: int = Field(32, ge=1, description="Evaluation episodes in flight at once.")
    every_steps: int | None = Field(
        None,
        ge=1,
        description="Also evaluate after every N-th training step (a learning curve; paired like before/after, "
        "so keep it small with max_tasks); None: only before and after.",
    )
    precision: Literal["rollout", "float32"] = Field(
        "rollout",
        description="What the held-out episodes decode with. rollout: the rollout engine as it serves (bf16 weights "
        "when model.dtype is bf16). float32: the trainer's float32 weights, in a second in-process engine built for "
        "each evaluation (engine.kind embedded, one process): greedy bf16 decoding flips near-ties with the batch's "
        "make-up, so the same model scores differently from run to run; float32's finer rounding makes such a flip "
        "far rarer, not impossible (the CPU engine's matmul form changes above 8 rows a step). Seeded like the "
        "rollout engine under trainer.deterministic. Same as rollout when the engine already serves float32.",
    )
    per_split: dict[str, SplitEval] = Field(
        default_factory=dict,
        description="Settings for single splits, e.g. {test_kinds: {samples: 8, temperature: 0.7}}: sampled pass@1 "
        "from many samples where greedy decoding hides a change, greedy where one episode per task suffices.",
    )

    @model_validator(mode="after")
    def _per_split_names_evaluated_splits(self) -> EvalConfig:
        unknown = sorted(set(self.per_split) - set(self.splits))
        if unknown and self.splits:  # eval.splits=[] turns evaluation off; its per-split settings then wait unused
            raise PydanticCustomError(
                "eval_per_split",
                "{message}",
                {
                    "message": f"eval.per_split names {unknown}, which eval.splits {self.splits} does not evaluate",
                    "fix": "add the split to eval.splits or remove its entry from eval.per_split",
                },
            )
        for split in self.splits:
            samples, temperature = self.samples_for(split), self.temperature_for(split)
            if samples > 1 and temperature == 0.0:
                raise PydanticCustomError(
                    "eval_greedy_samples",
                    "{message}",
                    {
                        "message": f"split {split!r} asks for {samples} greedy samples per task: greedy episodes "
                        "of a task are identical, so they cost time and add nothing",
                        "fix": "set its samples to 1, or a temperature above 0 for sampled pass@1",
                    },
                )
        return self

    def samples_for(self, split: str) -> int:
        """Episodes per task on ``split``."""
        return self._setting(split, "samples")

    def temperature_for(self, split: str) -> float:
        """Sampling temperature on ``split`` (0 = greedy)."""
        return self._setting(split, "temperature")

    def _setting(self, split: str, name: str) -> Any:
        """``per_split[split].<name>`` where set, else the section's own ``<name>``."""
        value = getattr(self.per_split.get(split), name, None)
        return getattr(self, name) if value is None else value
