"""Checks the trainer runs before any heavy work: config combinations, engine logprobs, resume identity.

Every problem is reported at once as a ConfigError/CheckpointError naming the key, the value and the fix.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agentrl.algos import check_loss_settings
from agentrl.config.problems import Problem, raise_problems
from agentrl.config.run import RunConfig
from agentrl.engines.base import LogprobSemantics
from agentrl.errors import CheckpointError, ConfigError

RUN_META = "run.json"


def trainer_problems(cfg: RunConfig, world_size: int = 1) -> list[Problem]:
    """Cross-field problems of the algorithm/trainer settings (empty when consistent)."""
    algo, trainer, rollout = cfg.algorithm, cfg.trainer, cfg.rollout
    problems: list[Problem] = []
    try:
        check_loss_settings(algo.loss, algo.eps_low, algo.eps_high)
    except ConfigError as exc:
        problems.append(Problem("algorithm.loss", str(exc), "see shared/GSPO.md section 2.4"))
    rows = rollout.group_size * rollout.prompts_per_step
    if rows % (trainer.mini_batches * world_size):
        problems.append(
            Problem(
                "trainer.mini_batches",
                f"a step's {rows} episodes (rollout.group_size={rollout.group_size} x rollout.prompts_per_step="
                f"{rollout.prompts_per_step}) do not split into {trainer.mini_batches} mini-batches x {world_size} "
                "ranks",
                f"make rollout.group_size * rollout.prompts_per_step a multiple of {trainer.mini_batches * world_size}",
            )
        )
    if algo.loss == "gspo" and algo.turn_advantage != "outcome":
        problems.append(
            Problem(
                "algorithm.turn_advantage",
                f"{algo.turn_advantage!r} gives per-turn advantages, but loss 'gspo' takes one advantage per sequence",
                "use algorithm.loss: gspo_token, or turn_advantage: outcome",
            )
        )
    if algo.adv_scale == "none" and algo.turn_advantage != "outcome":
        problems.append(
            Problem(
                "algorithm.adv_scale",
                "adv_scale 'none' (Dr-GRPO) is defined for the outcome scheme only",
                "set algorithm.turn_advantage: outcome or algorithm.adv_scale: std",
            )
        )
    if rollout.staleness_policy == "mask" and algo.max_token_lag is None:
        problems.append(
            Problem(
                "algorithm.max_token_lag",
                "rollout.staleness_policy is 'mask' but no lag bound is set, so stale tokens would be trained",
                f"set algorithm.max_token_lag (e.g. {rollout.max_staleness})",
            )
        )
    if algo.loss == "grpo" and algo.log_ratio_clamp is not None:
        problems.append(
            Problem(
                "algorithm.log_ratio_clamp",
                "the clamp bounds the sequence log-ratio log s, which loss "
                "'grpo' does not use (its ratios are per token)",
                "unset it or use gspo/gspo_token",
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


def validate_run_config(cfg: RunConfig, world_size: int = 1) -> None:
    """Raise one ConfigError listing every trainer problem of ``cfg``."""
    raise_problems(trainer_problems(cfg, world_size), source="run config")


def check_engine_logprobs(semantics: LogprobSemantics, cfg: RunConfig) -> None:
    """old_logprobs: engine needs the engine's tempered full-vocabulary logprobs (GSPO.md 2.6)."""
    if cfg.algorithm.old_logprobs != "engine":
        return
    if semantics == LogprobSemantics.NONE:
        raise ConfigError(
            "algorithm.old_logprobs is 'engine' but the engine returns no logprobs; "
            "set algorithm.old_logprobs: recompute or use an engine that returns logprobs"
        )
    if semantics == LogprobSemantics.RAW and cfg.rollout.temperature != 1.0:
        raise ConfigError(
            f"the engine returns untempered logprobs (SGLANG_RETURN_ORIGINAL_LOGPROB) but "
            f"rollout.temperature={cfg.rollout.temperature}; the ratio would compare different "
            "distributions. Unset that server flag, use temperature 1.0, or old_logprobs: recompute"
        )


def model_fingerprint(model_dir: str | Path) -> dict[str, str]:
    """Architecture (config.json minus bookkeeping) and tokenizer file hashes of a HF model dir."""
    directory = Path(model_dir)
    config = json.loads((directory / "config.json").read_text())
    for key in ("_name_or_path", "transformers_version", "torch_dtype", "dtype", "architectures", "use_cache"):
        config.pop(key, None)
    tok_file = directory / "tokenizer.json"
    tok_hash = hashlib.sha256(tok_file.read_bytes()).hexdigest()[:16] if tok_file.exists() else "none"
    arch = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    return {"architecture": arch, "tokenizer": tok_hash}


def write_run_meta(run_dir: Path, cfg: RunConfig) -> None:
    """Record what this run trains, so a ``--resume`` with another model fails early."""
    meta: dict[str, Any] = {"model_path": cfg.model.path, "fingerprint": model_fingerprint(cfg.model.path)}
    (run_dir / RUN_META).write_text(json.dumps(meta, indent=1))


def check_resume(run_dir: Path, cfg: RunConfig) -> None:
    """CheckpointError when ``run_dir`` is not a run of ``cfg.model`` (compared by fingerprint)."""
    meta_file = run_dir / RUN_META
    if not meta_file.is_file():
        raise CheckpointError(
            f"--resume {str(run_dir)!r} is not a run directory ({RUN_META} missing); "
            "pass the directory a previous `agentrl train` created"
        )
    meta = json.loads(meta_file.read_text())
    mine = model_fingerprint(cfg.model.path)
    if meta.get("fingerprint") != mine:
        raise CheckpointError(
            f"--resume {str(run_dir)!r} trained model {meta.get('model_path')!r} "
            f"(fingerprint {meta.get('fingerprint')}) but the config's model.path {cfg.model.path!r} "
            f"has fingerprint {mine}; resume with the same model or start a new run"
        )
