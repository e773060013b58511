#!/usr/bin/env bash
# The agent sandbox (SWITCHBOARD_AGENT_SANDBOX, default auto) runs agents under bubblewrap, and its
# tests (tests/test_sandbox*.py) run the real program, drop capabilities with setpriv (util-linux)
# and start a system python3 as another user: install Debian's packages when missing (apt-get,
# as root; elsewhere install them with your system's package manager).
set -euo pipefail
if command -v bwrap >/dev/null && command -v setpriv >/dev/null && [ -x /usr/bin/python3 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_bwrap.sh: install bubblewrap, util-linux and python3 (Debian: apt-get install" \
    "-y --no-install-recommends bubblewrap util-linux python3) for the agent sandbox's tests" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -qq \
  bubblewrap util-linux python3 >/dev/null
