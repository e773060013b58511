"""The kit's live reply (surfaces/live.py), on the recording surface of tests/engine_helpers.py:
it keeps what each message shows, so a call that changes nothing is never made and buttons change
only when they change; each call passes the chat's pacer once (time is a `ManualClock`); `finish`
does one attempt per message, resumes after a failure and blanks what the final no longer needs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import pytest

from surfaces.base import BLANK, STATUS_MARK, Choice, ConversationKey, LivePart, count_chars
from surfaces.errors import MessageGone, PartFailed, RateLimited, SendFailed
from surfaces.live import EditedLive, laid_out
from surfaces.pacing import Pacing
from tests.engine_helpers import ScriptedSurface
from tests.manual_clock import ManualClock

pytestmark = pytest.mark.anyio

KEY = ConversationKey("test", "chat-1")
STOP = Choice("stop:1", "Stop", "danger")


class Clocked(ScriptedSurface):
    """The recording surface paced on a clock the test moves; each call notes when it was made."""

    def __init__(self, clock: ManualClock, *, interval: float = 1.0, **options: Any) -> None:
        super().__init__("test", **options)
        self.clock = clock
        self.capabilities = replace(
            self.capabilities, pacing=Pacing(interval, clock=clock, sleep=clock.sleep)
        )
        self.times: list[float] = []

    async def send(self, key: ConversationKey, text: str, **options: Any) -> Any:
        self.times.append(self.clock.now)
        return await super().send(key, text, **options)

    async def edit(self, ref: Any, text: str, **options: Any) -> None:
        self.times.append(self.clock.now)
        await super().edit(ref, text, **options)


def messages(surface: ScriptedSurface) -> list[tuple[str, str, bool, tuple[Choice, ...]]]:
    return [(c.op, c.text, c.formatted, c.buttons) for c in surface.ops("send", "edit")]


async def test_a_show_that_changes_nothing_makes_no_call() -> None:
    surface = ScriptedSurface("test", min_edit_interval=0.0)
    live = EditedLive(surface, KEY)
    assert await live.show([LivePart("hello")])
    assert await live.show([LivePart("hello")])  # still shown: nothing to send
    assert await live.show([LivePart("hello there")])
    await live.finish(["hello there"])
    await live.finish(["hello there"])  # a second finish has nothing left to do
    assert messages(surface) == [
        ("send", "hello", False, ()),
        ("edit", "hello there", False, ()),
        ("edit", "hello there", True, ()),  # the final edit, though the text is the same
    ]


async def test_buttons_ride_on_the_last_message_and_change_only_when_they_change() -> None:
    surface = ScriptedSurface("test", max_chars=40, min_edit_interval=0.0, message_buttons=True)
    live = EditedLive(surface, KEY)
    await live.show([LivePart("one")], buttons=[STOP])
    await live.show([LivePart("one")], buttons=[STOP])  # same text, same buttons: no call
    await live.show([LivePart("one")], buttons=[])  # the buttons alone changed: one edit
    await live.show([LivePart("one")], buttons=[STOP])
    await live.show([LivePart("one", final=True), LivePart("two")], buttons=[STOP])
    assert messages(surface) == [
        ("send", "one", False, (STOP,)),
        ("edit", "one", False, ()),
        ("edit", "one", False, (STOP,)),
        ("edit", "one", True, ()),  # settled: final form, and the button moves on
        ("send", "two", False, (STOP,)),
    ]
    await live.finish(["one", "two"])
    assert all(not buttons for buttons in surface.buttons_shown().values())


async def test_buttons_are_left_out_where_messages_take_none() -> None:
    surface = ScriptedSurface("test", min_edit_interval=0.0)  # asserts no buttons reach it
    live = EditedLive(surface, KEY)
    await live.show([LivePart("one")], buttons=[STOP])
    await live.finish(["one"])
    assert len(surface.ops("send", "edit")) == 2


async def test_each_call_passes_the_chats_pacer_once_and_ready_waits_for_its_turn() -> None:
    clock = ManualClock()
    surface = Clocked(clock, interval=1.0)
    pacer = surface.capabilities.pacing.for_chat(KEY.chat)
    live = EditedLive(surface, KEY)
    shown: list[float] = []

    async def stream() -> None:
        for text in ("a", "a b", "a b c"):
            await live.ready()
            await live.show([LivePart(text)])
            shown.append(clock.now)
        await live.finish(["a b c"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(stream)
        for _ in range(4):
            await clock.advance(1.0)
    assert surface.times == [0.0, 1.0, 2.0, 3.0]  # one interval apart, never two
    assert shown == [0.0, 1.0, 2.0]
    assert pacer.counts.calls == len(surface.ops("send", "edit")) == 4


async def test_a_429_holds_the_chats_next_call_back_and_is_recorded_once() -> None:
    clock = ManualClock()
    surface = Clocked(clock, interval=1.0)
    pacer = surface.capabilities.pacing.for_chat(KEY.chat)
    live = EditedLive(surface, KEY)
    surface.fail_next(RateLimited(30.0))
    with pytest.raises(RateLimited) as limited:
        await live.show([LivePart("a")])
    assert limited.value.recorded and pacer.counts.rate_limited == 1

    async def again() -> None:
        await live.ready()
        await live.show([LivePart("a")])

    async with anyio.create_task_group() as tg:
        tg.start_soon(again)
        await clock.advance(29.0)
        assert len(surface.times) == 1
        await clock.advance(1.0)
    assert surface.times == [0.0, 30.0] and list(surface.shown().values()) == ["a"]


async def test_a_surface_that_cannot_edit_shows_nothing_live_and_sends_the_final_parts() -> None:
    surface = ScriptedSurface("test", min_edit_interval=0.0, can_edit=False)
    live = EditedLive(surface, KEY)
    await live.ready()
    assert await live.show([LivePart("partial")], "thinking", [STOP]) is False
    assert surface.calls == []
    await live.finish(["first", "second"])
    assert messages(surface) == [("send", "first", True, ()), ("send", "second", True, ())]


async def test_finish_raises_the_message_that_failed_and_resumes_where_it_stopped() -> None:
    surface = ScriptedSurface("test", min_edit_interval=0.0, can_edit=False)
    live = EditedLive(surface, KEY)
    await live.finish(["first"])
    surface.fail_next(SendFailed("502", transient=True))
    with pytest.raises(PartFailed) as failed:
        await live.finish(["first", "second", "third"])
    assert failed.value.index == 1 and failed.value.transient
    surface.fail_next(SendFailed("400", transient=False))
    with pytest.raises(PartFailed) as refused:
        await live.finish(["first", "second", "third"])
    assert refused.value.index == 1 and not refused.value.transient
    await live.finish(["first", "second", "third"], skip={1})  # given up on: left out
    assert [c.text for c in surface.ops("send")] == ["first", "third"]


async def test_a_message_gone_is_sent_anew_and_messages_the_final_no_longer_needs_go_blank() -> (
    None
):
    surface = ScriptedSurface("test", max_chars=40, min_edit_interval=0.0)
    live = EditedLive(surface, KEY)
    await live.show([LivePart("an answer")], "running: a long command line")
    assert [c.text for c in surface.ops("send")] == [
        "an answer",
        f"{STATUS_MARK}running: a long command line",  # it would not fit under the text
    ]
    surface.fail_next(MessageGone(), on="edit")
    with pytest.raises(PartFailed) as gone:
        await live.finish(["the answer"])
    assert gone.value.index == 0 and gone.value.transient
    await live.finish(["the answer"])
    _gone, status, answer = surface.shown()  # message ids, in the order they were sent
    assert (surface.shown()[status], surface.shown()[answer]) == (BLANK, "the answer")


def test_the_status_block_goes_under_the_last_part_or_on_a_message_of_its_own() -> None:
    def lay(parts: list[LivePart], status: str | None) -> list[LivePart]:
        return laid_out(parts, status, 20, count_chars)

    assert lay([LivePart("text")], None) == [LivePart("text")]
    assert lay([LivePart("text")], "ls") == [LivePart(f"text\n\n{STATUS_MARK}ls")]
    assert lay([], "ls") == [LivePart(f"{STATUS_MARK}ls")]
    assert lay([LivePart("a" * 18)], "ls") == [LivePart("a" * 18), LivePart(f"{STATUS_MARK}ls")]
    assert lay([LivePart("a", final=True)], "ls") == [
        LivePart("a", final=True),
        LivePart(f"{STATUS_MARK}ls"),
    ]
    (alone,) = lay([], "x" * 50)  # a status longer than a message is cut to fit
    assert len(alone.text) <= 20 and alone.text.startswith(STATUS_MARK)
