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
