#!/usr/bin/env bash
# Idempotent set-up of BFCL (bfcl-eval from PyPI) in a venv of its own, .venv-bfcl, for agentrl/BFCL-MultiTurn-v0
# (envs/interop/bfcl/). bfcl-eval pins numpy==1.26.4, filelock==3.20.0 and networkx==3.3, which agentrl's .venv
# does not have (numpy 2), so it cannot join pyproject's interop extra; the env drives it in a worker process.
# The package is installed unchanged with the dependencies its multi-turn path imports (the simulated APIs, the
# checker, the function-doc conversion, the Qwen FC handler), at the versions bfcl-eval pins. Its other
# dependencies are LLM vendor SDKs, sentence-transformers/torch/faiss for the memory category and web search
# clients, none of which the multi-turn categories import (tests/interop/test_bfcl_setup.py imports what is used).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-bfcl
PY=${PYTHON:-python3}
BFCL=bfcl-eval==2026.3.23
DEPS=("numpy==1.26.4" "mpmath==1.3.0" "filelock==3.20.0" "tree_sitter==0.21.3" "tree-sitter-java==0.21.0"
  "tree-sitter-javascript==0.21.4" "pydantic>=2.8.2" "python-dotenv>=1.0.1" "tenacity>=8.5.0" "openai>=1.86.0"
  overrides requests tqdm)
stamp="$BFCL ${DEPS[*]}"
if [ -f "$VENV/.done" ] && [ "$(cat "$VENV/.done")" = "$stamp" ]; then
  echo "[bfcl] $VENV ready ($BFCL)"
  exit 0
fi
echo "[bfcl] $BFCL in $VENV"
rm -rf "$VENV" && "$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --no-deps "$BFCL"
# pip then lists the dependencies left out on purpose (above); only those lines are dropped.
"$VENV/bin/pip" install -q "${DEPS[@]}" 2>&1 | { grep -v "^bfcl-eval .* requires .*, which is not installed" || true; }
"$VENV/bin/python" -c "
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler
from bfcl_eval.utils import load_dataset_entry
assert len(load_dataset_entry('multi_turn_base')) == 200
"
echo "$stamp" > "$VENV/.done"
echo "[bfcl] $VENV ready ($BFCL)"
