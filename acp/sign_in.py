"""How a person signs an agent in, from what the agent said in `initialize`: its name
(`agentInfo`), and a terminal sign-in method (`authMethods` entry of `type: "terminal"`, offered
because we advertise `clientCapabilities.auth.terminal`) as the exact command to run where the
agent runs: the configured agent command with the method's `args`, and its `env` in front.

ACP v1 gives `env` as an object of names to values (v2 drafts as a list of `{name, value}`);
some agents put the method under `_meta["terminal-auth"]` with their own `command`. Everything
shown is bounded and redacted: it comes from the agent."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from acp._dispatch import redact
from config import valid_text

_MAX_COMMAND = 1000  # the exact command, cut only when absurd
_MAX_NAME = 80


def agent_display_name(agent_info: dict[str, Any], fallback: str) -> str:
    """The agent as it names itself (`agentInfo.title`, else `name`), else `fallback`."""
    for key in ("title", "name"):
        value = agent_info.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(redact(valid_text(value)).split())[:_MAX_NAME]
    return fallback


def _env_pairs(env: Any) -> list[tuple[str, str]]:
    if isinstance(env, dict):
        return [(str(k), str(v)) for k, v in env.items() if isinstance(v, str | int | float)]
    if isinstance(env, list):
        return [
            (str(item["name"]), str(item.get("value", "")))
            for item in env
            if isinstance(item, dict) and isinstance(item.get("name"), str)
        ]
    return []


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _shell(env: list[tuple[str, str]], command: list[str]) -> str:
    assignments = [f"{name}={shlex.quote(value)}" for name, value in env if name.isidentifier()]
    return " ".join([*assignments, shlex.join(command)])


def _terminal_command(method: dict[str, Any], argv: Sequence[str]) -> str | None:
    """The shell line of the terminal sign-in `method` describes (None: it is not one)."""
    if method.get("type") == "terminal":
        command = [*argv, *_strings(method.get("args"))]
        return _shell(_env_pairs(method.get("env")), command)
    meta = method.get("_meta")
    spelled = meta.get("terminal-auth") if isinstance(meta, dict) else None
    if isinstance(spelled, dict) and isinstance(spelled.get("command"), str):
        command = [spelled["command"], *_strings(spelled.get("args"))]
        return _shell(_env_pairs(spelled.get("env")), command)
    return None


def terminal_sign_in(auth_methods: Sequence[dict[str, Any]], argv: Sequence[str]) -> str:
    """ "run `<command>` where the agent runs" for the first terminal method, else ""."""
    for method in auth_methods:
        line = _terminal_command(method, argv)
        if not line:
            continue
        text = redact(valid_text(" ".join(line.replace("`", "'").split())))
        if len(text) > _MAX_COMMAND:
            text = text[: _MAX_COMMAND - 1] + "…"
        return f"run `{text}` where the agent runs"
    return ""


def without_terminal(auth_methods: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The methods that are not terminal sign-ins (said in the agent's own words instead)."""
    return [method for method in auth_methods if _terminal_command(method, ()) is None]


def sign_in_advice(auth_methods: Sequence[dict[str, Any]], fallback: str) -> str:
    """How to sign in, in the agent's own words (its `authMethods`) when it gave any."""
    said = []
    for method in auth_methods[:3]:
        text = method.get("description") or method.get("name") or ""
        if isinstance(text, str) and text.strip():
            said.append(" ".join(text.split())[:200].rstrip("."))
    return "; or ".join(said) if said else fallback
