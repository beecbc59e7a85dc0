#!/usr/bin/env bash
# Start a real SGLang server (GPU machines) for a model directory, with the flags agentrl's training needs.
#
#   scripts/launch_sglang.sh MODEL_DIR [PORT] [extra sglang args...]
#
# - agentrl sends input_ids and reads output_ids only (no retokenisation drift); the tokenizer stays
#   loaded because stop strings are matched on decoded text (--skip-tokenizer-init would disable them);
# - --weight-version 0: agentrl versions are integers (the training step), set by /update_weights_from_disk;
# - SGLANG_RETURN_ORIGINAL_LOGPROB unset: logprobs must be log_softmax(logits / T) (SGLang's default);
# - binds to 127.0.0.1 unless HOST is set (e.g. HOST=0.0.0.0 for a multi-node run behind a firewall).
# Point the run config at it: engine: {kind: sglang, urls: ["http://HOST:PORT"], weights_dir: <shared dir>}.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 MODEL_DIR [PORT] [extra sglang args...]" >&2
  exit 2
fi
MODEL_DIR="$1"; shift
PORT="${1:-30000}"; [ $# -gt 0 ] && shift
HOST="${HOST:-127.0.0.1}"
PYTHON="${PYTHON:-$(dirname "$0")/../.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python

if [ ! -f "$MODEL_DIR/config.json" ]; then
  echo "error: $MODEL_DIR has no config.json (a Hugging Face model directory is needed)" >&2
  exit 2
fi
if ! "$PYTHON" -c "import sglang" 2>/dev/null; then
  echo "error: sglang is not installed for $PYTHON; install it on a GPU machine: pip install 'agentrl[sglang]'" >&2
  exit 2
fi
if [ -n "${SGLANG_RETURN_ORIGINAL_LOGPROB:-}" ]; then
  echo "error: SGLANG_RETURN_ORIGINAL_LOGPROB is set: logprobs would ignore the temperature; unset it" >&2
  exit 2
fi

exec "$PYTHON" -m sglang.launch_server \
  --model-path "$MODEL_DIR" \
  --host "$HOST" --port "$PORT" \
  --weight-version 0 \
  --mem-fraction-static "${MEM_FRACTION:-0.8}" \
  "$@"
