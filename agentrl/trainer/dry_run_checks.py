"""Checks ``agentrl train --dry-run`` adds to the preflight: every evaluation env the config names is built.

A held-out split the env does not know (a typo in ``eval.splits``) used to pass the dry run and kill the real
run after its first training steps with the env's raw error; built here, it fails in seconds, naming the split,
the error and, where the env's config model types ``split`` as a ``Literal``, the valid splits.
"""

from __future__ import annotations

import typing
from typing import Any

from agentrl.errors import PreflightError
from agentrl.job.run_config import RunConfig


def known_splits(cfg: RunConfig) -> list[str]:
    """The splits the env's config model allows (``split: Literal[...]``); [] when it does not say."""
    from agentrl.env.registry import resolve_env

    model = getattr(resolve_env(cfg.env.id, cfg.env.import_modules).env_class, "config_model", None)
    field = model.model_fields.get("split") if model is not None else None
    annotation: Any = field.annotation if field is not None else None
    return [str(v) for v in typing.get_args(annotation)] if typing.get_origin(annotation) is typing.Literal else []


def check_eval_splits(cfg: RunConfig) -> list[str]:
    """Build the env of every ``eval.splits`` split and list its tasks; PreflightError naming a split that fails."""
    from agentrl.job.stack import env_factory_for, env_task_ids

    lines = []
    for split in cfg.eval.splits:
        try:
            tasks = env_task_ids(env_factory_for(cfg, split))
        except Exception as exc:  # noqa: BLE001 - whatever the env raises, the dry run names the split and the fix
            valid = known_splits(cfg)
            hint = (
                f"the env's splits are {', '.join(valid)}"
                if valid
                else "check the split names your env accepts (type its config's split as Literal[...] so a typo "
                "names the valid ones)"
            )
            first = " ".join(str(exc).split())
            raise PreflightError(
                f"eval.splits: env {cfg.env.id} with split {split!r} could not be built ({type(exc).__name__}: "
                f"{first}); {hint}. Fix eval.splits"
            ) from exc
        lines.append(f"eval split {split!r}: env built, {len(tasks) or 'seeded'} tasks")
    return lines


NARROW_CLIP = 0.01  # clip ranges under this are GSPO's (3e-4 / 4e-4), where one policy version of lag is far outside
CLIP_WARN_FRAC = 0.3  # the first step warns when the loss clipped more than this share of the trained tokens
PROXIMAL_FIX = (
    "set algorithm.proximal: recompute_stale (the default; with is_correction {kind: tis, cap: 2.0}), as "
    "configs/quickstart.yaml does (docs/algorithm.md, 'Which proximal policy with GSPO's band')"
)


def clip_risk_warnings(cfg: RunConfig) -> list[str]:
    """``warning:`` lines for settings known to clip most tokens under a narrow (GSPO) clip range."""
    eps_high = getattr(cfg.algorithm.loss, "eps_high", None)
    off = cfg.algorithm.off_policy
    if not isinstance(eps_high, float) or eps_high >= NARROW_CLIP or off.proximal not in ("behaviour", "interpolate"):
        return []
    lines = []
    if cfg.rollout.partial_rollout or cfg.trainer.mode == "async":
        lines.append(
            f"warning: proximal {off.proximal!r} with stale samples (partial rollouts carried across updates or an "
            f"async trainer): a sample one version old sits far outside the clip range {eps_high:g} against the "
            "policy that sampled it, so its tokens are clipped (a third of them on a multi-turn job); " + PROXIMAL_FIX
        )
    if off.proximal == "behaviour" and not _engine_matches_update(cfg):
        lines.append(
            "warning: proximal 'behaviour' with an engine that does not compute what the update does (bfloat16 on "
            f"either side): the engine-trainer mismatch alone is outside the clip range {eps_high:g} for 25-65 % "
            "of the sequences before any update; " + PROXIMAL_FIX
        )
    return lines


def _engine_matches_update(cfg: RunConfig) -> bool:
    from agentrl.models.loading import resolve_device
    from agentrl.trainer.update import autocast_bf16

    device = resolve_device(cfg.model.device).split(":")[0]
    return cfg.engine.samples_like_an_fp32_trainer(cfg.model) and not autocast_bf16(cfg.trainer.precision, device)


def first_step_clip_note(step: int, metrics: dict[str, float], proximal: str) -> str | None:
    """The first step's warning when the loss clipped most of its trained tokens (None otherwise)."""
    clipped = metrics.get("train/clip_frac_token", 0.0)
    if clipped <= CLIP_WARN_FRAC or metrics.get("train/optimizer_steps", 1.0) == 0:
        return None
    advice = PROXIMAL_FIX if proximal in ("behaviour", "interpolate") else "see docs/algorithm.md"
    return (
        f"warning: step {step} clipped {100 * clipped:.0f}% of the trained tokens (train/clip_frac_token, proximal "
        f"{proximal!r}): those tokens give no gradient; {advice}"
    )
