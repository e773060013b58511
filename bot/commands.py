"""The one command table: each row names a command, says what it does and how to answer it, so
adding a command is adding a row. Each surface declares its spellings (`command_prefixes` in its
capabilities; Slack and Discord add "!", since slash commands do not reach bots in Slack threads
and a bare "/" opens Discord's picker); help text and platform command menus are generated from
the table. /compact is the agent's, sent on only to an agent that lists it (bot/agent_commands.py).
Anything else that starts with a prefix is passed to the agent as typed, so agent-side
slash commands keep working; a doubled prefix (`//status`, `!!status`) is always the agent's,
sent on as `/status`, so an agent command named like one of ours stays reachable.

The handlers live by family (bot/session_commands.py, bot/project_commands.py,
bot/status_commands.py, bot/busy_commands.py; /compact in bot/agent_commands.py, /help here); each
is given a `CommandContext` (bot/command_context.py): the conversation and who asked."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from acp import AGENT_ERRORS
from bot.agent_commands import compact, learn_agent_commands
from bot.approval_commands import approvals_off, refusal
from bot.busy_commands import busy, interrupt, steer
from bot.chat_runner import ChatRunner
from bot.command_context import CommandContext, Handler, answer
from bot.project_commands import agent, project
from bot.session_commands import new, resume, sessions, stop
from bot.status_commands import model, status
from bot.trust_commands import trust
from surfaces.base import UserRef


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str
    args: str = ""
    handler: Handler | None = None  # None: the agent's command, sent to it as prompt text


async def _help(context: CommandContext, args: str) -> str:
    runner = context.runner
    if not runner.agent_commands:  # none known yet: the agent lists them once a session opens
        try:
            await learn_agent_commands(runner)
        except AGENT_ERRORS:
            pass  # ours are listed all the same; the next message tells why the agent failed
    return help_text(runner.surface.capabilities.command_prefixes, runner.agent_commands)


NEW = Command("new", "start a fresh agent session for this conversation", handler=new)
COMPACT = Command(
    "compact", "ask the agent to summarise the conversation to free context", handler=compact
)
AGENTS_COMPACT = Command(COMPACT.name, COMPACT.summary)  # for an agent listing it: sent on
STOP = Command(
    "stop", "stop the running reply, drop queued messages and pending approvals", handler=stop
)
STEER = Command(
    "steer",
    "put a message into the running reply (with none running: send it)",
    "TEXT",
    handler=steer,
)
INTERRUPT = Command(
    "interrupt", "stop the running reply and send this message next", "TEXT", handler=interrupt
)
BUSY = Command(
    "busy",
    "what a message sent while the agent works does here: queue, steer or interrupt",
    "[MODE]",
    handler=busy,
)
STATUS = Command("status", "agent, model, workspace, what is running, context used", handler=status)
MODEL = Command("model", "list the agent's models, or switch to one", "[ID]", handler=model)
PROJECT = Command(
    "project",
    "list your projects, switch to one (an admin's bind also binds this thread, bindchat the chat)",
    "[[bind|bindchat] NAME]",
    handler=project,
)
AGENT = Command("agent", "list this project's agents, or switch to one", "[NAME]", handler=agent)
SESSIONS = Command(
    "sessions", "this conversation's recent agent sessions, to resume one", handler=sessions
)
RESUME = Command("resume", "continue an earlier agent session", "ID", handler=resume)
TRUST = Command(
    "trust", "what runs without asking here; revoke N or clear", "[revoke N|clear]", handler=trust
)
HELP = Command("help", "this list", handler=_help)

COMMANDS: tuple[Command, ...] = (
    NEW,
    COMPACT,
    STOP,
    STEER,
    INTERRUPT,
    BUSY,
    STATUS,
    MODEL,
    PROJECT,
    AGENT,
    SESSIONS,
    RESUME,
    TRUST,
    HELP,
)
_BY_NAME = {command.name: command for command in COMMANDS}

_RE_COMMAND = re.compile(r"^([a-z][a-z0-9_-]*)(?:@[\w.]+)?(?:\s+(.*))?$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    command: Command
    args: str


def parse_command(
    prefixes: Sequence[str],
    text: str,
    agent_commands: Sequence[str] = (),
    withheld: Sequence[str] = (),
) -> ParsedCommand | None:
    """Our command, or the agent's own spelled with this surface's prefix (`!review` for the
    agent's /review: `agent_commands` are the names it listed), or None (plain text, or another
    slash command for the agent). An agent command that would switch its approvals off (by its
    name and arguments, or one of `withheld`) is answered by a refusal instead."""
    stripped = text.strip()
    for prefix in prefixes:
        if stripped.startswith(prefix * 2):  # the agent's own, even when named like ours
            match = _RE_COMMAND.match(stripped[2 * len(prefix) :])
            if match is None:
                return None
            return _agents(match.group(1), (match.group(2) or "").strip(), withheld)
        if stripped.startswith(prefix):
            match = _RE_COMMAND.match(stripped[len(prefix) :])
            if match is None:
                return None
            args = (match.group(2) or "").strip()
            command = _BY_NAME.get(match.group(1).lower())
            if command is COMPACT and any(n.lower() == COMPACT.name for n in agent_commands):
                command = AGENTS_COMPACT  # sent on as typed
            if command is None:
                name = match.group(1)
                if approvals_off(name, args, withheld):
                    return _agents(name, args, withheld)
                if prefix != "/" and name in agent_commands:
                    return _agents(name, args, withheld)
                return None
            return ParsedCommand(command, args)
    return None


def _agents(name: str, args: str, withheld: Sequence[str]) -> ParsedCommand:
    """The agent's command `name`, or the refusal of one that would switch approvals off."""
    if approvals_off(name, args, withheld):
        return ParsedCommand(Command(name, "refused", handler=refusal(name)), args)
    return ParsedCommand(Command(name, "the agent's own command"), args)


async def run_command(runner: ChatRunner, parsed: ParsedCommand, by: UserRef | None = None) -> None:
    """Answer one of our own commands in its conversation, typed by `by`; an agent failure is
    the answer."""
    handler = parsed.command.handler
    assert handler is not None, f"/{parsed.command.name} is the agent's to answer"
    await answer(handler, CommandContext(runner, by), parsed.args)


def help_text(prefixes: Sequence[str], agent_commands: Sequence[str] = ()) -> str:
    prefix = prefixes[0] if prefixes else "/"
    lines = ["Commands:"]
    for command in COMMANDS:
        args = f" {command.args}" if command.args else ""
        lines.append(f"{prefix}{command.name}{args} — {command.summary}")
    if len(prefixes) > 1:
        others = " or ".join(prefixes[1:])
        lines.append(f"(each also works with {others} instead of {prefix})")
    shown = []
    for name in agent_commands:
        if approvals_off(name):
            continue  # never sent on: approvals are Switchboard's to manage
        ours = _BY_NAME.get(name.lower())
        if ours is None:  # in the surface's spelling (Slack turns `!name` into `/name`)
            shown.append(f"{prefix}{name}")
        elif ours is not COMPACT:  # ours answers /name: the agent's is reached doubled
            shown.append(f"{prefix}{prefix}{name}")
    if shown:
        lines.append("The agent also understands: " + ", ".join(shown))
    lines.append(
        f"A doubled prefix is the agent's own command: {prefix}{prefix}status sends it /status."
    )
    lines.append("Anything else is sent to the agent.")
    return "\n".join(lines)


def command_menu() -> list[tuple[str, str]]:
    """(name, description) pairs for platform command menus."""
    return [(command.name, command.summary) for command in COMMANDS]
