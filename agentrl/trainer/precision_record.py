"""The precision a run resolved at its start, recorded in the run so a resume cannot switch it silently.

``model.dtype: bfloat16_if_fast`` and ``trainer.precision: bfloat16_autocast_if_fast`` (and ``auto``) resolve on the
machine that runs them: a run started on a CPU with bf16 units and resumed on one without would switch the
engine's dtype and the update's precision, and with them which rows the loss recomputes. The resolved values
are kept in the run's metadata; a resume that resolves them otherwise is a config difference.
"""

from __future__ import annotations

from typing import Any

from agentrl.errors import ConfigError
from agentrl.job.run_config import RunConfig
from agentrl.trainer.resume import ACCEPT_FLAG


def resolved_precision(cfg: RunConfig) -> dict[str, str]:
    """What ``model.dtype`` and ``trainer.precision`` resolve to on this machine."""
    from agentrl.models.loading import resolve_device, resolve_dtype
    from agentrl.trainer.update import autocast_bf16

    device = resolve_device(cfg.model.device)
    dtype = str(resolve_dtype(cfg.model.dtype, device)).removeprefix("torch.")
    autocast = autocast_bf16(cfg.trainer.precision, device.split(":")[0])
    return {"model.dtype": dtype, "trainer.precision": "bf16_autocast" if autocast else "fp32"}


def precision_changes(recorded: dict[str, Any] | None, now: dict[str, str]) -> list[str]:
    """One line per key whose resolved precision differs from the run's record (none for an unrecorded run)."""
    if recorded is None:
        return []
    return [
        f"  {k}: resolved {recorded.get(k)!r} in the run, {v!r} now" for k, v in now.items() if recorded.get(k) != v
    ]


def refuse_precision_change(run_dir: str, changes: list[str], cfg: RunConfig) -> None:
    """ConfigError naming each changed key and the two ways on."""
    raise ConfigError(
        "\n".join(
            [
                f"--resume {run_dir}: on this machine the run's precision resolves differently than when it started "
                f"(model.dtype {cfg.model.dtype!r}, trainer.precision {cfg.trainer.precision!r}):",
                *changes,
                "The engine's dtype and the update's precision would switch mid-run. Resume on a machine like the "
                "one it started on, set the resolved values explicitly (e.g. model.dtype=float32 "
                f"trainer.precision=fp32) with {ACCEPT_FLAG}, or add {ACCEPT_FLAG} to continue with the switch",
            ]
        )
    )
