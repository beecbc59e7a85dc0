#!/usr/bin/env bash
# Idempotent set-up of the third-party tier (tests/interop/thirdparty/): components this project did not
# write, each installed from PyPI in its own environment under .venv-thirdparty/, as their users install them.
# Each step is stamped (skipped when done); run after scripts/setup.sh (.venv, .venv-openenv) and
# scripts/docker_setup.sh (the Harbor verifier's base image is built on agentrl-python:1).
#   mcp-time/       the official MCP time server (mcp-server-time), its own `mcp` version
#   harbor/         harbor 0.26 (needs Python >= 3.12: taken from python3.12/3.13 on PATH or pyenv)
#   harbor-task/    a task made by `harbor init` (unchanged; the tests adapt a copy to this offline engine)
#   openenv-echo/   the echo env `openenv init` generates (served by .venv-openenv's uvicorn)
#   vf-envs/        tests/interop/thirdparty/reverse_text, a verifiers environment package, pip-installed
#   openai-agent/   the official openai client, for the command agent tests/interop/thirdparty/openai_agent.py
# A step that cannot run (no Python >= 3.12, no Docker) says so; the tests that need it then skip
# (under CI=true they fail, as the Docker tests do).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=.venv-thirdparty
PY=${PYTHON:-python3}
MCP_TIME=mcp-server-time==2026.10.19
HARBOR=harbor==0.26.0
OPENAI=openai==2.54.0
mkdir -p "$ROOT"
quiet() { grep -v "is ignored: it is neither a file nor a directory" || true; }
stamped() { [ -f "$ROOT/$1/.done" ] && [ "$(cat "$ROOT/$1/.done")" = "$2" ]; }

if ! stamped mcp-time "$MCP_TIME"; then
  echo "[thirdparty] $MCP_TIME in $ROOT/mcp-time"
  rm -rf "$ROOT/mcp-time" && "$PY" -m venv "$ROOT/mcp-time"
  "$ROOT/mcp-time/bin/pip" install -q "$MCP_TIME" 2>&1 | quiet
  "$ROOT/mcp-time/bin/python" -c "import mcp_server_time" && echo "$MCP_TIME" > "$ROOT/mcp-time/.done"
fi

if ! stamped openai-agent "$OPENAI"; then
  echo "[thirdparty] $OPENAI in $ROOT/openai-agent"
  rm -rf "$ROOT/openai-agent" && "$PY" -m venv "$ROOT/openai-agent"
  "$ROOT/openai-agent/bin/pip" install -q "$OPENAI" 2>&1 | quiet
  "$ROOT/openai-agent/bin/python" -c "import openai" && echo "$OPENAI" > "$ROOT/openai-agent/.done"
fi

py312=""
for candidate in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 \
    && "$candidate" -c "import sys; sys.exit(sys.version_info < (3, 12))" 2>/dev/null; then
    py312=$(command -v "$candidate")
    break
  fi
done
if [ -z "$py312" ]; then
  echo "[thirdparty] no Python >= 3.12 (harbor 0.26 needs one): the harbor-init tests will skip" >&2
elif ! stamped harbor "$HARBOR"; then
  echo "[thirdparty] $HARBOR in $ROOT/harbor (Python $("$py312" -c 'import platform; print(platform.python_version())'))"
  rm -rf "$ROOT/harbor" && "$py312" -m venv "$ROOT/harbor"
  "$ROOT/harbor/bin/pip" install -q "$HARBOR" 2>&1 | quiet
  "$ROOT/harbor/bin/harbor" --version >/dev/null && echo "$HARBOR" > "$ROOT/harbor/.done"
fi
if stamped harbor "$HARBOR" && ! stamped harbor-task "$HARBOR"; then
  echo "[thirdparty] harbor init agentrl/hello-file -> $ROOT/harbor-task"
  rm -rf "$ROOT/harbor-task" && mkdir -p "$ROOT/harbor-task"
  (cd "$ROOT/harbor-task" && ../harbor/bin/harbor init --task agentrl/hello-file </dev/null >/dev/null)
  test -f "$ROOT/harbor-task/hello-file/task.toml" && echo "$HARBOR" > "$ROOT/harbor-task/.done"
fi

# The verifier image of a `harbor init` task installs pytest with uv from the network; offline, the same
# pytest is baked into a local base built FROM agentrl-python:1 (wheels downloaded here, no network in the build).
PYTEST_IMAGE=agentrl-harbor-pytest:1
if timeout 10 docker info >/dev/null 2>&1 && ! docker image inspect "$PYTEST_IMAGE" >/dev/null 2>&1; then
  echo "[thirdparty] building $PYTEST_IMAGE (pytest 8.4.1 + pytest-json-ctrf 0.3.5 on agentrl-python:1)"
  ctx=$(mktemp -d)
  .venv/bin/pip install -q --no-compile --target "$ctx/site" --python-version 3.11 --only-binary=:all: \
    "pytest==8.4.1" "pytest-json-ctrf==0.3.5" 2>&1 | quiet
  rm -rf "$ctx/site/bin"
  printf '#!/bin/sh\nexec python3 -m pytest "$@"\n' > "$ctx/pytest" && chmod 755 "$ctx/pytest"
  printf 'FROM agentrl-python:1\nCOPY site /usr/lib/python3/dist-packages/\nCOPY pytest /usr/local/bin/pytest\n' \
    > "$ctx/Dockerfile"
  docker build -q --network none -t "$PYTEST_IMAGE" "$ctx" >/dev/null 2>&1
  rm -rf "$ctx"
fi

if [ -x .venv-openenv/bin/openenv ] && ! stamped openenv-echo "$(.venv-openenv/bin/pip show openenv | grep ^Version)"; then
  echo "[thirdparty] openenv init echo_env -> $ROOT/openenv-echo"
  rm -rf "$ROOT/openenv-echo" && mkdir -p "$ROOT/openenv-echo"
  (cd "$ROOT/openenv-echo" && ../../.venv-openenv/bin/openenv init echo_env </dev/null >/dev/null)
  .venv-openenv/bin/pip show openenv | grep ^Version > "$ROOT/openenv-echo/.done"
fi

vf_src=tests/interop/thirdparty/reverse_text
vf_hash=$(cat "$vf_src"/pyproject.toml "$vf_src"/*.py | sha256sum | cut -c1-16)
if ! stamped vf-envs "$vf_hash"; then
  echo "[thirdparty] pip install $vf_src -> $ROOT/vf-envs (the package only; verifiers itself is in .venv)"
  rm -rf "$ROOT/vf-envs"
  .venv/bin/pip install -q --no-deps --no-build-isolation --target "$ROOT/vf-envs" "./$vf_src" 2>&1 | quiet
  echo "$vf_hash" > "$ROOT/vf-envs/.done"
fi
echo "[thirdparty] ready: $(ls "$ROOT" | tr '\n' ' ')"
