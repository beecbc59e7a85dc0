"""Versioned weight directories (``<root>/v000007``) that engines load by path (SGLang's
``/update_weights_from_disk``): one name format and one writer.

A version is written under a temporary name and renamed into place, so a server never reads a
half-written directory; versions older than the newest ``keep`` are pruned. Only names of this
format are ever pruned, whatever else the root holds.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentrl.errors import EngineConfigError

_NAME = re.compile(r"^v\d{6,}$")


def version_dir(root: str | Path, version: int) -> Path:
    """Where weights of policy ``version`` live under ``root``."""
    if version < 0:
        raise ValueError(f"weight version must be >= 0, got {version}")
    return Path(root) / f"v{version:06d}"


def publish_weights(root: str | Path, version: int, write: Callable[[Path], None], *, keep: int = 2) -> Path:
    """Call ``write(tmp_dir)``, rename ``tmp_dir`` to ``version_dir(root, version)``, prune old versions."""
    final = version_dir(root, version)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp-{final.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    versions = sorted((p for p in final.parent.iterdir() if _NAME.match(p.name) and p.is_dir()), key=_version)
    for old in versions[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def publish_state_dict(root: str | Path | None, state: Mapping[str, Any], version: int, servers: str) -> Path:
    """Save a state dict as ``model.safetensors`` in the version directory under ``root`` (``engine.weights_dir``),
    which the ``servers`` load by path."""
    if not root:
        raise EngineConfigError(
            f"update_weights got a state dict but engine.weights_dir is unset; set it to a directory the {servers} "
            "servers can read"
        )
    from safetensors.torch import save_file

    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}  # clone: no shared storage
    return publish_weights(root, version, lambda d: save_file(tensors, str(d / "model.safetensors")))


def _version(path: Path) -> int:
    return int(path.name[1:])
