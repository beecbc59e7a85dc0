#!/usr/bin/env bash
# Build the sandbox image offline (debootstrap + docker import) unless it already exists.
# Usage: scripts/build_sandbox_image.sh [TAG] [--force]   (TAG default: agentrl-python:1, the config default)
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-agentrl-python:1}
if [ "${2:-}" != "--force" ] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "[image] $TAG present"
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  else
    echo "[image] debootstrap missing: install it (apt-get install debootstrap) or build with: docker build -t $TAG sandboxes/images/python" >&2
    exit 1
  fi
fi
exec bash sandboxes/images/python/build_offline.sh "$TAG"
