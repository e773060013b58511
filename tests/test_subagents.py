"""A turn's subagent sessions (issue 24), beyond their block in the live status: a subagent the
agent says may be cancelled gets its own Stop beside the turn's (pressed by the person who asked
or an approver, once; it sends `session/cancel` with the CHILD's session id and the turn goes
on), and a subagent's requests (a permission, a question, `fs/*`) are its parent turn's, asked
through the same gate with a card that says whose they are. An id no parent announced is
refused as before. Through the scripted agent (a real subprocess) and the engine's recording
surface; tests/test_subagents_telegram.py does it through the Telegram fake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.subagent_stop import SUBSTOP_TOKEN_PREFIX
from surfaces.base import Choice, ConversationKey
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    CHAT,
    SURFACE,
    Call,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

CHILD = "sess_child_1"
QUIET_CHILD = "sess_child_2"
NOBODY = "never-announced"
OPTIONS = [
    {"optionId": "allow_once", "name": "Yes", "kind": "allow_once"},
    {"optionId": "reject_once", "name": "No", "kind": "reject_once"},
]


def announce(child: str, title: str, state: str = "running", **fields: Any) -> dict[str, Any]:
    update = {
        "sessionUpdate": "subagent_update",
        "sessionId": child,
        "title": title,
        "state": {"state": state},
        **fields,
    }
    return {"update": update}


CANCELLABLE = announce(CHILD, "Test investigator", capabilities={"cancel": {}})
NOT_CANCELLABLE = announce(QUIET_CHILD, "Linter", capabilities={})


def asks(session_id: str, call: str, command: str) -> dict[str, Any]:
    """A permission request under `session_id` (the fake's `permission` step uses the parent's)."""
    tool = {"toolCallId": call, "title": f"Run {command}", "kind": "execute"}
    tool["rawInput"] = {"command": command}  # type: ignore[assignment]
    params = {"sessionId": session_id, "toolCall": tool, "options": OPTIONS}
    return {"request": {"method": "session/request_permission", "params": params}}


def replies(surface: ScriptedSurface) -> list[dict[str, Any]]:
    """What the agent's requests were answered, in order (its `reply:` chunks)."""
    text, found, at = surface.transcript(), [], 0
    decoder = json.JSONDecoder()
    while (at := text.find("reply:", at)) >= 0:
        value, end = decoder.raw_decode(text[at + len("reply:") :])
        found.append(value)
        at += len("reply:") + end
    return found


def sub_stops(surface: ScriptedSurface) -> list[Choice]:
    """The subagent Stop buttons the live message carries now."""
    return [
        button
        for buttons in surface.buttons_shown().values()
        for button in buttons
        if button.token.startswith(SUBSTOP_TOKEN_PREFIX)
    ]


def cancels(fake: FakeAgent) -> list[str]:
    return [frame["params"]["sessionId"] for frame in fake.frames_in("session/cancel")]


def token(card: Call, label: str) -> str:
    return next(choice.token for choice in card.choices if choice.label == label)


# ---- a subagent's own Stop ------------------------------------------------------------------------
async def test_a_cancellable_subagent_gets_its_own_stop_which_cancels_it_and_the_turn_goes_on(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    settings = engine_settings(
        tmp_path,
        fake_agent,
        telegram={"allowed_users": ["alice", "bob", "carol"], "approvers": ["carol"]},
    )
    # The parent waits on a permission card while the buttons are pressed; then it goes on.
    steps = script(CANCELLABLE, NOT_CANCELLABLE, {"permission": {}}, {"chunk": " parent went on"})
    async with running_app(settings, surface) as app:
        turn = surface.post(surface.message("alice", steps))
        await wait_for(surface.choices, "the parent's permission card")
        await wait_for(lambda: sub_stops(surface), "the subagent's Stop")
        (button,) = sub_stops(surface)  # the linter may not be cancelled: no button for it
        assert button.label == "Stop Test investigator" and button.style == "danger"
        live = [c for c in surface.ops("send", "edit") if c.buttons][-1]
        assert [b.label for b in live.buttons] == ["Stop", "Stop Test investigator"]

        await finished(surface.post(surface.press("bob", button.token)))
        assert surface.notices("bob") == ["Only Alice or an approver can stop this subagent."]
        elsewhere = ConversationKey(SURFACE, "chat-2")
        await finished(surface.post(surface.press("alice", button.token, key=elsewhere)))
        assert surface.notices("alice") == ["That subagent has already finished."]
        assert cancels(fake_agent) == []

        await finished(surface.post(surface.press("alice", button.token)))
        await wait_for(lambda: cancels(fake_agent) == [CHILD], "session/cancel for the child")
        assert surface.notices("alice")[-1] == (
            "Stopping the subagent Test investigator; the turn goes on."
        )
        await finished(surface.post(surface.press("carol", button.token)))  # once
        assert surface.notices("carol") == ["That subagent has already finished."]
        await wait_for(lambda: not sub_stops(surface), "the subagent's Stop gone")
        assert app.runners[CHAT].running

        card = surface.choices()[0]
        await finished(surface.post(surface.press("alice", token(card, "Yes"))), turn)
        refused = [r.as_json() for r in await app.store.audit_since(0) if r.kind == "refused"]
    assert cancels(fake_agent) == [CHILD]  # the parent's session was never cancelled
    final = list(surface.shown().values())[-1]
    assert "permission:allow_once" in final and "parent went on" in final
    assert [r["action"] for r in refused] == ["substop", "substop"]  # bob, and the other chat
    assert any(r.get("reason") for r in refused)


async def test_no_subagent_stop_when_the_agent_does_not_let_it_be_cancelled_or_it_is_idle(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(message_buttons=True)
    steps = script(
        NOT_CANCELLABLE,
        {"sleep": 0.3},
        CANCELLABLE,
        {"sleep": 0.3},
        announce(CHILD, "Test investigator", state="idle"),
        {"sleep": 0.3},
        {"chunk": "done"},
    )
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    labels = [[b.label for b in c.buttons] for c in surface.ops("send", "edit") if c.buttons]
    assert ["Stop", "Stop Test investigator"] in labels  # while it ran
    assert labels[-1] == ["Stop"]  # idle: nothing to stop
    assert all("Stop Linter" not in shown for shown in labels)
    assert cancels(fake_agent) == []


async def test_cancel_subagent_refuses_an_id_that_is_not_a_live_subagent_of_the_turn(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    from acp import AcpSubagentNotRunning
    from tests.acp_helpers import agent_spec, open_test_client

    async with open_test_client(agent_spec(fake_agent, tmp_path)) as client:
        session = await client.open_session()
        for child in (NOBODY, CHILD):  # idle: no turn runs, whatever was announced
            with pytest.raises(AcpSubagentNotRunning) as caught:
                await session.cancel_subagent(child)
            assert caught.value.child_id == child
    assert cancels(fake_agent) == []


# ---- a subagent's requests ---------------------------------------------------------------------
async def test_a_subagents_permission_request_is_a_card_of_the_parents_turn(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    steps = script(
        CANCELLABLE,
        asks(CHILD, "c1", "make test"),
        asks(CHILD, "c2", "rm -rf build"),
        {"chunk": " end"},
    )
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", steps))
        await wait_for(surface.choices, "the first card")
        first = surface.choices()[0]
        assert first.text.startswith("Subagent Test investigator wants to use a tool:")
        assert "make test" in first.text
        assert replies(surface) == []  # nothing answered before the press
        await finished(surface.post(surface.press("bob", token(first, "Yes"))))
        assert replies(surface) == []  # not bob's to answer
        await finished(surface.post(surface.press("alice", token(first, "Yes"))))
        await wait_for(lambda: len(surface.choices()) == 2, "the second card")
        second = surface.choices()[1]
        assert "rm -rf build" in second.text
        await finished(surface.post(surface.press("alice", token(second, "No"))), turn)
    outcomes = [r["result"]["outcome"] for r in replies(surface)]
    assert outcomes == [
        {"outcome": "selected", "optionId": "allow_once"},
        {"outcome": "selected", "optionId": "reject_once"},
    ]


async def test_a_subagents_question_says_whose_it_is(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface(message_buttons=True)
    schema = {
        "type": "object",
        "properties": {"go": {"type": "string", "title": "Which", "enum": ["a", "b"]}},
        "required": ["go"],
    }
    params = {"sessionId": CHILD, "mode": "form", "message": "Pick one", "requestedSchema": schema}
    steps = script(CANCELLABLE, {"request": {"method": "elicitation/create", "params": params}})
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", steps))
        await wait_for(surface.choices, "the question")
        card = surface.choices()[0]
        assert card.text.startswith("Subagent Test investigator asks Alice")
        await finished(surface.post(surface.press("alice", token(card, "b"))), turn)
    (reply,) = replies(surface)
    assert reply["result"] == {"action": "accept", "content": {"go": "b"}}


async def test_an_id_no_parent_announced_is_refused_and_a_subagents_read_is_served(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    (tmp_path / "notes.txt").write_text("hello from the workspace\n")
    path = str(tmp_path / "notes.txt")
    read = "fs/read_text_file"
    steps = script(
        CANCELLABLE,
        {"request": {"method": read, "params": {"sessionId": CHILD, "path": path}}},
        {"request": {"method": read, "params": {"sessionId": NOBODY, "path": path}}},
        asks(NOBODY, "c9", "echo sneaky"),
        {"chunk": " end"},
    )
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    child_read, stranger_read, stranger_asks = replies(surface)
    assert child_read["result"]["content"] == "hello from the workspace\n"
    assert stranger_read["error"]["code"] == -32602
    assert stranger_asks["result"]["outcome"] == {"outcome": "cancelled"}
    assert surface.choices() == []  # the stranger's request never became a card


async def test_a_subagents_write_runs_only_under_a_card_that_says_whose_it_is(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    target = tmp_path / "out.txt"
    params = {"sessionId": CHILD, "path": str(target), "content": "written"}
    write = {"request": {"method": "fs/write_text_file", "params": params}}
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", script(CANCELLABLE, write, write)))
        await wait_for(surface.choices, "the first card")
        first = surface.choices()[0]
        assert first.text.startswith("Subagent Test investigator wants to use a tool:")
        assert not target.exists()  # nothing written before the press
        await finished(surface.post(surface.press("alice", token(first, "Decline"))))
        await wait_for(lambda: len(surface.choices()) == 2, "the second card")
        assert not target.exists()
        second = surface.choices()[1]
        await finished(surface.post(surface.press("alice", token(second, "Allow"))), turn)
    declined, allowed = replies(surface)
    assert "error" in declined and "result" in allowed
    assert target.read_text() == "written"
