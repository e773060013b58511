"""What our commands say about the agent's own state: its slash commands (learned for /help and
/compact before the first prompt) and how /status names its mode and model.

An agent lists its commands in an `available_commands_update` that comes just after
`session/new` answers, so a conversation whose session is not open yet knows none: the first
/help (or /compact) opens the session and gives the agent a moment to list them.

/compact is sent on only to an agent that lists a `compact` command: sent as text to one that
does not, it would reach the model as an ordinary message. When another of its commands
compacts (by name or description: compress, summarize, condense), the person is offered that
one, spelled with a doubled prefix so it reaches the agent whatever it is named."""

from __future__ import annotations

import re
import secrets

import anyio

from acp import AgentCommand, ConfigOption, SessionState
from bot.chat_runner import ChatRunner
from bot.command_context import CommandContext
from surfaces.base import Inbound

# How long a session opened for /help or /compact is given to list its commands.
COMMANDS_WAIT = 1.5
_COMMANDS_POLL = 0.05

COMPACT = "compact"
_RE_COMPACTS = re.compile(r"compact|compress|summari[sz]|condens", re.IGNORECASE)
_RE_URI = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


async def learn_agent_commands(runner: ChatRunner) -> tuple[AgentCommand, ...]:
    """The agent's commands; with no session open yet, the session is opened (resumed when the
    conversation has one) and given `COMMANDS_WAIT` to list them. Raises what opening raises."""
    session = runner.sessions.current
    if session is None:
        session = await runner.sessions.session()
        with anyio.move_on_after(COMMANDS_WAIT):
            # the update is read into the state as it arrives; nothing signals it
            while not session.state.commands:  # noqa: ASYNC110
                await anyio.sleep(_COMMANDS_POLL)
    return session.state.commands


def compacting_command(commands: tuple[AgentCommand, ...]) -> AgentCommand | None:
    """The agent's command that compacts the conversation under another name, if any."""
    for command in commands:
        if _RE_COMPACTS.search(command.name):
            return command
    for command in commands:
        if _RE_COMPACTS.search(command.description):
            return command
    return None


async def compact(context: CommandContext, args: str) -> str:
    """/compact typed where the agent's commands were not known to include it (an agent that
    lists it gets it as typed: `bot.commands.parse_command`): learned now, it is sent on;
    otherwise one sentence says what the agent has instead."""
    runner, by = context.runner, context.asker
    commands = await learn_agent_commands(runner)
    if any(command.name.lower() == COMPACT for command in commands):
        if by is None:
            return ""
        text = f"/{COMPACT} {args}".rstrip()
        await runner.submit(Inbound(runner.key, by, text, f"compact-{secrets.token_hex(8)}"))
        return ""
    prefix = context.prefix
    other = compacting_command(commands)
    if other is not None:
        return (
            f"This agent has no /{COMPACT}; it compacts with /{other.name}: "
            f"send {prefix}{prefix}{other.name}."
        )
    return (
        f"This agent has no way to compact the conversation (it lists no /{COMPACT} command); "
        f"{prefix}new starts a fresh session instead."
    )


def _choice_name(option: ConfigOption, value: str) -> str:
    return next((c.name for c in option.choices if c.value == value and c.name), "")


def _readable(value: str) -> str:
    """An id as a person would say it: a URI's last part ("…/modes#agent" is "agent")."""
    if _RE_URI.match(value):
        return re.split(r"[#/:]", value.rstrip("/#"))[-1] or value
    return value


def mode_label(state: SessionState) -> str:
    """The current mode by its name (the mode option's choice), else its id made readable."""
    for option in state.config_options:
        if option.category == "mode":
            return _choice_name(option, option.current) or _readable(option.current)
    return _readable(state.mode)


def model_label(state: SessionState) -> str:
    """The current model as the model config option names it, with its id when that differs."""
    model = state.model
    option = state.model_option
    name = _choice_name(option, model) if option is not None else ""
    return f"{name} ({model})" if name and name != model else model
