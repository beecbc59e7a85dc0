#!/usr/bin/env bash
# Idempotent set-up of what only the test suite needs, on top of scripts/setup.sh's .venv (scripts/test.sh runs
# both): TRL (the smoke test of bench/studies/compare_trl.py), the OpenEnv server venv, SGLang 0.5.23's source (its
# argument parser and tensor deserializer, run by tests/sglang_real/) and its real CPU server (.venv-sglang,
# scripts/setup_sglang.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || { echo "[test-deps] no .venv: run bash scripts/setup.sh first" >&2; exit 1; }
stamp=.venv/.agentrl-test-deps-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup_test_deps.sh -nt "$stamp" ]; then
  # compare: TRL for bench/studies/compare_trl.py, whose smoke test is part of the suite (~20 s to install).
  echo "[test-deps] installing agentrl[compare] (TRL)"
  .venv/bin/pip install -q -e ".[dev,interop,compare]" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  .venv/bin/python -c "import trl" && touch "$stamp"
fi
# The OpenEnv env servers of the interop tests run in their own venv: the `openenv` package pins fastmcp<4 (so
# mcp<2), which verifiers in .venv refuses (docs/interop.md). Only its server side is needed.
if ! .venv-openenv/bin/python -c "import openenv.core" 2>/dev/null; then
  echo "[test-deps] creating .venv-openenv with openenv==0.10.0 (OpenEnv test servers)"
  "$PY" -m venv .venv-openenv
  .venv-openenv/bin/pip install -q "openenv==0.10.0" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
fi
# SGLang 0.5.23's own code for the tests that run it (its ServerArgs parser, its tensor deserializer), outside
# the venv's import path: --no-deps, plus triton (`import sglang` needs it; ~1 GB) and what those modules import.
sglang_dir=.venv/sglang-0.5.23
if [ ! -f "$sglang_dir/.complete" ]; then
  echo "[test-deps] installing SGLang 0.5.23's source (no dependencies) into $sglang_dir"
  rm -rf "$sglang_dir"
  .venv/bin/pip install -q --no-deps --target "$sglang_dir" "sglang==0.5.23" "triton==3.9.0" "msgspec==0.23.0" \
    "pybase64==1.5.1" "pyzmq==27.3.0" "ipython==9.18.1" "traitlets==5.16.1" 2>&1 | grep -v "is ignored" || true
  PYTHONPATH="$sglang_dir" .venv/bin/python -c "from sglang.srt.server_args import ServerArgs" && touch "$sglang_dir/.complete"
fi
# SGLang's real server on CPU (~3.5 GB). Exit 3: this machine cannot run it (said why); the live tier skips.
rc=0
bash scripts/setup_sglang.sh || rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
  exit "$rc"
fi
echo "[test-deps] test dependencies ready"
