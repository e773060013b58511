"""What a command's handler is given (`CommandContext`: the conversation it was typed in and who
typed it) and how its answer is said (`answer`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio

from acp import AGENT_ERRORS
from bot.access import Role
from bot.chat_runner import ChatRunner
from surfaces.base import UserRef


@dataclass(slots=True)
class TypedEvent:
    """The `handled` signal of the message a command was typed in. A command that queues a
    message of its own (/steer, /interrupt) `take`s it, so a surface waiting for that line (the
    terminal with piped stdin) waits for the queued message's turn instead of the command."""

    handled: anyio.Event | None
    taken: bool = False

    def take(self) -> anyio.Event | None:
        self.taken = self.handled is not None
        return self.handled


@dataclass(frozen=True, slots=True)
class CommandContext:
    """One command being answered. `asker` is who typed it: None for a Stop button press or the
    operations view, which act for nobody in particular (rows that depend on the person, such
    as the projects one may use or an admin's bindings, then offer nothing)."""

    runner: ChatRunner
    asker: UserRef | None
    typed: TypedEvent = field(default_factory=lambda: TypedEvent(None))

    @property
    def prefix(self) -> str:
        """How this surface spells our commands (the first of its prefixes)."""
        return self.runner.surface.capabilities.command_prefixes[0]

    @property
    def asker_id(self) -> str:
        return self.asker.id if self.asker is not None else ""

    def asked_by_admin(self) -> bool:
        runner = self.runner
        return (
            self.asker is not None
            and runner.services.access.role(runner.key.surface, self.asker.id) >= Role.ADMIN
        )


# Answers a command given the text after its name; "" when it has answered already (buttons).
Handler = Callable[[CommandContext, str], Awaitable[str]]


async def answer(handler: Handler, context: CommandContext, args: str) -> None:
    """Run `handler` and say what it answers; an agent's failure is the answer."""
    try:
        text = await handler(context, args)
    except AGENT_ERRORS as exc:
        text = str(exc)
    if text:
        await context.runner.say(text)
