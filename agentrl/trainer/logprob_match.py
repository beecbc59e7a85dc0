"""Whether the engine's logprobs can stand for the update's as the ratio's old policy.

With ``algorithm.old_logprobs: engine`` and ``proximal: behaviour`` (its default), the engine's logprobs are the
denominator of every ratio. They are the update's only when both compute in float32: a bf16 engine or a bf16
autocast update differs by about 0.01 nats per token, which moves GSPO's sequence ratio past its clip band before
any update (docs/algorithm.md, "Which proximal policy with GSPO's band"). On CUDA, ``auto`` gives exactly that
pair, so the mismatch is said before the run, with the fix.
"""

from __future__ import annotations

from agentrl.job.run_config import RunConfig


def update_precision(cfg: RunConfig) -> str:
    """``bf16 autocast`` or ``float32``: what ``trainer.precision`` resolves to on this machine."""
    from agentrl.models.loading import resolve_device
    from agentrl.trainer.update import autocast_bf16

    device = resolve_device(cfg.model.device)
    return "bf16 autocast" if autocast_bf16(cfg.trainer.precision, device.split(":")[0]) else "float32"


def behaviour_mismatch(cfg: RunConfig, engine_dtype: str | None) -> str | None:
    """A ``warning:`` line when the engine's logprobs stand for the update's but are not computed like them
    (``engine_dtype`` None: the server does not report its dtype); None when they match or are not used."""
    if cfg.algorithm.old_logprobs != "engine" or cfg.algorithm.off_policy.proximal != "behaviour":
        return None
    update = update_precision(cfg)
    if engine_dtype == "float32" and update == "float32":
        return None
    engine = f"engine {engine_dtype}" if engine_dtype else "an engine whose dtype its server does not report"
    return (
        f"warning: algorithm.old_logprobs engine with proximal behaviour takes the ratio's old logprobs from {engine} "
        f"while the update runs in {update}: unless both are float32 they differ before any update and GSPO clips "
        "sequences at once (docs/algorithm.md). Set algorithm.proximal: recompute (or old_logprobs: recompute), or "
        "sample and update in float32 (model.dtype: float32 or a server launched with --dtype float32, and "
        "trainer.precision: fp32)"
    )
