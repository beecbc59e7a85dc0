"""The ``agentrl`` command's memory allocator: TCMalloc when the machine has it, glibc's malloc otherwise.

glibc keeps freed blocks in its heap and grows it when the update's many 4-32 MB activation tensors are freed in
another order than they were made: the main job's float32 update peaked 1.5-2.7 GB higher under glibc than
under TCMalloc on the same batches, and ran 1.15x slower (docs/results/memory-and-speed.md). PyTorch's CPU
tuning guide and vLLM's CPU build recommend TCMalloc for the same reason. An allocator has to be in place before
the process allocates, so the command re-executes itself once with ``LD_PRELOAD`` set, then removes that
variable again, so sandboxes, servers and tools it starts keep the system allocator.

``AGENTRL_ALLOCATOR``: ``auto`` (default: TCMalloc if found, else the system's), ``tcmalloc`` (an error if
missing), ``system`` (never re-execute).
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

from agentrl.errors import ConfigError

ENV_SETTING = "AGENTRL_ALLOCATOR"
_MARKER = "_AGENTRL_ALLOCATOR_PRELOADED"  # set on the re-executed process: what it preloaded
_CHOICES = ("auto", "tcmalloc", "system")
_TCMALLOC_NAMES = ("tcmalloc_minimal", "tcmalloc")
_INSTALL_HINT = "apt-get install libtcmalloc-minimal4 (scripts/setup.sh does), or set AGENTRL_ALLOCATOR=system"


def find_tcmalloc() -> str | None:
    """The shared library to preload (a soname the dynamic linker resolves), or None when none is installed."""
    for name in _TCMALLOC_NAMES:
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def loaded_allocator() -> str:
    """``tcmalloc`` when this process has TCMalloc mapped, else ``system``."""
    maps = Path("/proc/self/maps")
    if maps.is_file() and "libtcmalloc" in maps.read_text():
        return "tcmalloc"
    return "system"


def use_preferred_allocator() -> None:
    """Re-execute this command under TCMalloc when it is wanted, found and not loaded yet; otherwise return.

    In the re-executed process, drop the preload from the environment its children inherit.
    """
    preloaded = os.environ.pop(_MARKER, None)
    if preloaded is not None:
        _forget_preload(preloaded)
        return
    setting = os.environ.get(ENV_SETTING, "auto").strip().lower() or "auto"
    if setting not in _CHOICES:
        raise ConfigError(f"{ENV_SETTING}={setting!r} is not one of {_CHOICES}; unset it for the default (auto)")
    # LD_PRELOAD is the Linux dynamic linker's; elsewhere there is nothing to re-execute for
    if setting == "system" or not sys.platform.startswith("linux") or loaded_allocator() == "tcmalloc":
        return
    library = find_tcmalloc()
    if library is None:
        if setting == "tcmalloc":
            raise ConfigError(f"{ENV_SETTING}=tcmalloc but no TCMalloc library is installed: {_INSTALL_HINT}")
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, (library, env.get("LD_PRELOAD", ""))))
    env[_MARKER] = library
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _forget_preload(library: str) -> None:
    """Remove ``library`` from ``LD_PRELOAD`` (it stays loaded here; children start without it)."""
    rest = [entry for entry in os.environ.get("LD_PRELOAD", "").split() if entry != library]
    if rest:
        os.environ["LD_PRELOAD"] = " ".join(rest)
    else:
        os.environ.pop("LD_PRELOAD", None)
