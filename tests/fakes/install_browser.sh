#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's headless Chromium through its driver: install both
# when missing (apt-get, as root; elsewhere install them with your system's package manager).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_browser.sh: install chromium and chromium-driver (Debian: apt-get install -y" \
    "--no-install-recommends chromium chromium-driver) for the dashboard's browser tests" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -qq \
  chromium chromium-driver >/dev/null
