#!/usr/bin/env bash
# Start one SGLang server (GPU machines) for a model directory, with the flags agentrl's training needs.
#
#   bash scripts/launch_sglang.sh MODEL_DIR PORT GPUS [extra SGLang server flags...]
#
#   GPUS   the GPU indices this server owns, e.g. 0, or 2,3 (exported as CUDA_VISIBLE_DEVICES; more than
#          one GPU runs the server tensor-parallel over them: --tp-size = their count)
#   extra  passed to SGLang unchanged, e.g. --context-length 8192 (the flags below are set here: do not repeat them)
#
# Environment: HOST (bind address, default 127.0.0.1; 0.0.0.0 for a multi-node run behind a firewall),
# MEM_FRACTION (--mem-fraction-static, default 0.8), PYTHON (default .venv/bin/python, else python),
# AGENTRL_PRINT_ONLY=1 (print the command instead of running it).
#
# What training needs, and why:
# - agentrl sends input_ids and reads output_ids only (no retokenisation drift); the tokenizer stays loaded
#   because stop strings are matched on decoded text (--skip-tokenizer-init would disable them);
# - --weight-version 0: agentrl versions are integers (the training step), set by every weight update;
# - SGLANG_RETURN_ORIGINAL_LOGPROB unset: logprobs must be log_softmax(logits / T) (SGLang's default);
#   it is an environment variable, invisible over HTTP, so it is refused here.
# Every flag used here is one SGLang 0.5.23's ServerArgs parser accepts (tests/engines/test_launch_sglang.py).
# Point the run config at it: engine: {kind: sglang, urls: ["http://HOST:PORT"], weights_dir: <shared dir>}.
set -euo pipefail

usage="usage: bash $0 MODEL_DIR PORT GPUS [extra SGLang server flags...]   (e.g. models/qwen3-1.7b 30000 0)"
if [ $# -lt 3 ]; then
  echo "$usage" >&2
  exit 2
fi
MODEL_DIR="$1"; PORT="$2"; GPUS="$3"; shift 3
HOST="${HOST:-127.0.0.1}"
PYTHON="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python

if ! [[ "$PORT" =~ ^[0-9]+$ ]] || [ "$PORT" -lt 1 ] || [ "$PORT" -gt 65535 ]; then
  echo "error: PORT must be a number in 1..65535, got '$PORT'. $usage" >&2
  exit 2
fi
if ! [[ "$GPUS" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
  echo "error: GPUS must be GPU indices like 0 or 2,3, got '$GPUS'. $usage" >&2
  exit 2
fi
TP_SIZE=$(( $(tr -cd ',' <<< "$GPUS" | wc -c) + 1 ))
for arg in "$@"; do
  case "$arg" in
    --model-path|--model-path=*|--model|--model=*|--host|--host=*|--port|--port=*|--tp-size|--tp-size=*|\
    --tensor-parallel-size|--tensor-parallel-size=*|--weight-version|--weight-version=*|--skip-tokenizer-init)
      echo "error: $arg is set by this script (or breaks training); remove it from the extra flags" >&2
      exit 2;;
  esac
done
if [ ! -f "$MODEL_DIR/config.json" ]; then
  echo "error: $MODEL_DIR has no config.json (a Hugging Face model directory is needed)" >&2
  exit 2
fi
if [ -n "${SGLANG_RETURN_ORIGINAL_LOGPROB:-}" ]; then
  echo "error: SGLANG_RETURN_ORIGINAL_LOGPROB is set: logprobs would ignore the temperature; unset it" >&2
  exit 2
fi

cmd=("$PYTHON" -m sglang.launch_server
  --model-path "$MODEL_DIR"
  --host "$HOST" --port "$PORT"
  --tp-size "$TP_SIZE"
  --weight-version 0
  --mem-fraction-static "${MEM_FRACTION:-0.8}"
  "$@")
if [ "${AGENTRL_PRINT_ONLY:-0}" = "1" ]; then
  printf 'CUDA_VISIBLE_DEVICES=%s' "$GPUS"
  printf ' %q' "${cmd[@]}"
  printf '\n'
  exit 0
fi
if ! "$PYTHON" -c "import sglang" 2>/dev/null; then
  echo "error: sglang is not installed for $PYTHON; install it on a GPU machine: pip install 'agentrl[sglang]'" >&2
  exit 2
fi
export CUDA_VISIBLE_DEVICES="$GPUS"
exec "${cmd[@]}"
