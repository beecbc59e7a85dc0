"""Build a C++ kernel library against this torch once, cache it, and load it into ``torch.ops``.

A library is compiled with ``$CXX`` (else ``c++``) into ``$AGENTRL_KERNEL_CACHE`` (default
``~/.cache/agentrl/kernels``) under a name hashed from its sources, headers, compile flags, torch, compiler and Python
versions: a change of any of them (an AVX-512 build beside an AVX2 one, say) builds a new file instead of loading a
stale one. It is written under a temporary name and then renamed, so processes building at once never load a
half-written file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

CSRC = Path(__file__).with_name("csrc")
_BUILD_SECONDS = 300


@dataclass(frozen=True)
class KernelLibrary:
    """One library's sources (``csrc/`` files), headers and the instruction-set flags it is compiled with."""

    stem: str
    sources: tuple[str, ...]
    headers: tuple[str, ...]
    arch_flags: tuple[str, ...]

    def paths(self) -> tuple[Path, ...]:
        """The source files, then the headers."""
        return tuple(CSRC / name for name in (*self.sources, *self.headers))


def kernel_cache_dir() -> Path:
    """Where built kernels are kept: ``$AGENTRL_KERNEL_CACHE``, else ``~/.cache/agentrl/kernels``."""
    chosen = os.environ.get("AGENTRL_KERNEL_CACHE")
    return Path(chosen) if chosen else Path.home() / ".cache" / "agentrl" / "kernels"


def compiler() -> str | None:
    """The C++ compiler to build with (``$CXX``, else ``c++``), None when it is not on the path."""
    return shutil.which(os.environ.get("CXX", "c++"))


def compile_command(library: KernelLibrary, cxx: str, output: Path) -> list[str]:
    """The compiler's command line for ``library`` into ``output``."""
    torch_dir = Path(torch.__file__).parent
    abi = int(torch.compiled_with_cxx11_abi())
    return [
        cxx, "-O3", "-std=c++20", "-shared", "-fPIC", "-fopenmp", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *library.arch_flags, f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include/torch/csrc/api/include'}",
        *(str(CSRC / name) for name in library.sources), f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu",
        "-o", str(output),
    ]  # fmt: skip


def library_name(library: KernelLibrary, cxx: str) -> str:
    """The cached file's name: the stem and a hash of everything the binary depends on, the flags included."""
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    texts = [path.read_text() for path in library.paths()]
    key = "\n".join((*texts, torch.__version__, version, sys.version, " ".join(library.arch_flags)))
    return f"{library.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"


def build(library: KernelLibrary, cxx: str) -> Path:
    """The compiled library, built now unless the cache holds it."""
    cache = kernel_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / library_name(library, cxx)
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        partial = Path(scratch) / target.name
        done = subprocess.run(
            compile_command(library, cxx, partial), capture_output=True, text=True, timeout=_BUILD_SECONDS, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{cxx} failed ({done.returncode}): {done.stderr.strip()[-600:]}")
        os.replace(partial, target)
    return target


def build_and_load(library: KernelLibrary, cxx: str | None) -> str | None:
    """Build ``library`` with ``cxx`` (unless the cache holds it) and load it; None when loaded, else why not."""
    if cxx is None:
        return (
            f"no C++ compiler ({os.environ.get('CXX', 'c++')}) to build agentrl's own CPU kernels; install one "
            "(Debian: build-essential) or set CXX"
        )
    try:
        torch.ops.load_library(str(build(library, cxx)))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"agentrl's own CPU kernels did not build or load ({exc})"
    return None
