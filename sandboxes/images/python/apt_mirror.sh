#!/usr/bin/env bash
# Print the Debian mirror this machine's apt uses for the main suite (default bookworm), read from apt's own
# configuration (`apt-get indextargets`: one-line and deb822 sources, APT_CONFIG honoured), so a machine whose
# apt points at a local mirror builds from it. No host is named here: without an apt source this fails.
# Usage: apt_mirror.sh [SUITE]
set -euo pipefail
SUITE=${1:-bookworm}
targets=$(apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE)' 2>/dev/null | sort -u || true)
# The suite itself, else any main suite (no -security/-updates/-backports part) of the same archive.
mirror=$(awk -v s="$SUITE" '$2 == s {print $1; exit}' <<< "$targets")
[ -n "$mirror" ] || mirror=$(awk '$2 !~ /-/ {print $1; exit}' <<< "$targets")
if [ -z "$mirror" ]; then
  echo "no Debian source in this machine's apt configuration (apt-get indextargets lists none); set" \
    "DEBIAN_MIRROR=URL of a Debian mirror, or add one to /etc/apt/sources.list.d/" >&2
  exit 1
fi
echo "${mirror%/}"
