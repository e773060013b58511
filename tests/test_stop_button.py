"""The live reply's Stop button, end to end: it rides on the live message while the turn runs
and goes with the final edit; pressed by the person who asked (or an approver) it does what /stop
does; anyone else, and a press after the turn, is told why nothing happens; surfaces without
message buttons, or whose live reply is a draft, get none."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

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

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

HANGING = script({"chunk": "working on it"}, {"hang": True})


def stop_button(surface: ScriptedSurface) -> Choice | None:
    """The Stop button the live message carries now, if any."""
    for buttons in surface.buttons_shown().values():
        for button in buttons:
            if button.label == "Stop":
                return button
    return None


async def _started(surface: ScriptedSurface) -> tuple[anyio.Event, Choice]:
    turn = surface.post(surface.message("alice", HANGING))
    await wait_for(lambda: stop_button(surface) is not None, "the Stop button")
    button = stop_button(surface)
    assert button is not None
    return turn, button


async def test_the_requester_stops_the_turn_and_the_button_goes_with_the_final(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn, button = await _started(surface)
        assert button.style == "danger"
        await finished(surface.post(surface.press("alice", button.token)), turn)
        assert not app.runners[CHAT].running
    assert len(fake_agent.frames_in("session/cancel")) == 1
    shown = surface.transcript()
    assert "Stopping." in shown and "The turn was stopped." in shown
    assert stop_button(surface) is None  # every message's last state carries no button


async def test_a_stranger_to_the_turn_cannot_press_stop_but_an_approver_can(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    settings = engine_settings(
        tmp_path,
        fake_agent,
        telegram={"allowed_users": ["alice", "bob", "carol"], "approvers": ["carol"]},
    )
    async with running_app(settings, surface) as app:
        turn, button = await _started(surface)
        await finished(surface.post(surface.press("bob", button.token)))
        assert surface.notices("bob") == ["Only Alice or an approver can stop this."]
        assert app.runners[CHAT].running
        await finished(surface.post(surface.press("carol", button.token)), turn)
    assert len(fake_agent.frames_in("session/cancel")) == 1
    assert "The turn was stopped." in surface.transcript()


async def test_a_press_after_the_turn_is_answered_and_stops_nothing(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn, button = await _started(surface)
        await finished(surface.post(surface.message("alice", "/stop")), turn)
        second = surface.post(surface.message("alice", script({"chunk": "next"}, {"hang": True})))
        await wait_for(lambda: app.runners[CHAT].stop_token not in ("", button.token), "turn 2")
        await finished(surface.post(surface.press("alice", button.token)))
        assert surface.notices("alice") == ["That reply has already finished."]
        assert app.runners[CHAT].running  # the old token does not stop the new turn
        await finished(surface.post(surface.message("alice", "/stop")), second)
    assert len(fake_agent.frames_in("session/cancel")) == 2


async def test_no_button_where_the_surface_has_no_message_buttons(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", HANGING))
        await wait_for(
            lambda: any("working on it" in c.text for c in surface.ops("send", "edit")),
            "the live text",
        )
        await finished(surface.post(surface.message("alice", "/stop")), turn)
    assert all(not call.buttons for call in surface.calls)


async def test_the_live_reply_is_handed_the_button_and_the_final_messages_carry_none(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    # The surface's live reply shows it where its live message can carry it (a Telegram group)
    # and leaves it out of a draft bubble (a Telegram private chat: tests/test_telegram.py).
    surface = ScriptedSurface(message_buttons=True)
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", HANGING))
        await wait_for(
            lambda: any("working on it" in c.text for c in surface.ops("send", "edit")),
            "the live message",
        )
        await finished(surface.post(surface.message("alice", "/stop")), turn)
    calls = surface.ops("send", "edit")
    live = [c for c in calls if not c.formatted and "working on it" in c.text]
    assert live and all([b.label for b in c.buttons] == ["Stop"] for c in live)
    assert all(not call.buttons for call in calls if call.formatted)
