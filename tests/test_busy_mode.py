"""A message that arrives while the agent works (issue 24, bot/busy.py), through the real scripted
agent: the "Queued" acknowledgement and its buttons (Stop and send always where messages carry
buttons, Steer now only for an agent that advertises steering), who may press them and once, a
press from another conversation, Stop and send (the running turn stopped as /stop does, the queue
kept, this message next), the typed /steer and /interrupt, the busy modes, and /busy remembered
in the state store across a restart."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bot.busy import GONE, NO_STEERING, QUEUED, SENT_ON
from bot.permissions import WRONG_CONVERSATION
from config import ConfigError, load_settings
from surfaces.base import Choice, ConversationKey
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    CHAT,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

HANGING = script({"chunk": "working on it"}, {"hang": True})
SETTINGS = {"telegram": {"allowed_users": ["alice", "bob", "carol"], "approvers": ["carol"]}}


def ack_of(surface: ScriptedSurface) -> tuple[str, str, tuple[Choice, ...]]:
    """The Queued acknowledgement: (its message id, the text it shows now, its buttons now)."""
    for message, text in surface.shown().items():
        if text.startswith(QUEUED):
            return message, text, surface.buttons_shown()[message]
    raise AssertionError("no acknowledgement shown")


def button(surface: ScriptedSurface, label: str) -> Choice:
    (found,) = [b for b in ack_of(surface)[2] if b.label == label]
    return found


async def _busy(surface: ScriptedSurface, first: str = HANGING) -> anyio.Event:
    """Alice's turn that hangs until stopped, its live text shown."""
    turn = surface.post(surface.message("alice", first))
    await wait_for(
        lambda: any("working on it" in c.text for c in surface.ops("send", "edit")), "the live text"
    )
    return turn


async def _queued(surface: ScriptedSurface, text: str, user: str = "alice") -> anyio.Event:
    waiting = surface.post(surface.message(user, text))
    await wait_for(lambda: any(t.startswith(QUEUED) for t in surface.shown().values()), "the ack")
    return waiting


async def test_a_queued_message_is_acknowledged_with_stop_and_send_and_told_when_it_is_sent(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    steps = script({"chunk": "working on it"}, {"sleep": 1.0}, {"chunk": " done"})
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = await _busy(surface, steps)
        waiting = await _queued(surface, "and then this")
        _, text, buttons = ack_of(surface)
        assert text == QUEUED
        # the scripted agent advertises no steering: no Steer now
        assert [(b.label, b.style) for b in buttons] == [("Stop and send", "danger")]
        assert buttons[0].token.startswith("interrupt:")
        await finished(turn, waiting)
        await wait_for(lambda: ack_of(surface)[1] == f"{QUEUED}\n{SENT_ON}", "the ack's edit")
    assert ack_of(surface)[2] == ()
    assert fake_agent.prompt_texts() == [steps, "and then this"]
    assert "Echo: and then this" in surface.transcript()


async def test_no_buttons_where_messages_carry_none(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = await _busy(surface)
        waiting = await _queued(surface, "later")
        await finished(surface.post(surface.message("alice", "/interrupt now")))
        await finished(turn, waiting)
    assert all(not call.buttons for call in surface.calls)
    assert fake_agent.prompt_texts()[1:] == ["now", "later"]


async def test_stop_and_send_stops_the_turn_keeps_the_queue_and_sends_the_message_next(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(engine_settings(tmp_path, fake_agent, **SETTINGS), surface) as app:
        turn = await _busy(surface)
        first = await _queued(surface, "first in the queue", user="bob")
        pressed_for = surface.post(surface.message("alice", "this one now"))
        await wait_for(lambda: len(app.runners[CHAT].queue) == 2, "both waiting")
        (mine,) = [w for w in app.runners[CHAT].queue if w.inbound.text == "this one now"]
        assert mine.tokens is not None
        (token,) = mine.tokens
        await finished(surface.post(surface.press("alice", token)))
        await finished(turn, pressed_for, first)
    assert len(fake_agent.frames_in("session/cancel")) == 1
    assert fake_agent.prompt_texts()[1:] == ["this one now", "first in the queue"]
    shown = surface.transcript()
    assert "working on it" in shown and "The turn was stopped." in shown  # the partial kept
    assert "Stopping the current reply; this message goes to the agent next." in shown
    assert surface.notices() == []


async def test_only_the_writer_or_an_approver_may_press_and_a_press_counts_once(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(engine_settings(tmp_path, fake_agent, **SETTINGS), surface) as app:
        turn = await _busy(surface)
        waiting = await _queued(surface, "mine")
        stop_and_send = button(surface, "Stop and send")
        await finished(surface.post(surface.press("bob", stop_and_send.token)))
        assert surface.notices("bob") == ["Only Alice or an approver can do this."]
        assert app.runners[CHAT].running and fake_agent.frames_in("session/cancel") == []
        await finished(surface.post(surface.press("carol", stop_and_send.token)))
        await finished(surface.post(surface.press("alice", stop_and_send.token)))
        assert surface.notices("alice") == [GONE]
        await finished(turn, waiting)
        records = await app.store.audit_since(0)
    assert len(fake_agent.frames_in("session/cancel")) == 1
    assert fake_agent.prompt_texts()[1:] == ["mine"]
    (refused,) = [r for r in records if r.kind == "refused"]
    assert (refused.actor, refused.action, refused.details) == (
        "bob",
        "interrupt",
        {"requester": "alice"},
    )
    assert ack_of(surface)[1].startswith(QUEUED + "\nStopping the current reply")
    assert ack_of(surface)[2] == ()


async def test_a_press_from_another_conversation_is_refused_and_audited(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    other = ConversationKey(CHAT.surface, "chat-elsewhere")
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = await _busy(surface)
        waiting = await _queued(surface, "mine")
        token = button(surface, "Stop and send").token
        await finished(surface.post(surface.press("alice", token, key=other)))
        assert surface.notices() == [GONE]  # as for a message long gone: nothing given away
        assert fake_agent.frames_in("session/cancel") == []
        await finished(surface.post(surface.press("alice", token)))  # in its own chat
        await finished(turn, waiting)
        records = await app.store.audit_since(0)
    (refused,) = [r for r in records if r.details.get("reason") == WRONG_CONVERSATION]
    assert refused.action == "interrupt" and refused.actor == "alice"
    assert refused.details["card_chat"] == CHAT.chat and refused.details["chat"] == other.chat
    assert fake_agent.prompt_texts()[1:] == ["mine"]


async def test_a_message_moved_to_the_front_stays_journalled_until_a_turn_takes_it(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    # the agent takes its time to end a cancelled turn: the message waits at the front meanwhile
    stubborn = script({"chunk": "working on it"}, {"ignore_cancel": True}, {"sleep": 2})
    settings = engine_settings(tmp_path, fake_agent, cancel_grace=30)
    async with running_app(settings, surface) as app:
        turn = await _busy(surface, stubborn)
        waiting = await _queued(surface, "front")
        await finished(surface.post(surface.press("alice", button(surface, "Stop and send").token)))
        assert fake_agent.frames_in("session/cancel")
        journal = await app.store.journal_open_turns()
        assert [e.requester for e in journal if e.message] == ["alice"]
        assert app.runners[CHAT].queue[0].ahead
        await finished(turn, waiting)
        assert await app.store.journal_open_turns() == []
    assert fake_agent.prompt_texts()[1:] == ["front"]


async def test_steer_typed_for_an_agent_without_steering_says_why_and_the_message_waits(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = await _busy(surface)
        await finished(surface.post(surface.message("alice", "/steer use the other file")))
        _, text, buttons = ack_of(surface)
        assert text == f"{QUEUED} {NO_STEERING}"
        assert [b.label for b in buttons] == ["Stop and send"]  # the only way it goes sooner
        assert not fake_agent.frames_in("_session/steering")  # never probed
        await finished(surface.post(surface.message("alice", "/stop")), turn)
    # /stop dropped it, and its acknowledgement says so
    assert ack_of(surface)[1] == f"{QUEUED} {NO_STEERING}\nDropped by /stop."
    assert fake_agent.prompt_texts()[1:] == []


async def test_steer_and_interrupt_typed_with_no_turn_running_are_ordinary_prompts(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", "/steer hello there")))
        await wait_for(lambda: "Echo: hello there" in surface.transcript(), "the reply")
        await finished(surface.post(surface.message("alice", "/interrupt and you")))
        await wait_for(lambda: "Echo: and you" in surface.transcript(), "the second reply")
        await finished(surface.post(surface.message("alice", "/steer")))
    assert fake_agent.prompt_texts() == ["hello there", "and you"]
    assert "Write the message after it: /steer TEXT." in surface.transcript()


async def test_interrupt_typed_mid_turn_goes_ahead_of_the_queue(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(engine_settings(tmp_path, fake_agent, **SETTINGS), surface):
        turn = await _busy(surface)
        waiting = await _queued(surface, "queued earlier", user="bob")
        await finished(surface.post(surface.message("alice", "/interrupt look here instead")))
        await finished(turn, waiting)
        await wait_for(lambda: "Echo: queued earlier" in surface.transcript(), "bob's reply")
    assert fake_agent.prompt_texts()[1:] == ["look here instead", "queued earlier"]
    assert len(fake_agent.frames_in("session/cancel")) == 1


async def test_busy_mode_interrupt_stops_the_turn_for_every_message_without_a_press(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    settings = engine_settings(tmp_path, fake_agent, busy_mode="interrupt")
    async with running_app(settings, surface):
        turn = await _busy(surface)
        waiting = surface.post(surface.message("alice", "changed my mind"))
        await finished(turn, waiting)
    assert fake_agent.prompt_texts()[1:] == ["changed my mind"]
    shown = surface.transcript()
    assert "Stopping the current reply; this message goes to the agent next." in shown
    assert "working on it" in shown and "The turn was stopped." in shown
    assert QUEUED not in shown


async def test_busy_mode_steer_falls_back_to_the_queue_for_an_agent_without_steering(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    settings = engine_settings(tmp_path, fake_agent, busy_mode="steer")
    async with running_app(settings, surface):
        turn = await _busy(surface)
        await _queued(surface, "meanwhile")
        assert ack_of(surface)[1] == f"{QUEUED} {NO_STEERING}"
        await finished(surface.post(surface.message("alice", "/stop")), turn)
    assert not fake_agent.frames_in("_session/steering")


async def test_busy_is_per_conversation_and_remembered_across_a_restart(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    other = ConversationKey(CHAT.surface, "chat-2")
    settings = engine_settings(tmp_path, fake_agent)
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", "/busy")))
        await finished(surface.post(surface.message("alice", "/busy sometimes")))
        await finished(surface.post(surface.message("alice", "/busy interrupt")))
    said = surface.transcript()
    assert "Busy mode here: queue (a message sent while the agent works waits" in said
    assert "Busy mode is one of queue, steer, interrupt (or default)." in said
    assert "Busy mode here is now interrupt: " in said

    again = ScriptedSurface()  # its event ids start again: given, so none reads as a redelivery
    async with running_app(settings, again):  # a new process on the same state file
        turn = again.post(again.message("alice", HANGING, event_id="2-1"))
        await wait_for(lambda: "working on it" in again.transcript(), "the live text")
        waiting = again.post(again.message("alice", "new direction", event_id="2-2"))
        await finished(turn, waiting)
        await finished(again.post(again.message("bob", "/busy", key=other, event_id="2-3")))
        await finished(again.post(again.message("alice", "/busy default", event_id="2-4")))
        await finished(again.post(again.message("alice", "/busy", event_id="2-5")))
    shown = again.transcript()
    assert "Stopping the current reply; this message goes to the agent next." in shown
    assert "Busy mode here: queue" in shown  # the other conversation has its own
    assert "Busy mode here follows the setting again: queue" in shown
    assert fake_agent.prompt_texts()[-1] == "new direction"


def test_a_busy_mode_that_is_not_one_of_the_three_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(busy_mode="sometimes")
    assert "SWITCHBOARD_BUSY_MODE" in str(caught.value)
