#!/usr/bin/env bash
# Idempotent Docker set-up for tests and CI: install docker.io + debootstrap (Debian, as root) when no
# engine exists, start dockerd without systemd when it is not running, wait for it, build the sandbox image.
# Fast (< 1 s) when everything is already up. Honours DOCKER_HOST; IMAGE overrides the tag.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-agentrl-python:1}
LOG=${DOCKERD_LOG:-/var/log/dockerd.log}

engine_up() { timeout 10 docker info >/dev/null 2>&1; }
# The engine outlives this script, so it must not keep the caller's open files: a lock the caller holds
# (flock around a test run, say) would otherwise stay held until the engine stops.
start_detached() {
  (
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ]; then eval "exec $n>&-" 2>/dev/null || true; fi
    done
    exec setsid "$@"
  ) &
}
dockerd_running() { pgrep -x dockerd >/dev/null 2>&1 || pidof dockerd >/dev/null 2>&1; }
wait_engine() {  # up to $1 half-second tries
  for _ in $(seq 1 "$1"); do
    engine_up && return 0
    dockerd_running || return 1
    sleep 0.5
  done
  return 1
}

if ! engine_up; then
  if [ -n "${DOCKER_HOST:-}" ]; then
    echo "[docker] DOCKER_HOST=$DOCKER_HOST does not answer; not starting a local engine" >&2
    exit 1
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "[docker] no Docker engine and not root: start dockerd yourself (or use ProcessSandboxConfig)" >&2
    exit 1
  fi
  if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    echo "[docker] installing docker.io and debootstrap from Debian"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >/dev/null
  fi
  if ! dockerd_running; then
    echo "[docker] starting dockerd (log: $LOG)"
    # No systemd here: run it detached (setsid). Defaults (overlay2, iptables-nft) worked on this machine.
    start_detached dockerd >"$LOG" 2>&1 < /dev/null
    wait_engine 40 || true
  fi
  if ! engine_up && ! dockerd_running; then
    # Sandboxes need no network: where iptables or the bridge cannot be set up (nested containers), run without.
    echo "[docker] dockerd exited; retrying with --iptables=false --bridge=none (log: $LOG)"
    start_detached dockerd --iptables=false --ip6tables=false --bridge=none >>"$LOG" 2>&1 < /dev/null
  fi
  wait_engine 60 || true
  if ! engine_up; then
    echo "[docker] dockerd did not come up; last log lines:" >&2
    tail -20 "$LOG" >&2 || true
    exit 1
  fi
fi
echo "[docker] engine up: $(docker version --format '{{.Server.Version}}' 2>/dev/null)"
bash scripts/build_sandbox_image.sh "$IMAGE"
