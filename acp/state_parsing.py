"""What an agent says about a session, read defensively: every agent string is hostile, so it is
made valid Unicode, stripped of control characters and capped (`clean`), and every list is
capped, so an agent cannot grow a session's state without bound. The commands, config options
and legacy models of `session/update` frames and session answers, and the fields of kiro-cli's
`_kiro.dev/...` extensions (sign-in links, failure reasons, compaction phases)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from acp.types import AgentCommand, ConfigChoice, ConfigOption
from config import valid_text

log = logging.getLogger(__name__)

MAX_COMMANDS = 100
MAX_COMMAND_NAME = 64
MAX_DESCRIPTION = 200
MAX_OPTIONS = 32
MAX_CHOICES = 200
MAX_NAME = 128
MAX_TITLE = 200
MAX_LINK = 2048

_RE_CONTROL = re.compile(r"[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
_RE_COMMAND_NAME = re.compile(r"^[$A-Za-z0-9][\w.:$-]*$")
_REASON_KEYS = ("userFacingSessionErrorMessage", "reason", "message", "error", "detail", "name")


def clean(value: Any, limit: int) -> str:
    """An agent string as it may be shown: valid, one line, no control characters, capped."""
    if not isinstance(value, str):
        return ""
    text = " ".join(_RE_CONTROL.sub(" ", valid_text(value)).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def parse_commands(raw: Any) -> tuple[AgentCommand, ...]:
    """`availableCommands` / kiro's `commands`: names without a leading slash, deduplicated."""
    commands: dict[str, AgentCommand] = {}
    for item in raw if isinstance(raw, list) else ():
        if len(commands) >= MAX_COMMANDS:
            log.debug("the agent lists more than %d commands; keeping the first", MAX_COMMANDS)
            break
        if not isinstance(item, dict):
            continue
        name = clean(item.get("name"), MAX_COMMAND_NAME + 1).lstrip("/")
        if not name or len(name) > MAX_COMMAND_NAME or not _RE_COMMAND_NAME.match(name):
            continue
        hint = item.get("input")
        commands.setdefault(
            name,
            AgentCommand(
                name=name,
                description=clean(item.get("description"), MAX_DESCRIPTION),
                hint=clean(hint.get("hint"), MAX_NAME) if isinstance(hint, dict) else "",
            ),
        )
    return tuple(commands.values())


def _choices(raw: Any, group: str = "", depth: int = 0) -> Iterable[ConfigChoice]:
    """Select options, flat or given as groups of options (`{group, name, options: [...]}`)."""
    for item in raw if isinstance(raw, list) else ():
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("options"), list) and depth == 0:
            label = clean(item.get("name") or item.get("group"), MAX_NAME)
            yield from _choices(item["options"], label, depth + 1)
            continue
        value = item.get("value")
        if isinstance(value, str) and value and len(value) <= MAX_NAME:
            yield ConfigChoice(valid_text(value), clean(item.get("name"), MAX_NAME), group)


def parse_config_options(raw: Any) -> tuple[ConfigOption, ...]:
    options: list[ConfigOption] = []
    for item in raw if isinstance(raw, list) else ():
        if len(options) >= MAX_OPTIONS:
            break
        if not isinstance(item, dict):
            continue
        option_id = item.get("id")
        if not isinstance(option_id, str) or not option_id or len(option_id) > MAX_NAME:
            continue
        choices: list[ConfigChoice] = []
        for choice in _choices(item.get("options")):
            if len(choices) >= MAX_CHOICES:
                break
            choices.append(choice)
        current = item.get("currentValue")
        if isinstance(current, bool):  # a boolean option: kept as the words it is spoken in
            current = "true" if current else "false"
        category = item.get("category")
        options.append(
            ConfigOption(
                option_id=valid_text(option_id),
                name=clean(item.get("name"), MAX_NAME),
                category=clean(category, MAX_NAME).lower() if isinstance(category, str) else "",
                kind=clean(item.get("type"), MAX_NAME),
                current=valid_text(current)
                if isinstance(current, str) and len(current) <= MAX_NAME
                else "",
                choices=tuple(choices),
            )
        )
    return tuple(options)


def parse_legacy_models(raw: Any) -> tuple[tuple[str, ...], str]:
    """The legacy `models {currentModelId, availableModels}` field (kiro, older claude)."""
    if not isinstance(raw, dict):
        return (), ""
    ids: list[str] = []
    for model in raw.get("availableModels") or ():
        if len(ids) >= MAX_CHOICES:
            break
        model_id = model.get("modelId") if isinstance(model, dict) else None
        if isinstance(model_id, str) and model_id and len(model_id) <= MAX_NAME:
            ids.append(valid_text(model_id))
    current = raw.get("currentModelId")
    return tuple(ids), valid_text(current) if isinstance(current, str) else ""


def sign_in_link(value: Any) -> str:
    """An http(s) link as given, or "" for anything else (other schemes, spaces, no host)."""
    if not isinstance(value, str) or len(value) > MAX_LINK or _RE_CONTROL.search(value):
        return ""
    if any(char.isspace() for char in value):
        return ""
    try:
        parts = urlsplit(value)
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return ""
    return value


def failure_reason(params: Any, depth: int = 0) -> str:
    if not isinstance(params, dict) or depth > 3:
        return ""
    for key in _REASON_KEYS:
        value = params.get(key)
        if isinstance(value, str) and value.strip():
            return value
    for value in params.values():
        found = failure_reason(value, depth + 1)
        if found:
            return found
    return ""


def http_status(params: Any, depth: int = 0) -> int | None:
    if not isinstance(params, dict) or depth > 3:
        return None
    status = params.get("httpStatusCode")
    if type(status) is int:
        return status
    for value in params.values():
        found = http_status(value, depth + 1)
        if found is not None:
            return found
    return None


def compaction_phase(params: dict[str, Any]) -> str:
    """started / completed / failed, however kiro spells it (`status` string or object)."""
    status = params.get("status")
    if isinstance(status, dict):
        status = status.get("type") or status.get("status") or status.get("state")
    if not isinstance(status, str):
        status = params.get("state") or params.get("phase")
    phase = status.strip().lower() if isinstance(status, str) else ""
    if phase in ("started", "start", "in_progress", "running"):
        return "started"
    if phase in ("completed", "complete", "done", "succeeded", "success"):
        return "completed"
    if phase in ("failed", "failure", "error"):
        return "failed"
    return ""
