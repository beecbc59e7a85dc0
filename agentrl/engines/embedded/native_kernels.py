"""agentrl's own CPU kernels for bf16 decode steps on AVX512-BF16 (``csrc/``), built with the C++ compiler once.

- ``linear`` (``csrc/linear.cpp``): a matmul over its own packed weight copy (``pack_weight``). SGLang's
  ``weight_packed_linear`` does not overlap its weight stream with its arithmetic; here each thread requests the
  next 32-column weight block while it multiplies the current one: SmolLM2-135M's projections streamed at 24 rows
  ran 1.25-1.32x faster on a 2-core AVX512-BF16 EPYC, at SGLang's rate at 1-2 rows.
- ``decode_attention`` (``csrc/decode_attention.cpp``): SGLang's ``decode_attention_cpu`` reduces every (head, token)
  dot product across a vector on its own, which at head_dim 64, not memory, set its pace. This one reduces sixteen
  tokens' dot products together, shares each value row across a KV head's query group, and requests the cache rows
  ahead: 1.2-2.7x faster at the engine's decode sizes there (most at short windows). It reads the slot cache's
  ``[rows_cap, kv_heads, cols_cap, head_dim]`` buffers directly, no token table.
- ``decode_layers`` (``csrc/decode_layers.cpp``): a decode step's layers and head, the calls the lean forward's Python
  loop makes, in the same order on the same tensors (its logits, bit for bit), from C++: at batch 1 there, Python
  between the ~360 calls had been a fifth of a step.

Numbers: docs/results/memory-and-speed.md. The sources are compiled once per source, torch and compiler version with
``$CXX`` (else ``c++``) into ``$AGENTRL_KERNEL_CACHE`` (default ``~/.cache/agentrl/kernels``), about 10 seconds
(``scripts/setup.sh`` does it); ``native_problem`` says why they cannot be used (then the engine keeps SGLang's
matmul and attention and the Python loop).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from agentrl.util.cpu_flags import cpu_flags

_CSRC = Path(__file__).with_name("csrc")
SOURCES = tuple(_CSRC / name for name in ("decode_attention.cpp", "linear.cpp", "decode_layers.cpp"))
HEADERS = tuple(_CSRC / name for name in ("decode_attention.h", "linear.h"))
REQUIRED_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512_bf16")
HEAD_DIMS = (64, 128)
_ARCH_FLAGS = ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mfma")
_BUILD_SECONDS = 300


def kernel_cache_dir() -> Path:
    """Where built kernels are kept: ``$AGENTRL_KERNEL_CACHE``, else ``~/.cache/agentrl/kernels``."""
    chosen = os.environ.get("AGENTRL_KERNEL_CACHE")
    return Path(chosen) if chosen else Path.home() / ".cache" / "agentrl" / "kernels"


def _compiler() -> str | None:
    chosen = os.environ.get("CXX", "c++")
    return shutil.which(chosen)


def _compile_command(compiler: str, output: Path) -> list[str]:
    torch_dir = Path(torch.__file__).parent
    abi = int(torch.compiled_with_cxx11_abi())
    return [
        compiler, "-O3", "-std=c++20", "-shared", "-fPIC", "-fopenmp", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        *_ARCH_FLAGS, f"-I{torch_dir / 'include'}", f"-I{torch_dir / 'include/torch/csrc/api/include'}",
        *map(str, SOURCES), f"-L{torch_dir / 'lib'}", "-lc10", "-ltorch_cpu",
        "-o", str(output),
    ]  # fmt: skip


def _library_name(compiler: str) -> str:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    texts = [path.read_text() for path in (*SOURCES, *HEADERS)]
    key = "\n".join((*texts, torch.__version__, version, sys.version, " ".join(_ARCH_FLAGS)))
    return f"agentrl_kernels-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"


def _build(compiler: str) -> Path:
    """The compiled library, built now unless the cache holds it (written under a temporary name, then renamed, so
    processes building at once never load a half-written file)."""
    cache = kernel_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / _library_name(compiler)
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        partial = Path(scratch) / target.name
        done = subprocess.run(
            _compile_command(compiler, partial), capture_output=True, text=True, timeout=_BUILD_SECONDS, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{compiler} failed ({done.returncode}): {done.stderr.strip()[-600:]}")
        os.replace(partial, target)
    return target


@functools.lru_cache(maxsize=1)
def native_problem() -> str | None:
    """Why agentrl's own CPU kernels cannot run here (None when they are built, loaded and the attention matched torch
    on a probe; the layer loop's probe is its tests': it makes SGLang's calls, bit for bit)."""
    missing = [f for f in REQUIRED_CPU_FLAGS if f not in cpu_flags()]
    if missing:
        return f"this CPU lacks {', '.join(missing)}, which agentrl's own CPU kernels need"
    if not hasattr(torch.ops.agentrl, "decode_layers"):
        problem = build_and_load(_compiler())
        if problem is not None:
            return problem
    return _probe()


def build_and_load(compiler: str | None) -> str | None:
    """Build the kernel with ``compiler`` (unless the cache holds it) and load it; None when loaded, else why not."""
    if compiler is None:
        return (
            f"no C++ compiler ({os.environ.get('CXX', 'c++')}) to build agentrl's own CPU kernels; install one "
            "(Debian: build-essential) or set CXX"
        )
    try:
        torch.ops.load_library(str(_build(compiler)))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"agentrl's own CPU kernels did not build or load ({exc})"
    return None


def _probe() -> str | None:
    """The attention against float32 attention on a small ragged batch, storing new keys/values, and the matmul
    against ``F.linear`` (bf16 rounding apart)."""
    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(torch.bfloat16)

    q, keys, values = rand(2, 6, 64), rand(3, 2, 40, 64), rand(3, 2, 40, 64)
    fresh_k, fresh_v = keys[:2, :, 30].clone(), values[:2, :, 30].clone()
    want = reference_attention(q, keys, values, torch.tensor([31, 17]), 30, 0.125)
    keys[:, :, 30], values[:, :, 30] = 0, 0
    got = torch.ops.agentrl.decode_attention(q, keys, values, torch.tensor([31, 17]), 30, 0.125, fresh_k, fresh_v)
    x, weight, bias = rand(13, 64), rand(64, 64), rand(64)
    checks = {
        "decode attention": (got, want),
        "decode attention storing the new keys": (keys[:2, :, 30], fresh_k),
        "matmul": (linear(x, pack_weight(weight), bias), F.linear(x.float(), weight.float(), bias.float())),
    }
    for name, (got, want) in checks.items():
        if not torch.allclose(got.float(), want.float(), atol=2e-2, rtol=2e-2):
            return f"agentrl's {name} differed from torch's on a probe (max {(got.float() - want).abs().max():.3g})"
    return None


def reference_attention(
    q_rhd: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor, write_col: int, scale: float
) -> torch.Tensor:
    """What ``decode_attention`` computes, in float32 torch: row ``r`` attends its ``lengths[r]`` columns ending at
    ``write_col`` of ``keys``/``values [rows, kv_heads, cols, dim]``; returns ``[R, heads, dim]``."""
    group = q_rhd.shape[1] // keys.shape[1]
    out = []
    for r, length in enumerate(lengths.tolist()):
        window = slice(write_col + 1 - length, write_col + 1)
        k = keys[r, :, window].float().repeat_interleave(group, 0)
        v = values[r, :, window].float().repeat_interleave(group, 0)
        out.append(F.scaled_dot_product_attention(q_rhd[r].float()[:, None], k, v, scale=scale)[:, 0])
    return torch.stack(out)


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 ``weight [N, K]`` (N a multiple of 32, K even) in the layout ``linear`` reads (a copy)."""
    return torch.ops.agentrl.pack_weight(weight.contiguous())


def linear(x_td: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` over ``pack_weight``'s copy, in bf16; a bias is added in float32 (a bf16 one is
    converted per call: biases are small, and an in-place update stays live)."""
    return torch.ops.agentrl.linear(x_td, packed, None if bias is None else bias.float())


def shape_problem(shape: tuple[int, int]) -> str | None:
    """Why ``linear`` cannot multiply by an ``(out, in)`` weight (None when it can)."""
    out_features, in_features = shape
    if out_features % 32 or in_features % 2:
        return f"agentrl's matmul takes out features a multiple of 32 and even in features, not {shape}"
    return None


def decode_attention(
    q_rhd: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    lengths: torch.Tensor,
    write_col: int,
    scale: float,
    new_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Each decode row's query heads ``[R, heads, dim]`` over its ``lengths[r]`` cached tokens ending at column
    ``write_col`` of one layer's ``[rows_cap, kv_heads, cols_cap, dim]`` buffers; ``new_kv``: the rows' new keys and
    values ``[R, kv_heads, dim]``, stored at ``write_col`` first. Call after ``native_problem()`` is None."""
    new_k, new_v = new_kv if new_kv is not None else (None, None)
    return torch.ops.agentrl.decode_attention(q_rhd, keys, values, lengths, write_col, scale, new_k, new_v)
