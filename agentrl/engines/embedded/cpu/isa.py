"""The CPU features the kernel selection may use: this CPU's, capped by ``AGENTRL_CPU_CAPABILITY``.

The cap plays the part ``ATEN_CPU_CAPABILITY`` plays for torch's own kernels (and ``ONEDNN_MAX_CPU_ISA`` for
oneDNN's, ``MKL_ENABLE_INSTRUCTIONS`` for MKL's): on a CPU with AVX-512 the portable path can be forced and measured
beside the native one. ``native`` (or unset): every flag; ``avx2``: no AVX-512 or AMX (an AVX2/FMA laptop CPU);
``none``: no flag at all (torch ops everywhere).
"""

from __future__ import annotations

import os
import platform

from agentrl.errors import EngineConfigError
from agentrl.util.cpu_flags import cpu_flags

CAPABILITY_ENV = "AGENTRL_CPU_CAPABILITY"
CAPABILITIES = ("native", "avx2", "none")


def capability() -> str:
    """The cap in force (``native`` when unset); a value not in ``CAPABILITIES`` is an error naming them."""
    chosen = os.environ.get(CAPABILITY_ENV, "").strip().lower() or "native"
    if chosen not in CAPABILITIES:
        raise EngineConfigError(f"{CAPABILITY_ENV}={chosen!r} is not one of {CAPABILITIES}; unset it or pick one")
    return chosen


def kernel_flags() -> set[str]:
    """This CPU's flags that kernels may use under the cap."""
    cap = capability()
    if cap == "none":
        return set()
    flags = cpu_flags()
    if cap == "avx2":
        return {flag for flag in flags if not flag.startswith(("avx512", "amx"))}
    return flags


def machine() -> str:
    """The instruction set family: ``x86_64``, ``aarch64`` or another ``platform.machine()`` name."""
    name = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(name, name)
