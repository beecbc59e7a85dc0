#!/usr/bin/env bash
# Start SGLang 0.5.23's real server on CPU (no GPU) from .venv-sglang (bash scripts/setup_sglang.sh), with the
# flags agentrl's training needs and the ones this CPU needs (docs/engines.md#run-here-cpu says why):
#
#   bash scripts/launch_sglang_cpu.sh MODEL_DIR PORT [extra SGLang server flags...]
#
# Environment: DTYPE (default float32: logprobs that match an fp32 trainer; bfloat16 decodes faster),
# AGENTRL_PRINT_ONLY=1 (print the command instead of running it).
# Then: engine: {kind: sglang, urls: ["http://127.0.0.1:PORT"]} in the run config (docs/engines.md).
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash $0 MODEL_DIR PORT [extra SGLang server flags...]   (e.g. models/tiny 30000)" >&2
  exit 2
fi
MODEL_DIR="$1"; PORT="$2"; shift 2
PYTHON="$(cd "$(dirname "$0")/.." && pwd)/.venv-sglang/bin/python"
if [ ! -x "$PYTHON" ]; then
  echo "error: $PYTHON is missing; run bash scripts/setup_sglang.sh first" >&2
  exit 2
fi
if [ ! -f "$MODEL_DIR/config.json" ]; then
  echo "error: $MODEL_DIR has no config.json (a Hugging Face model directory is needed)" >&2
  exit 2
fi
if [ -n "${SGLANG_RETURN_ORIGINAL_LOGPROB:-}" ]; then
  echo "error: SGLANG_RETURN_ORIGINAL_LOGPROB is set: logprobs would ignore the temperature; unset it" >&2
  exit 2
fi
# OMP_NUM_THREADS=1 and --sleep-on-idle: otherwise the idle scheduler busy-polls a core (3 tok/s on 2 cores).
cmd=(env SGLANG_USE_CPU_ENGINE=1 HF_HUB_OFFLINE=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
  "$PYTHON" -m sglang.launch_server --model-path "$MODEL_DIR" --device cpu --host 127.0.0.1 --port "$PORT"
  --dtype "${DTYPE:-float32}" --disable-overlap-schedule --sleep-on-idle --max-total-tokens 16384
  --weight-version 0 "$@")
if [ "${AGENTRL_PRINT_ONLY:-0}" = "1" ]; then
  printf ' %q' "${cmd[@]}"; printf '\n'
  exit 0
fi
exec "${cmd[@]}"
