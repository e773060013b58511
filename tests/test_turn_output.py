"""A chat turn's reply text (bot/turn_output.py): kept once, handed to the live reply as it grows,
and the text of a flood reaches the reply whole even when nothing follows it."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest

from bot.reply import ReplyStream
from bot.services import ConversationServices
from bot.turn_output import LiveOutput
from surfaces.base import ConversationKey, Surface, UserRef

pytestmark = pytest.mark.anyio
WAIT = 10  # seconds: an upper bound, never a measurement


class _Stream:
    def __init__(self) -> None:
        self.shown: list[str] = []

    def update(self, text: str) -> None:
        self.shown.append(text)

    def set_status(self, text: str | None) -> None:
        return None


class _Histogram:
    def observe(self, value: float) -> None:
        return None


class _Metrics:
    first_text = _Histogram()


class _Services:
    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self.metrics = _Metrics()
        self._tg = tg

    def spawn(self, job: Any) -> None:
        self._tg.start_soon(job)


def _output(tg: anyio.abc.TaskGroup, stream: _Stream) -> LiveOutput:
    return LiveOutput(
        cast(ConversationServices, _Services(tg)),
        cast(Surface, None),
        ConversationKey("test", "chat"),
        cast(ReplyStream, stream),
        UserRef("alice"),
    )


async def test_a_chunk_reaches_the_reply_at_once() -> None:
    stream = _Stream()
    async with anyio.create_task_group() as tg:
        output = _output(tg, stream)
        output.on_text("Hello")
        assert stream.shown == ["Hello"]
        output.stop_live()


async def test_a_flood_reaches_the_reply_whole_in_a_few_joins_though_nothing_follows() -> None:
    stream = _Stream()
    chunks = [f"{i % 10}" for i in range(80_000)]
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            output = _output(tg, stream)
            for chunk in chunks:
                output.on_text(chunk)
            whole = "".join(chunks)
            while not stream.shown or stream.shown[-1] != whole:
                await anyio.sleep(0.001)
            output.stop_live()
    assert output.text == whole
    assert len(stream.shown) < 100  # not one join per chunk


async def test_empty_chunks_are_not_text() -> None:
    stream = _Stream()
    async with anyio.create_task_group() as tg:
        output = _output(tg, stream)
        output.on_text("")
        assert not output.text and not stream.shown
        output.stop_live()
