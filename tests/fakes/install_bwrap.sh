#!/usr/bin/env bash
# The agent sandbox (SWITCHBOARD_AGENT_SANDBOX, default auto) runs agents under bubblewrap, and its
# tests run the real program: install Debian's package when missing (apt-get, as root; elsewhere
# install bubblewrap with your system's package manager).
set -euo pipefail
if command -v bwrap >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_bwrap.sh: install bubblewrap (Debian: apt-get install -y --no-install-recommends" \
    "bubblewrap) for the agent sandbox's tests" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -qq bubblewrap >/dev/null
