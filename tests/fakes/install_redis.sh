#!/usr/bin/env bash
# The state store's tests run against a real Redis too (tests/store_backends.py starts its own
# redis-server): install Debian's package when missing (apt-get, as root; elsewhere install
# redis-server with your system's package manager).
set -euo pipefail
if command -v redis-server >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_redis.sh: install redis-server (Debian: apt-get install -y --no-install-recommends" \
    "redis-server) for the state store's Redis tests" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends -qq redis-server >/dev/null
