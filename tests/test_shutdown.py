"""Winding down: the app waits for each running conversation's idle event (no polling), so a turn
that ends when it is stopped lets the app stop at once, well inside the shutdown budget."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from bot.conversations import SHUTDOWN_BUDGET
from tests.conftest import FakeAgent
from tests.engine_helpers import CHAT, ScriptedSurface, engine_settings, running_app, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]


async def test_an_idle_conversation_is_idle_at_once(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        with anyio.fail_after(15):
            await surface.post(surface.message("alice", "hello")).wait()
        runner = app.runners[CHAT]
        with anyio.fail_after(1):
            await runner.wait_idle()
        assert not runner.running


async def test_stopping_mid_turn_ends_the_turn_and_does_not_wait_out_the_budget(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    hang = "SCRIPT:" + json.dumps([{"chunk": "working on it"}, {"hang": True}])
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(surface.message("alice", hang))
        await wait_for(lambda: "working on it" in surface.transcript(), "the streamed text")
        runner = app.runners[CHAT]
        assert runner.running
        stopping = time.monotonic()
    assert time.monotonic() - stopping < SHUTDOWN_BUDGET
    assert turn.is_set() and not runner.running
    shown = surface.transcript()
    assert "working on it" in shown
    assert "The turn was stopped." in shown
