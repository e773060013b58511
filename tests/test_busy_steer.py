"""Steering a running turn (issue 24, bot/busy.py) through the scripted agent with `--steering`
(it advertises `_meta.steering.supported` and answers `_session/steering` as claude-agent-acp
does): the Queued acknowledgement offers Steer now; pressed, typed (/steer) or by the busy mode
the message reaches the agent in the same turn, shows in the live reply as the person's quoted
line, stays in the final, and leaves the journal; an agent that wants it as a prompt gets it
next, ahead of the queue; the Telegram fake shows both buttons."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bot.busy import QUEUED, STEERED
from surfaces.base import Choice
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    CHAT,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)
from tests.fakes.telegram_api import BOT_USERNAME, FakeBotApi
from tests.harness.telegram import serving
from tests.test_busy_mode import ack_of
from tests.test_busy_telegram import _ack, _buttons
from tests.test_telegram import ALICE, GROUP, settings_for, shows

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

# Waits (at most a minute) for a steer, says what it got, then ends the turn.
STEERABLE = script({"chunk": "working on it"}, {"await_steer": 60}, {"stop": "end_turn"})
# The same, but the turn goes on after the steer until it is stopped.
STEERABLE_LONG = script({"chunk": "working on it"}, {"await_steer": 60}, {"hang": True})
QUOTE = "> **Alice:** use the other file"


def steers(fake_agent: FakeAgent) -> list[dict[str, object]]:
    return [r for r in fake_agent.records() if r.get("event") == "steer"]


async def _running(surface: ScriptedSurface, steps: str = STEERABLE) -> anyio.Event:
    turn = surface.post(surface.message("alice", steps))
    await wait_for(lambda: "working on it" in surface.transcript(), "the live text")
    return turn


def _button(surface: ScriptedSurface, label: str) -> Choice:
    (found,) = [b for b in ack_of(surface)[2] if b.label == label]
    return found


async def test_steer_now_puts_the_message_into_the_running_turn_as_the_persons(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    settings = engine_settings(tmp_path, fake_agent, "--steering")
    async with running_app(settings, surface) as app:
        turn = await _running(surface, STEERABLE_LONG)
        waiting = surface.post(surface.message("alice", "use the other file"))
        await wait_for(lambda: any(t.startswith(QUEUED) for t in surface.shown().values()), "ack")
        labels = [(b.label, b.style) for b in ack_of(surface)[2]]
        assert labels == [("Steer now", "primary"), ("Stop and send", "danger")]
        assert _button(surface, "Steer now").token.startswith("steer:")
        assert [e.message != "" for e in await app.store.journal_open_turns()] == [False, True]
        await finished(surface.post(surface.press("alice", _button(surface, "Steer now").token)))
        await finished(waiting)  # done once injected, while the turn goes on
        await wait_for(lambda: ack_of(surface)[1] == f"{QUEUED}\n{STEERED}", "the ack's edit")
        assert not app.runners[CHAT].queue
        # only the running turn is journalled now: the steered message no longer waits
        assert [e.message for e in await app.store.journal_open_turns()] == [""]
        await wait_for(lambda: "steered:" in surface.transcript(), "the agent to read the steer")
        await finished(surface.post(surface.message("alice", "/stop")), turn)
    assert ack_of(surface)[2] == ()
    assert fake_agent.prompt_texts() == [STEERABLE_LONG]  # one prompt: the steer went into it
    (steer,) = steers(fake_agent)
    assert steer["outcome"] == "injected"
    final = surface.transcript()
    assert QUOTE in final and "steered:use the other file" in final
    assert final.index("working on it") < final.index(QUOTE) < final.index("steered:")


async def test_busy_mode_steer_and_typed_steer_inject_without_a_press(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    settings = engine_settings(tmp_path, fake_agent, "--steering", busy_mode="steer")
    async with running_app(settings, surface):
        turn = await _running(surface)
        await finished(surface.post(surface.message("alice", "use the other file")), turn)
        second = await _running(surface, STEERABLE.replace("working on it", "working on it 2"))
        await finished(surface.post(surface.message("bob", "/steer and tests too")), second)
    assert [s["outcome"] for s in steers(fake_agent)] == ["injected", "injected"]
    shown = surface.transcript()
    assert QUOTE in shown and "> **Bob:** and tests too" in shown
    assert "steered:and tests too" in shown
    assert QUEUED not in shown  # nothing waited
    assert len(fake_agent.prompt_texts()) == 2


async def test_an_agent_that_wants_a_prompt_gets_it_next_ahead_of_the_queue(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    # The agent stops reading its turn (as one that ended it on its side): a steer finds no
    # running turn and is answered promptRequired; the turn ends when its time runs out.
    surface = ScriptedSurface(message_buttons=True)
    gone = script({"abandon": True, "then_chunk": "working on it"})
    settings = engine_settings(tmp_path, fake_agent, "--steering", prompt_timeout=3)
    async with running_app(settings, surface):
        turn = await _running(surface, gone)
        queued = surface.post(surface.message("bob", "bob's question"))
        await wait_for(lambda: any(t.startswith(QUEUED) for t in surface.shown().values()), "ack")
        steered = surface.post(surface.message("alice", "/steer use the other file"))
        await finished(steered)
        await finished(turn, queued)
        await wait_for(lambda: "Echo: bob's question" in surface.transcript(), "bob's reply")
    assert [s["outcome"] for s in steers(fake_agent)] == ["promptRequired"]
    assert fake_agent.prompt_texts()[1:] == ["use the other file", "bob's question"]
    assert "The agent asked for it as a new prompt." in surface.transcript()


async def test_telegram_shows_steer_now_and_the_steer_reaches_the_turn(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with FakeBotApi() as api:
        api.add_group(GROUP, "Team", forum=True)
        topic = api.add_topic(GROUP, ALICE)
        async with serving(settings_for(tmp_path, fake_agent, api, "--steering")):
            api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {STEERABLE}", thread=topic)
            await wait_for(shows(api, GROUP, "working on it"), "the live reply", 15)
            api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} use the other file", thread=topic)
            await wait_for(lambda: _ack(api, topic), "the Queued acknowledgement", 15)
            ack = _ack(api, topic)
            assert ack is not None
            labels = [b["text"] for b in _buttons(ack)]
            assert labels == ["Steer now", "Stop and send"]
            api.press(ALICE, ack, _buttons(ack)[0]["callback_data"])
            await wait_for(shows(api, GROUP, "steered:use the other file"), "the steer", 15)
            await wait_for(lambda: ack.reply_markup is None, "the buttons to go", 15)
        assert ack.text == f"{QUEUED}\n{STEERED}"
        assert "Alice: use the other file" in api.chat_text(GROUP)
    assert fake_agent.prompt_texts() == [STEERABLE]
