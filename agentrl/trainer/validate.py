"""Checks the trainer runs before any heavy work: the config for its world size, engine logprobs, resume identity.

Every problem is reported at once as a ConfigError/CheckpointError naming the key, the value and the fix.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from agentrl.config.problems import raise_problems
from agentrl.engines.base import LogprobSemantics
from agentrl.errors import CheckpointError, ConfigError
from agentrl.job.run_config import RunConfig
from agentrl.trainer.precision_record import precision_changes, refuse_precision_change, resolved_precision
from agentrl.util.allocator import loaded_allocator
from agentrl.util.openmp_env import wait_policy

RUN_META = "run.json"


def validate_run_config(cfg: RunConfig, world_size: int = 1) -> None:
    """Raise one ConfigError listing every cross-field problem of ``cfg`` for ``world_size`` ranks.

    ``load_config`` already ran these with one rank; the trainer runs them again at start-up, where the
    world size is known (and a config built in code with ``model_copy`` skipped validation).
    """
    raise_problems(cfg.cross_field_problems(world_size), source="run config")


def check_engine_logprobs(semantics: LogprobSemantics, cfg: RunConfig) -> None:
    """old_logprobs: engine needs the engine's tempered full-vocabulary logprobs.

    Why: docs/algorithm.md#the-old-policy-is-the-engine.
    """
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
    """Record what this run trains, so a ``--resume`` with another model fails early (and its allocator)."""
    meta: dict[str, Any] = {
        "model_path": cfg.model.path,
        "fingerprint": model_fingerprint(cfg.model.path),
        "allocator": loaded_allocator(),  # peak memory and update speed depend on it
        "openmp": wait_policy(os.environ),  # so does decode speed (agentrl/util/openmp_env.py)
        "precision": resolved_precision(cfg),  # *_if_fast and auto resolve per machine
    }
    (run_dir / RUN_META).write_text(json.dumps(meta, indent=1))


def check_resume(run_dir: Path, cfg: RunConfig, *, accept_changes: bool = False) -> None:
    """CheckpointError when ``run_dir`` is not a run of ``cfg.model`` (compared by fingerprint); ConfigError when
    ``cfg`` resolves to another precision here than when the run started, unless ``accept_changes`` (then the
    run's record takes the new precision)."""
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
    now = resolved_precision(cfg)
    changes = precision_changes(meta.get("precision"), now)
    if changes and not accept_changes:
        refuse_precision_change(str(run_dir), changes, cfg)
    if changes:
        meta["precision"] = now
        meta_file.write_text(json.dumps(meta, indent=1))
