"""The algorithm section of a run: the loss and the per-turn advantage scheme (registered plug-ins, validated
against their registries here), advantage normalisation, where pi_old comes from, and the off-policy objective
(``agentrl.algos.offpolicy_config``). The objective and the credit are docs/algorithm.md's.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, SerializeAsAny, field_validator
from pydantic_core import PydanticCustomError

from agentrl.algos.loss_base import LOSSES
from agentrl.algos.offpolicy_config import (
    RECOMPUTED_PROXIMAL,
    ISCorrection,
    NoCorrection,
    OffPolicy,
    Proximal,
    TruncatedIS,
)
from agentrl.algos.scheme_base import SCHEMES
from agentrl.config.base import StrictModel
from agentrl.config.plugins import PluginRegistry, PluginSettings, refuse_name_tag
from agentrl.config.problems import Problem


class AlgorithmConfig(StrictModel):
    """Loss and advantage settings (see docs/algorithm.md). The loss and the scheme are registered plug-ins."""

    import_modules: list[str] = Field(
        default_factory=list,
        description="Modules imported before the loss and turn_advantage names are looked up, so the losses and "
        "schemes they register (agentrl.algos.register_loss / register_scheme) can be named here.",
    )
    loss: SerializeAsAny[PluginSettings] = Field(
        "gspo_token",
        validate_default=True,
        description="Policy loss: a registered name (gspo_token, gspo, grpo, or one you register) or a mapping with "
        "its kind and settings, e.g. {kind: grpo, eps_low: 0.2}. Bundled settings: eps_low and eps_high (clip range; "
        "gspo/gspo_token 3e-4/4e-4, grpo 0.2/0.28), log_ratio_clamp (gspo/gspo_token, >= 10, off by default) and "
        "token_norm (gspo_token/grpo: a constant that divides each row's token sum instead of its length; off).",
    )
    turn_advantage: SerializeAsAny[PluginSettings] = Field(
        "outcome",
        validate_default=True,
        description="Per-turn advantage scheme (docs/algorithm.md#per-turn-schemes): a registered name (outcome, "
        "outcome_plus_turn, "
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
        description="Decoupled objective (docs/algorithm.md#the-decoupled-objective): the clip's policy. "
        "behaviour (the engine's logprobs), "
        "recompute (a no-grad trainer forward at the step start), recompute_stale (that forward only for rows with "
        "tokens of older weights; for an engine matching the trainer, as the embedded float32 one, and every row "
        "otherwise) or interpolate (b + lag/(lag+1) (sg[current] - b) per token, no pass). None follows "
        "old_logprobs: engine -> recompute_stale (the bundled configs' choice: carried partial rollouts are one "
        "version old, far outside GSPO's band against their own policy), recompute -> recompute.",
    )
    is_correction: ISCorrection | None = Field(
        None,
        description="Importance correction between the proximal and the behaviour policy: none, or a mapping "
        "{kind: tis, cap: 2.0} (truncated IS) or {kind: mis, low: 0.5, high: 5.0} (masked IS, IcePop-style), each "
        "with level: token | sequence (default: the loss's own, sequence for gspo/gspo_token, token for grpo). "
        "None: {kind: tis, cap: 2.0} where the proximal is a recompute of engine logprobs (the bundled configs' "
        "choice), else none.",
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
        if isinstance(value, Mapping):
            refuse_name_tag(value, "importance correction")
        return {"kind": value} if isinstance(value, str) else value

    @property
    def off_policy(self) -> OffPolicy:
        """The effective decoupled-objective settings: ``proximal`` None follows ``old_logprobs``, ``is_correction``
        None follows the proximal (truncated IS over a recompute of engine logprobs, as the bundled configs)."""
        proximal = self.proximal or ("recompute" if self.old_logprobs == "recompute" else "recompute_stale")
        correction = self.is_correction
        if correction is None:
            weighted = self.old_logprobs == "engine" and proximal in RECOMPUTED_PROXIMAL
            correction = TruncatedIS() if weighted else NoCorrection()
        return OffPolicy(proximal=proximal, is_correction=correction)

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
        elif self.audit_every and self.off_policy.recomputes:
            problems.append(
                Problem(
                    "algorithm.audit_every",
                    f"{self.audit_every} audits the engine logprobs the clip is taken against, but proximal "
                    f"{self.off_policy.proximal!r} takes it against a trainer recompute, which logs the mismatch of "
                    "the rows it recomputes (mismatch/*)",
                    "set algorithm.audit_every: 0, or proximal: behaviour to audit the engine's logprobs",
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
        if off.proximal == "behaviour" and off.is_correction.kind != "none":
            out.append(
                Problem(
                    "algorithm.is_correction",
                    f"{off.is_correction.kind!r} weights by proximal/behaviour, which is exactly 1 with proximal "
                    "'behaviour' (no IS weight against the same engine logprobs: "
                    "docs/algorithm.md#the-old-policy-is-the-engine)",
                    "set proximal: recompute or interpolate, or is_correction: none",
                )
            )
        level = off.is_correction.level
        if level == "token" and getattr(self.loss, "kind", "") == "gspo":
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


def _registry(field: str) -> PluginRegistry[Any]:
    """The plug-in registry of an algorithm field."""
    return LOSSES if field == "loss" else SCHEMES
