"""A message sent while the agent works, on the dashboard end to end (its aiohttp server and
websocket, the scripted agent as a real subprocess): the Queued acknowledgement arrives with a
Stop and send button; pressed over the websocket it stops the running reply and sends the
message next; the acknowledgement then says so and carries no button."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.busy import QUEUED
from tests.conftest import FakeAgent, script
from tests.test_dashboard import agent_html, chatting, page

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


async def test_stop_and_send_is_pressed_over_the_websocket(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    hanging = script({"chunk": "working on it"}, {"hang": True})
    async with chatting(tmp_path, fake_agent) as (_, client), page(client, "alice") as alice:
        tab = alice.tabs()[0]
        await alice.send(tab, hanging)
        await alice.until(lambda f: agent_html(f) and "working on it" in f["html"], "live text")
        await alice.send(tab, "the other file")
        ack = await alice.until(lambda f: agent_html(f) and QUEUED in f["html"], "the ack")
        (button,) = ack["buttons"]
        assert button["label"] == "Stop and send"
        await alice.socket.send_json({"type": "press", "tab": tab, "token": button["token"]})
        await alice.until(lambda f: agent_html(f) and "Echo: the other file" in f["html"], "reply")
        edited = await alice.until(
            lambda f: f.get("id") == ack["id"] and f.get("buttons") == [], "the ack's edit"
        )
    assert "Stopping the current reply" in edited["html"] and edited["buttons"] == []
    assert fake_agent.prompt_texts()[1:] == ["the other file"]
    assert len(fake_agent.frames_in("session/cancel")) == 1
