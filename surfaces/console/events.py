"""Waiting on several anyio events at once: the terminal's reader waits for a reply to end, an
approval or a question to show up, or a reply to begin, whichever comes first."""

from __future__ import annotations

import anyio
import anyio.abc


async def first_of(*events: anyio.Event) -> None:
    """Return once any of `events` is set."""
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


def all_of(tg: anyio.abc.TaskGroup, *events: anyio.Event) -> anyio.Event:
    """An event set once every one of `events` is (watched by a task in `tg`)."""
    done = anyio.Event()

    async def watch() -> None:
        for event in events:
            await event.wait()
        done.set()

    tg.start_soon(watch)
    return done
