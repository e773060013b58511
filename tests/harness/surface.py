"""A surface served alone, without a BotApp: what its adapter hands the bot is collected."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from surfaces.base import ChoiceAnswer, Inbound
from tests.engine_helpers import wait_for


class Received:
    """The bot's side of a surface: every event the adapter handed over, in order."""

    def __init__(self) -> None:
        self.events: list[Inbound | ChoiceAnswer] = []

    async def __call__(self, event: Inbound | ChoiceAnswer) -> None:
        self.events.append(event)

    @property
    def messages(self) -> list[Inbound]:
        return [event for event in self.events if isinstance(event, Inbound)]

    async def one(self, count: int = 1) -> list[Inbound]:
        """Until `count` messages arrived; all of them so far."""
        await wait_for(lambda: len(self.messages) >= count, f"{count} message(s) to arrive")
        return self.messages


@asynccontextmanager
async def running_surface(
    surface: Any, received: Received, menu: Sequence[tuple[str, str]] = ()
) -> AsyncIterator[None]:
    """`surface.run(received)` in a task until the block ends, then `surface.close()` (also when
    the block fails). `menu` is given first, as the app gives its command menu before running."""
    if menu:
        surface.command_menu(list(menu))
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(surface.run, received)
            yield
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await surface.close()
