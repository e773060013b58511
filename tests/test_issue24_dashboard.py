"""Issue 24 on the dashboard end to end (its aiohttp server and WebSocket, BotApp in process, the
scripted agent as a real subprocess): the agent's questions (a single choice as buttons pressed in
the page's frames, a text field answered by the person's next message, a URL question's link
button closed by `elicitation/complete`), the approval card's **Trust this tool for this
session** (the second identical request answered without a card), an edit's change in the card
and a long one as a `.diff` file to download, and a subagent's Stop sending `session/cancel` with
the child's session id."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from surfaces.base import OutgoingFile
from surfaces.dashboard.adapter import DashboardSurface
from surfaces.dashboard.files import FileShelf
from tests.conftest import FakeAgent, script
from tests.engine_helpers import engine_settings, running_app, wait_for
from tests.test_dashboard import (
    ACCESS,
    Frame,
    Page,
    agent_html,
    final,
    page,
    served,
    signed_in,
)
from tests.test_subagents import CANCELLABLE, CHILD, cancels

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

TRUST = "Trust this tool for this session"


@asynccontextmanager
async def chatting(
    tmp_path: Path, fake_agent: FakeAgent, **overrides: Any
) -> AsyncIterator[TestClient[Any, Any]]:
    settings = engine_settings(tmp_path, fake_agent, dashboard=ACCESS, **overrides)
    surface = DashboardSurface(settings.dashboard, min_edit_interval=0.01)
    async with running_app(settings, surface), served(surface) as client:  # type: ignore[arg-type]  # any Surface serves
        yield client


def labels(frame: Frame) -> list[str]:
    return [b["label"] for b in frame["buttons"]]


async def press(who: Page, frame: Frame, label: str) -> None:
    (token,) = [b["token"] for b in frame["buttons"] if b["label"] == label]
    await who.socket.send_json({"type": "press", "tab": frame["tab"], "token": token})


def card(heading: str) -> Any:
    """A frame of a message that shows `heading` and carries buttons."""
    return lambda f: f["type"] == "message" and heading in f["html"] and f.get("buttons")


def last_of(who: Page, frame: Frame) -> Frame:
    """The message `frame` showed, as it stands now."""
    return [f for f in who.messages(frame["tab"]) if f["id"] == frame["id"]][-1]


def reply_of_agent(html: str) -> dict[str, Any]:
    start = html.index("reply:") + len("reply:")
    result, _ = json.JSONDecoder().raw_decode(html[start:].replace("&quot;", '"'))
    return dict(result["result"])


# ---- the agent's questions ---------------------------------------------------------------------
FORM = {
    "request": {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Which database?",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "db": {
                        "type": "string",
                        "title": "Database",
                        "oneOf": [
                            {"const": "pg", "title": "PostgreSQL"},
                            {"const": "lite", "title": "SQLite"},
                        ],
                    },
                    "why": {"type": "string", "title": "Why"},
                },
                "required": ["db", "why"],
            },
        },
    }
}


async def test_a_form_is_buttons_then_a_text_field_answered_by_the_next_message(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with chatting(tmp_path, fake_agent) as client, page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, script(FORM))
        first = await alice.until(card("Question 1 of 2"), "the first card")
        assert "Which database?" in first["html"]
        assert labels(first) == ["PostgreSQL", "SQLite", "Decline", "Cancel"]
        await press(alice, first, "SQLite")
        second = await alice.until(card("Question 2 of 2"), "the second card")
        assert labels(second) == ["Decline", "Cancel"]
        assert last_of(alice, first)["buttons"] == []  # closed once answered
        assert "SQLite" in last_of(alice, first)["html"]
        await alice.send(tab, "It is one file")
        answered = await alice.until(lambda f: agent_html(f) and "reply:" in f["html"], "reply")
        await alice.until(
            lambda f: f.get("id") == second["id"] and f.get("buttons") == [], "closed"
        )
    assert reply_of_agent(answered["html"]) == {
        "action": "accept",
        "content": {"db": "lite", "why": "It is one file"},
    }
    assert fake_agent.prompt_texts() == [script(FORM)]  # the typed answer was no prompt


async def test_a_url_question_is_a_link_and_the_agents_complete_closes_the_card(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    params = {
        "mode": "url",
        "message": "Sign in to the tracker",
        "url": "https://tracker.example/login",
        "elicitationId": "e-7",
    }
    steps = script(
        {"request": {"method": "elicitation/create", "params": params}},
        {"notify": {"method": "elicitation/complete", "params": {"elicitationId": "e-7"}}},
    )
    async with chatting(tmp_path, fake_agent) as client, page(client, "alice") as alice:
        await alice.send(alice.tabs()[0], steps)
        shown = await alice.until(card("Sign in to the tracker"), "the link card")
        (link,) = [b for b in shown["buttons"] if "url" in b]
        assert link == {
            "label": "Open tracker.example",
            "style": link["style"],
            "url": params["url"],
        }
        assert "token" not in link  # a link, never a token pressed back
        await press(alice, shown, "Done")
        await alice.until(
            lambda f: f.get("id") == shown["id"] and "complete" in f["html"] and f["buttons"] == [],
            "the card closed by the agent",
        )
        answered = await alice.until(lambda f: agent_html(f) and "reply:" in f["html"], "reply")
    assert reply_of_agent(answered["html"])["action"] == "accept"


# ---- trust -------------------------------------------------------------------------------------
def _tool(call: str, command: str) -> dict[str, Any]:
    return {"toolCallId": call, "title": f"Run {command}", "kind": "execute",
            "rawInput": {"command": command}}  # fmt: skip


def _outcomes(fake: FakeAgent) -> list[str]:
    return [
        frame["result"]["outcome"].get("optionId", "cancelled")
        for frame in fake.frames_in()
        if "method" not in frame
        and isinstance(frame.get("result"), dict)
        and "outcome" in frame["result"]
    ]


async def test_trust_answers_the_second_identical_request_without_a_card(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    asks = (_tool("c1", "npm test"), _tool("c2", "npm test --watch"), _tool("c3", "npm ci"))
    steps = script(*({"permission": {"toolCall": tool}} for tool in asks), {"chunk": " all done"})
    async with chatting(tmp_path, fake_agent) as client, page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, steps)
        first = await alice.until(lambda f: f.get("kind") == "choice", "the first card")
        assert labels(first) == ["Yes", "Always", "No", TRUST]
        await press(alice, first, TRUST)
        second = await alice.until(
            lambda f: f.get("kind") == "choice" and f["id"] != first["id"], "the npm ci card"
        )
        assert "npm ci" in second["html"] and "--watch" not in second["html"]
        await press(alice, second, "No")
        await alice.until(lambda f: final(f) and "all done" in f["html"], "the turn's end")
        await alice.send(tab, "/trust")
        await alice.until(
            lambda f: agent_html(f) and "trusted by alice" in f["html"].lower(), "the rule listed"
        )
    closed = last_of(alice, first)
    assert "Trusted for this session" in closed["html"] and closed["buttons"] == []
    assert len({f["id"] for f in alice.messages(tab) if f.get("kind") == "choice"}) == 2
    assert _outcomes(fake_agent) == ["allow_once", "allow_once", "reject_once"]


# ---- diffs -------------------------------------------------------------------------------------
OLD = "".join(f"line {n}\n" for n in range(60))
NEW = OLD.replace("line 3\n", "line three\n") + "".join(f"added {n}\n" for n in range(50))


def _edit() -> str:
    change = {"type": "diff", "path": "/w/long.txt", "oldText": OLD, "newText": NEW}
    tool = {"toolCallId": "e1", "title": "Edit long.txt", "kind": "edit", "content": [change]}
    return script({"permission": {"toolCall": tool}}, {"chunk": "edited"})


async def test_the_card_shows_the_change_and_a_long_one_comes_as_a_diff_file(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with (
        chatting(tmp_path, fake_agent, diff_file_after=10) as client,
        page(client, "alice") as alice,
    ):
        tab = alice.tabs()[0]
        await alice.send(tab, _edit())
        shown = await alice.until(lambda f: f.get("kind") == "choice", "the approval card")
        assert "/w/long.txt: +51 \u22121\n```diff\n@@ " in shown["html"]
        assert "+line three" in shown["html"] and "added 49" not in shown["html"]
        sent = await alice.until(lambda f: f.get("kind") == "file", "the .diff file")
        assert sent["name"] == "long.txt.diff" and "long.txt: +51" in sent["html"]
        assert (await client.get(sent["url"])).status == 401  # signed out
        await signed_in(client, "bob")
        assert (await client.get(sent["url"])).status == 404  # not bob's conversation
        await signed_in(client, "alice")  # another browser of hers
        download = await client.get(sent["url"])
        assert download.status == 200
        assert download.headers["Content-Type"] == "application/octet-stream"
        assert 'filename="long.txt.diff"' in download.headers["Content-Disposition"]
        patch = (await download.read()).decode()
        assert patch.startswith("--- a/w/long.txt\n+++ b/w/long.txt\n")
        assert "+added 49\n" in patch and "-line 3\n" in patch
        await press(alice, shown, "Yes")
        await alice.until(lambda f: final(f) and "edited" in f["html"], "the turn to go on")


# ---- subagents ---------------------------------------------------------------------------------
async def test_a_subagents_stop_cancels_the_child_and_the_turn_goes_on(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    steps = script(CANCELLABLE, {"permission": {}}, {"chunk": " parent went on"})
    label = "Stop Test investigator"
    async with chatting(tmp_path, fake_agent) as client, page(client, "alice") as alice:
        await alice.send(alice.tabs()[0], steps)
        live = await alice.until(
            lambda f: agent_html(f) and label in [b["label"] for b in f.get("buttons", [])],
            "the subagent's Stop",
        )
        assert labels(live) == ["Stop", label]
        await press(alice, live, label)
        await wait_for(lambda: cancels(fake_agent) == [CHILD], "session/cancel for the child")
        await alice.until(
            lambda f: f.get("id") == live["id"] and "buttons" in f and label not in labels(f),
            "the subagent's Stop gone",
        )
        approval = await alice.until(lambda f: f.get("kind") == "choice", "the permission card")
        await press(alice, approval, "Yes")
        await alice.until(lambda f: final(f) and "parent went on" in f["html"], "the final")
    assert cancels(fake_agent) == [CHILD]


def test_the_shelf_forgets_its_oldest_files_past_its_bounds() -> None:
    shelf = FileShelf(max_files=2, max_bytes=10)
    first = shelf.keep("t1", OutgoingFile("a.diff", b"1234"))
    second = shelf.keep("t1", OutgoingFile("b.diff", b"5678"))
    assert shelf.get(first) is not None and shelf.get(second) is not None
    third = shelf.keep("t2", OutgoingFile("c.diff", b"90"))  # a third file: past the count
    assert shelf.get(first) is None and shelf.get(second) is not None
    fourth = shelf.keep("t2", OutgoingFile("d.diff", b"abcdef"))  # 12 bytes: past the bytes
    assert shelf.get(second) is None and shelf.get(third) is not None
    assert shelf.get(fourth) is not None and shelf.bytes == 8
    assert len({first, second, third, fourth}) == 4
