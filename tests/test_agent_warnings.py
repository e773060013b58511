"""Warnings an agent puts into its reply stream (codex: "Warning: Model metadata for `m` not
found. ..." before every answer) are told once as a notice, are not part of the reply, and do
not count as the agent having answered when the ladder decides whether to resend."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

WARNING = (
    "Warning: Model metadata for `gpt-mock` not found. Defaulting to fallback metadata; this can "
    "degrade performance and cause issues.\n"
)
TOLD = "The agent warns: Warning: Model metadata for `gpt-mock` not found."


async def test_an_injected_warning_is_one_notice_and_not_part_of_any_reply(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    answer = script({"chunk": WARNING}, {"chunk": "Here "}, {"chunk": "it is."})
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        for _ in range(2):  # codex says it before every answer
            await finished(surface.post(surface.message("alice", answer)))
        await wait_for(lambda: TOLD in surface.transcript(), "the warning's notice")
    shown = list(surface.shown().values())
    assert shown.count("Here it is.") == 2
    assert sum(TOLD in text for text in shown) == 1
    assert not any("Model metadata" in text and "Here" in text for text in shown)


async def test_a_warning_then_a_temporary_error_is_retried_as_if_nothing_was_said(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    overloaded = {"error": {"code": -32603, "message": "Internal error: the model is overloaded"}}
    first = script({"chunk": WARNING}, overloaded)
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", first)))
    assert len(fake_agent.prompt_texts()) == 4  # resent verbatim: the warning was no answer
    assert set(fake_agent.prompt_texts()) == {first}


async def test_an_answer_that_starts_with_the_word_warning_stays_the_answer(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    answer = script({"chunk": "Warning: "}, {"chunk": "this deletes files.\n"}, {"chunk": "Sure?"})
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", answer)))
    assert "Warning: this deletes files.\nSure?" in surface.transcript()
    assert "The agent warns" not in surface.transcript()
