#!/usr/bin/env bash
# Offline build of the sandbox image: debootstrap a minimal Debian bookworm with python3, then `docker import`.
# Usage: build_offline.sh [TAG]   (default agentrl-python:1). Needs root, debootstrap and a reachable Debian mirror.
set -euo pipefail
TAG=${1:-agentrl-python:1}
# The mirror this machine's apt uses (DEBIAN_MIRROR overrides it); no registry host is named in this repository.
MIRROR=${DEBIAN_MIRROR:-$(bash "$(dirname "$0")/apt_mirror.sh" bookworm)}
ROOTFS=$(mktemp -d /tmp/agentrl-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
echo "[image] debootstrap bookworm from $MIRROR into $ROOTFS"
# python3 (not python3-minimal): the minimal package lacks most of the standard library, even json.
debootstrap --variant=minbase --include=python3 bookworm "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 \
  || { tail -20 "$ROOTFS.log" >&2; exit 1; }
rm -f "$ROOTFS.log"
# Trim what a sandbox never needs: apt caches, docs, man pages.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/*
echo "[image] docker import as $TAG"
tar -C "$ROOTFS" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'USER 65534:65534' \
  --change 'WORKDIR /' \
  --change 'CMD ["python3"]' \
  - "$TAG" >/dev/null
docker run --rm --network none "$TAG" python3 -c 'import json, sys; print("[image] ok:", sys.version.split()[0])'
