"""Settings of the decoupled off-policy objective: the proximal policy and the IS correction.

The objective is docs/algorithm.md#the-decoupled-objective.

Torch-free so the config layer can name them; the corrections act on tensors through tensor methods only.
The objective itself lives in ``agentrl.algos.offpolicy``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    import torch

Proximal = Literal["behaviour", "recompute", "recompute_stale", "interpolate"]
# the modes whose proximal policy is a trainer forward at the step start (recompute_stale: only of stale rows)
RECOMPUTED_PROXIMAL: frozenset[str] = frozenset({"recompute", "recompute_stale"})
Level = Literal["token", "sequence"]


class ISCorrectionBase(BaseModel):
    """Shared settings of an importance correction: the level its ratio is taken at."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: Level | None = Field(
        None,
        description="token: ratio_it = exp(p_it - b_it); sequence: ratio_i = exp(mean_t(p_it - b_it)). "
        "None: the loss's own level (sequence for gspo/gspo_token, token for grpo; "
        "docs/algorithm.md#the-decoupled-objective).",
    )

    def weights(self, ratio_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(weights, truncated, masked) for ratios of any shape; the weights are detached."""
        raise NotImplementedError


class NoCorrection(ISCorrectionBase):
    """No behaviour weight (w = 1): the proximal policy is trusted as the sampling policy."""

    kind: Literal["none"] = "none"

    def weights(self, ratio_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """w = 1 everywhere; nothing truncated or masked."""
        none = ratio_.new_zeros(ratio_.shape).bool()
        return ratio_.new_ones(ratio_.shape), none, none


class TruncatedIS(ISCorrectionBase):
    """Truncated importance sampling (TIS): w = min(ratio, cap)."""

    kind: Literal["tis"] = "tis"
    cap: float = Field(2.0, gt=1.0, description="Truncation C of the ratio proximal/behaviour (> 1).")

    def weights(self, ratio_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """min(ratio, cap); ``truncated`` marks ratios above the cap."""
        truncated = ratio_ > self.cap
        return ratio_.clamp(max=self.cap), truncated, truncated & ~truncated


class MaskedIS(ISCorrectionBase):
    """Masked importance sampling (MIS, IcePop-style): w = ratio inside [low, high], else 0."""

    kind: Literal["mis"] = "mis"
    low: float = Field(0.5, gt=0.0, lt=1.0, description="Lower bound of the kept ratio band (IcePop: 0.5).")
    high: float = Field(5.0, gt=1.0, description="Upper bound of the kept ratio band (IcePop: 5.0).")

    def weights(self, ratio_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """ratio where low <= ratio <= high, else 0; ``masked`` marks the zeroed ones."""
        masked = (ratio_ < self.low) | (ratio_ > self.high)
        return ratio_.masked_fill(masked, 0.0), masked & ~masked, masked


ISCorrection = Annotated[NoCorrection | TruncatedIS | MaskedIS, Field(discriminator="kind")]


class OffPolicy(BaseModel):
    """How a loss treats samples from older policy versions: the proximal policy and the behaviour weight."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    proximal: Proximal = "behaviour"
    is_correction: ISCorrection = Field(default_factory=NoCorrection)

    @model_validator(mode="before")
    @classmethod
    def _correction_by_name(cls, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("is_correction"), str):
            value = {**value, "is_correction": {"kind": value["is_correction"]}}
        return value

    @property
    def recomputes(self) -> bool:
        """True when the proximal policy needs the step-start trainer forward (recompute, recompute_stale)."""
        return self.proximal in RECOMPUTED_PROXIMAL

    @property
    def decoupled(self) -> bool:
        """False when the loss is exactly the synchronous one with logp_old := behaviour (or the recompute)."""
        return self.proximal == "interpolate" or self.is_correction.kind != "none"
