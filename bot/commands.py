"""The one command table. Each surface declares its spellings (`command_prefixes` in its
capabilities; Slack and Discord add "!", since slash commands do not reach bots in Slack threads
and a bare "/" opens Discord's picker); help text and platform command menus are generated from
the table. Anything else that starts with a prefix is passed to
the agent as prompt text, so agent-side slash commands keep working."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str
    args: str = ""


NEW = Command("new", "start a fresh agent session for this conversation")
COMPACT = Command("compact", "ask the agent to summarise the conversation to free context")
STOP = Command("stop", "stop the running reply, drop queued messages and pending approvals")
STATUS = Command("status", "agent, model, workspace, what is running, context used")
MODEL = Command("model", "list the agent's models, or switch to one", "[ID]")
HELP = Command("help", "this list")

COMMANDS: tuple[Command, ...] = (NEW, COMPACT, STOP, STATUS, MODEL, HELP)
_BY_NAME = {command.name: command for command in COMMANDS}

_RE_COMMAND = re.compile(r"^([a-z][a-z0-9_-]*)(?:@[\w.]+)?(?:\s+(.*))?$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    command: Command
    args: str


def parse_command(prefixes: Sequence[str], text: str) -> ParsedCommand | None:
    """Our command, or None (plain text, or another slash command for the agent)."""
    stripped = text.strip()
    for prefix in prefixes:
        if stripped.startswith(prefix):
            match = _RE_COMMAND.match(stripped[len(prefix) :])
            if match is None:
                return None
            command = _BY_NAME.get(match.group(1).lower())
            if command is None:
                return None
            return ParsedCommand(command, (match.group(2) or "").strip())
    return None


def help_text(prefixes: Sequence[str], agent_commands: Sequence[str] = ()) -> str:
    prefix = prefixes[0] if prefixes else "/"
    lines = ["Commands:"]
    for command in COMMANDS:
        args = f" {command.args}" if command.args else ""
        lines.append(f"{prefix}{command.name}{args} — {command.summary}")
    if len(prefixes) > 1:
        others = " or ".join(prefixes[1:])
        lines.append(f"(each also works with {others} instead of {prefix})")
    extra = [name for name in agent_commands if name not in _BY_NAME]
    if extra:
        lines.append("The agent also understands: " + ", ".join(f"/{name}" for name in extra))
    lines.append("Anything else is sent to the agent.")
    return "\n".join(lines)


def command_menu() -> list[tuple[str, str]]:
    """(name, description) pairs for platform command menus."""
    return [(command.name, command.summary) for command in COMMANDS]
