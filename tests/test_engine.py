"""The conversation engine in process: BotApp and ChatRunner driving the real fake-agent subprocess,
with a scripted surface standing in for a platform (access rules, de-duplication, queueing, busy
agents, approvals, /stop, splitting and coalescing, the delivery ledger, the runtime pool)."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp import AcpRuntime
from bot.conversations import RELEASE_AFTER
from bot.faults import fault_sentence
from surfaces.base import ConversationKey
from surfaces.errors import SendFailed
from tests.conftest import FakeAgent, pid_alive, script
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

FENCE_LINE = re.compile(r" {0,3}```")
RECEIPT = "Queued"


# ---- reading the fake agent's log -------------------------------------------------------------


def permission_outcomes(fake: FakeAgent) -> list[dict[str, Any]]:
    """What we answered to the agent's permission requests, in order."""
    return [
        frame["result"]["outcome"]
        for frame in fake.frames_in()
        if "method" not in frame
        and isinstance(frame.get("result"), dict)
        and "outcome" in frame["result"]
    ]


def prompt_spans(fake: FakeAgent) -> list[tuple[float, float]]:
    """(sent, answered) times of each session/prompt, from the agent's side."""
    records = fake.records()
    spans = []
    for record in records:
        frame = record.get("frame") or {}
        if record.get("dir") != "in" or frame.get("method") != "session/prompt":
            continue
        answered = [
            other["t"]
            for other in records
            if other.get("dir") == "out"
            and other.get("pid") == record["pid"]
            and "method" not in (other.get("frame") or {"method": None})
            and other["frame"].get("id") == frame["id"]
        ]
        spans.append((record["t"], min(answered) if answered else float("inf")))
    return spans


def agent_pid(fake: FakeAgent, index: int = -1) -> int:
    starts = [r["pid"] for r in fake.records() if r.get("event") == "start"]
    return int(starts[index])


def sends(surface: ScriptedSurface, containing: str) -> list[Call]:
    return [call for call in surface.ops("send", "edit") if containing in call.text]


def receipts(surface: ScriptedSurface, count: int) -> Callable[[], bool]:
    """A condition: `count` queued receipts have been shown."""
    return lambda: len(sends(surface, RECEIPT)) == count


def balanced(part: str) -> bool:
    return sum(1 for line in part.split("\n") if FENCE_LINE.match(line)) % 2 == 0


def content(text: str) -> str:
    kept = [line for line in text.split("\n") if not FENCE_LINE.match(line)]
    return "".join("".join(kept).split())


LONG_TURN = script({"chunk": "first "}, {"sleep": 1.0}, {"chunk": "done"})


# ---- access and de-duplication ----------------------------------------------------------------
async def test_a_stranger_gets_no_surface_call_and_nothing_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bot.access")
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        events = [
            surface.post(surface.message("mallory", text))
            for text in ("/start", "/help", "hello", "SCN_STREAM", "/stop")
        ]
        events.append(surface.post(surface.press("mallory", "some-token")))
        await finished(*events)
    assert surface.calls == []
    assert fake_agent.frames_in("session/prompt") == []
    assert fake_agent.spawns() == 0
    logged = [r for r in caplog.records if "stranger" in r.getMessage()]
    assert len(logged) == 1
    assert "mallory" in logged[0].getMessage()


async def test_a_redelivered_event_is_processed_once(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        first = surface.post(surface.message("alice", "hello", event_id="update-7"))
        again = surface.post(surface.message("alice", "hello", event_id="update-7"))
        await finished(first, again)
        await finished(surface.post(surface.message("alice", "hello", event_id="update-7")))
    assert fake_agent.prompt_texts() == ["hello"]
    assert surface.transcript().count("Echo: hello") == 1


# ---- turns and the queue ----------------------------------------------------------------------
async def test_a_message_arriving_mid_turn_is_queued_and_runs_after_the_first_answer(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        first = surface.post(surface.message("alice", LONG_TURN))
        await wait_for(lambda: len(fake_agent.prompt_texts()) == 1, "the first prompt")
        second = surface.post(surface.message("bob", "second"))
        await wait_for(lambda: sends(surface, RECEIPT), "the queued receipt")
        await finished(first, second)
    receipt = sends(surface, RECEIPT)[0].text
    # one short line: no buttons here, so it names the command to type instead
    assert receipt.startswith("Queued — the agent is still working.") and len(receipt) <= 100
    assert fake_agent.prompt_texts()[1:] == ["second"]
    (_, first_answered), (second_sent, _) = prompt_spans(fake_agent)
    assert second_sent >= first_answered, "a second prompt was sent while the first one ran"
    shown = surface.transcript()
    assert "first done" in shown
    assert "Echo: second" in shown
    assert shown.index("first done") < shown.index("Echo: second")


async def test_a_burst_of_three_messages_while_busy_becomes_one_turn(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        first = surface.post(surface.message("alice", LONG_TURN))
        await wait_for(lambda: len(fake_agent.prompt_texts()) == 1, "the first prompt")
        burst = []
        for n, text in enumerate(("one", "two", "three"), start=1):
            burst.append(surface.post(surface.message("alice", text)))
            await wait_for(receipts(surface, n), f"receipt {n}")
        await finished(first, *burst)
    texts = fake_agent.prompt_texts()
    assert len(texts) == 2
    assert texts[1] == "one\n\ntwo\n\nthree"
    spans = prompt_spans(fake_agent)
    assert spans[1][0] >= spans[0][1]


async def test_the_queue_limit_refuses_extra_messages_with_a_clear_line(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, queue_limit=2)
    async with running_app(settings, surface):
        first = surface.post(surface.message("alice", LONG_TURN))
        await wait_for(lambda: len(fake_agent.prompt_texts()) == 1, "the first prompt")
        waiting = []
        for n, text in enumerate(("one", "two"), start=1):
            waiting.append(surface.post(surface.message("alice", text)))
            await wait_for(receipts(surface, n), f"receipt {n}")
        refused = surface.post(surface.message("alice", "three"))
        await wait_for(lambda: sends(surface, "Too many messages"), "the refusal")
        await finished(refused)
        assert len(fake_agent.prompt_texts()) == 1  # refused at once, not after the turn
        await finished(first, *waiting)
    texts = fake_agent.prompt_texts()
    assert texts[1:] == ["one\n\ntwo"]
    assert not any("three" in text for text in texts)
    refusal = sends(surface, "Too many messages")[0].text
    assert "send this again" in refusal


async def test_prompt_busy_resets_the_session_and_replays_once_on_a_fresh_session(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", "SCN_BUSY")))
    assert fake_agent.frames_in("session/load") == []
    fresh = [r["frame"]["result"]["sessionId"] for r in _new_results(fake_agent)]
    assert len(fresh) == 2, "a second session/new for the replay"
    prompts = fake_agent.frames_in("session/prompt")
    assert prompts[-1]["params"]["sessionId"] == fresh[1]
    shown = surface.transcript()
    assert "busy" in shown
    assert not re.search(r"(^|\s)[/!][a-z]", shown), shown


async def test_prompt_busy_replay_names_no_command_and_is_bounded(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    """What holds today, whatever session the replay lands on: one replay, then one plain line."""
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", "SCN_BUSY")))
    prompts = fake_agent.frames_in("session/prompt")
    assert 2 <= len(prompts) <= 6  # the busy budget twice (first try, one replay), no more
    assert len(fake_agent.frames_in("session/new")) + len(fake_agent.frames_in("session/load")) == 2
    shown = surface.transcript()
    assert "busy" in shown
    assert not re.search(r"(^|\s)[/!][a-z]", shown), shown


def _new_results(fake: FakeAgent) -> list[dict[str, Any]]:
    return [
        r
        for r in fake.records()
        if r.get("dir") == "out"
        and isinstance((r.get("frame") or {}).get("result"), dict)
        and "sessionId" in r["frame"]["result"]
    ]


# ---- approvals --------------------------------------------------------------------------------
async def _ask_permission(surface: ScriptedSurface, user: str = "alice") -> tuple[Any, Call]:
    turn = surface.post(surface.message(user, "SCN_PERMISSION"))
    await wait_for(surface.choices, "the approval prompt")
    return turn, surface.choices()[0]


def _token(call: Call, label: str) -> str:
    return next(choice.token for choice in call.choices if choice.label == label)


async def test_the_requesters_answer_to_an_approval_is_taken(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn, choice = await _ask_permission(surface)
        assert "Run echo hi" in choice.text
        assert set(choice.allowed_users) == {"alice", "carol"}
        assert [c.label for c in choice.choices] == [
            "Yes",
            "Always",
            "No",
            "Trust this tool for this session",
        ]
        await finished(surface.post(surface.press("alice", _token(choice, "Yes"))))
        await finished(turn)
    assert permission_outcomes(fake_agent) == [{"outcome": "selected", "optionId": "allow_once"}]
    assert "permission:allow_once" in surface.transcript()
    assert [c.text for c in surface.ops("close_choice")] == ["Answered: Yes"]
    assert surface.notices() == []


async def test_another_users_answer_is_refused_and_an_approvers_is_taken(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn, choice = await _ask_permission(surface)
        await finished(surface.post(surface.press("bob", _token(choice, "Yes"))))
        assert len(surface.notices("bob")) == 1
        assert "Alice" in surface.notices("bob")[0]
        assert not turn.is_set()
        assert permission_outcomes(fake_agent) == []
        assert surface.ops("close_choice") == []
        await finished(surface.post(surface.press("carol", _token(choice, "No"))))
        await finished(turn)
    assert permission_outcomes(fake_agent) == [{"outcome": "selected", "optionId": "reject_once"}]
    assert "permission:reject_once" in surface.transcript()
    assert surface.notices("carol") == []


async def test_an_approval_token_works_once(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn, choice = await _ask_permission(surface)
        token = _token(choice, "Yes")
        await finished(surface.post(surface.press("alice", token)))
        await finished(surface.post(surface.press("alice", token)))
        await finished(surface.post(surface.press("alice", _token(choice, "No"))))
        await finished(turn)
    assert permission_outcomes(fake_agent) == [{"outcome": "selected", "optionId": "allow_once"}]
    notices = surface.notices("alice")
    assert len(notices) == 2
    assert all("no longer pending" in n or "already answered" in n for n in notices), notices


async def test_no_answer_within_the_approval_timeout_selects_reject(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, approval_timeout=0.5)
    async with running_app(settings, surface):
        turn, _ = await _ask_permission(surface)
        await finished(turn)
    assert permission_outcomes(fake_agent) == [{"outcome": "selected", "optionId": "reject_once"}]
    (closed,) = surface.ops("close_choice")
    assert "No answer" in closed.text and "rejected" in closed.text
    assert "permission:reject_once" in surface.transcript()


async def test_stop_during_a_pending_approval_answers_it_cancelled_and_cancels_the_turn(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn, _ = await _ask_permission(surface)
        await finished(surface.post(surface.message("alice", "/stop")), turn)
        assert not app.runners[CHAT].running
    assert permission_outcomes(fake_agent) == [{"outcome": "cancelled"}]
    assert len(fake_agent.frames_in("session/cancel")) == 1
    assert len(surface.ops("close_choice")) == 1
    shown = surface.transcript()
    assert "Stopping." in shown
    assert "The turn was stopped." in shown


# ---- /stop --------------------------------------------------------------------------------------
async def test_stop_cancels_the_running_turn_and_the_conversation_is_not_left_busy(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(
            surface.message("alice", script({"chunk": "working on it"}, {"hang": True}))
        )
        await wait_for(lambda: sends(surface, "working on it"), "the streamed text")
        await finished(surface.post(surface.message("alice", "/stop")), turn)
        assert len(fake_agent.frames_in("session/cancel")) == 1
        assert not app.runners[CHAT].running
        shown = surface.transcript()
        assert "working on it" in shown
        assert "The turn was stopped." in shown
        await finished(surface.post(surface.message("alice", "later")))
    assert "Echo: later" in surface.transcript()
    assert fake_agent.prompt_texts()[-1] == "later"


# ---- splitting and coalescing -----------------------------------------------------------------
LONG_ANSWER = (
    "Here is how the parser works, in a few steps that take more than one message.\n\n"
    "```python\n"
    + "".join(f"value_{n} = compute({n}, weight={n * 3})\n" for n in range(8))
    + "```\n\n"
    "That is all; the loop above runs once per item and nothing else is needed."
)


async def test_a_long_answer_is_split_within_the_limit_with_balanced_fences(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(max_chars=50)
    pieces = [LONG_ANSWER[i : i + 23] for i in range(0, len(LONG_ANSWER), 23)]
    steps = [{"chunk": piece} for piece in pieces]
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", script(*steps))))
    delivered = surface.ops("send", "edit")
    assert delivered
    assert all(len(call.text) <= 50 for call in delivered), [c.text for c in delivered]
    parts = [text for text in surface.shown().values() if text != "…"]
    assert len(parts) > 1
    assert all(balanced(part) for part in parts), parts
    assert content("\n".join(parts)) == content(LONG_ANSWER)


async def test_fifty_quick_chunks_are_coalesced_into_few_edits_ending_with_the_final_text(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(min_edit_interval=0.2)
    chunks = [f"w{n:02d} " for n in range(50)]
    steps: list[dict[str, Any]] = []
    for chunk in chunks:
        steps += [{"chunk": chunk}, {"sleep": 0.01}]
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", script(*steps))))
    final = "".join(chunks).strip()
    edits = surface.ops("edit")
    assert len(edits) <= 16  # a third of the chunks at most
    last = surface.ops("send", "edit")[-1]
    assert last.text.strip() == final
    assert list(surface.shown().values()) == [last.text]


# ---- the delivery ledger ----------------------------------------------------------------------
async def test_an_undelivered_final_text_is_resent_when_a_new_app_starts(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = engine_settings(tmp_path, fake_agent)
    broken = ScriptedSurface(can_edit=False)
    broken.fail_always("send", SendFailed("bad request: chat not found", transient=False))
    async with running_app(settings, broken):
        await finished(broken.post(broken.message("alice", "hello")))
    assert broken.ops("send") == []
    assert [c.text for c in broken.calls if c.op == "send"] == ["Echo: hello"]

    working = ScriptedSurface(can_edit=False)
    async with running_app(settings, working):
        await wait_for(lambda: sends(working, "Echo: hello"), "the re-sent reply")
    assert [c.text for c in working.ops("send")] == ["Echo: hello"]
    assert fake_agent.frames_in("session/prompt")[1:] == []  # re-sent, not asked again

    again = ScriptedSurface(can_edit=False)
    async with running_app(settings, again):
        pass
    assert again.ops("send") == []  # delivered once; the ledger entry is done


# ---- the runtime pool -------------------------------------------------------------------------
async def test_a_killed_agent_is_respawned_on_the_next_message_and_resumes_the_session(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", "first")))
        pid = agent_pid(fake_agent)
        os.kill(pid, signal.SIGKILL)
        await wait_for(lambda: not pid_alive(pid), "the agent to die")
        await finished(surface.post(surface.message("alice", "second")))
    assert fake_agent.spawns() == 2
    (loaded,) = fake_agent.frames_in("session/load")
    (created,) = _new_results(fake_agent)
    assert loaded["params"]["sessionId"] == created["frame"]["result"]["sessionId"]
    shown = surface.transcript()
    assert "Echo: second" in shown
    assert "could not be restored" not in shown


async def test_an_idle_conversation_is_released_and_its_next_message_resumes_the_same_session(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    """The runner and session objects go; the agent keeps the session, and the next message takes
    it up again without session/load (this agent could not load it) and without a notice. What
    /status shows from the agent (the context used) is still shown."""
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, "--no-load")
    usage = script(
        {"notify": {"method": "_kiro.dev/metadata", "params": {"contextUsagePercentage": 41.2}}},
        {"chunk": "ok"},
    )
    async with running_app(settings, surface) as app:
        await finished(surface.post(surface.message("alice", usage)))
        session = app.runners[CHAT].sessions.current
        assert session is not None
        client = session.client
        app.conversations.release_idle(time.monotonic() + RELEASE_AFTER)
        assert CHAT not in app.runners
        assert client.sessions == {}
        assert session.session_id not in client.runtime.handle._inboxes
        await finished(surface.post(surface.message("alice", "/status")))
        assert "Context: 41% used" in surface.transcript()
        await finished(surface.post(surface.message("alice", "second")))
        again = app.runners[CHAT].sessions.current
        assert again is not None and again is not session
        assert again.session_id == session.session_id
    assert fake_agent.spawns() == 1
    assert fake_agent.frames_in("session/load") == []
    assert len(fake_agent.frames_in("session/new")) == 1
    prompted = {f["params"]["sessionId"] for f in fake_agent.frames_in("session/prompt")}
    assert prompted == {session.session_id}
    shown = surface.transcript()
    assert "Echo: second" in shown
    assert "could not be restored" not in shown


async def test_an_idle_agent_is_stopped_and_the_next_message_works_again(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, runtime_idle=0.3)
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", "first")))
        pid = agent_pid(fake_agent)
        await wait_for(lambda: not pid_alive(pid), "the idle agent to be stopped")
        await finished(surface.post(surface.message("alice", "second")))
        assert "Echo: second" in surface.transcript()
    assert fake_agent.spawns() == 2


async def test_a_turn_that_ends_without_any_text_still_gets_a_reply(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", script({"stop": "end_turn"}))))
    assert "finished without writing a reply" in surface.transcript()


# ---- fault isolation --------------------------------------------------------------------------
BUG = RuntimeError("a bug nobody mapped")
SAID_ON_FAULT = fault_sentence(BUG)
TURN_ID = re.compile(r"\bturn=[0-9a-f]{8}\b")


def shown_in(surface: ScriptedSurface, key: ConversationKey) -> str:
    messages: dict[str, str] = {}
    for call in surface.ops("send", "edit"):
        if call.key == key:
            messages[call.message] = call.text
    return "\n".join(messages.values())


def leaves(exc: BaseException | None) -> list[BaseException | None]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.ERROR]


async def test_a_fault_in_one_conversation_ends_only_its_turn_while_the_others_stream_on(
    tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    surface = ScriptedSurface()
    first, failing, third = (ConversationKey(SURFACE, f"chat-{n}") for n in (1, 2, 3))
    surface.crash(failing, "ask_choice", BUG)  # the approval buttons cannot be shown
    parts = [f"p{n}." for n in range(12)]
    streaming: list[dict[str, Any]] = []
    for part in parts:
        streaming += [{"chunk": part}, {"sleep": 0.05}]
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turns = [
            surface.post(surface.message("alice", script(*streaming), key=first)),
            surface.post(
                surface.message(
                    "bob",
                    script({"chunk": "before"}, {"sleep": 0.2}, {"permission": {}}),
                    key=failing,
                )
            ),
            surface.post(surface.message("bob", script(*streaming), key=third)),
        ]
        await finished(*turns)
        assert shown_in(surface, first) == "".join(parts)
        assert shown_in(surface, third) == "".join(parts)
        assert shown_in(surface, failing) == f"before\n\n{SAID_ON_FAULT}"

        (error,) = errors_logged(caplog)  # logged once, with what it takes to find it
        assert error.exc_info is not None and error.exc_info[1] is BUG
        logged = error.getMessage()
        assert f"conversation={failing}" in logged
        assert f"agent_pid={agent_pid(fake_agent)}" in logged
        assert TURN_ID.search(logged), logged

        surface.crash(failing, "ask_choice", None)
        later = ConversationKey(SURFACE, "chat-4")
        await finished(
            surface.post(surface.message("bob", "again", key=failing)),
            surface.post(surface.message("alice", "hello", key=later)),
        )
        assert shown_in(surface, failing).endswith("Echo: again")
        assert shown_in(surface, later) == "Echo: hello"


async def test_a_fault_while_handling_one_event_leaves_the_surface_serving_everyone_else(
    tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    surface = ScriptedSurface()
    broken, other = ConversationKey(SURFACE, "chat-1"), ConversationKey(SURFACE, "chat-2")
    surface.crash(broken, "send", BUG)  # even the reply to /help fails
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        help_event = surface.message("alice", "/help", key=broken)
        await finished(surface.post(help_event))
        await finished(surface.post(surface.message("bob", "still there?", key=other)))
        assert shown_in(surface, other) == "Echo: still there?"
    (error,) = errors_logged(caplog)
    assert error.exc_info is not None and leaves(error.exc_info[1]) == [BUG]
    assert f"conversation={broken}" in error.getMessage()
    assert f"event={help_event.event_id}" in error.getMessage()


async def test_a_fault_reading_one_agents_frames_stops_that_agent_and_the_next_message_respawns(
    tmp_path: Path,
    fake_agent: FakeAgent,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def buggy(self: AcpRuntime, method: str, params: Any) -> None:
        if method == "_test/trip":  # stands for a bug in handling one kind of frame
            raise BUG

    monkeypatch.setattr(AcpRuntime, "_on_notification", buggy)
    trip = {"raw": json.dumps({"jsonrpc": "2.0", "method": "_test/trip", "params": {}})}
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", script({"chunk": "x"}, trip))))
        first_pid = agent_pid(fake_agent)
        await wait_for(lambda: not pid_alive(first_pid), "the faulty agent to be stopped")
        await finished(
            surface.post(surface.message("bob", "after", key=ConversationKey(SURFACE, "chat-2")))
        )
        assert shown_in(surface, ConversationKey(SURFACE, "chat-2")) == "Echo: after"
    assert fake_agent.spawns() == 2
    (error,) = errors_logged(caplog)
    assert error.exc_info is not None and leaves(error.exc_info[1]) == [BUG]
    assert f"agent_pid={first_pid}" in error.getMessage()


async def test_a_fault_re_sending_one_cut_off_reply_at_start_does_not_stop_the_app(
    tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    settings = engine_settings(tmp_path, fake_agent)
    broken = ScriptedSurface(can_edit=False)
    broken.fail_always("send", SendFailed("bad request: chat not found", transient=False))
    async with running_app(settings, broken):
        await finished(broken.post(broken.message("alice", "hello")))

    restarted = ScriptedSurface(can_edit=False)
    restarted.crash(CHAT, "send", BUG)  # re-sending the cut-off reply hits a bug
    other = ConversationKey(SURFACE, "chat-2")
    async with running_app(settings, restarted):
        later = restarted.message("bob", "after", event_id="after-restart", key=other)
        await finished(restarted.post(later))
        assert shown_in(restarted, other) == "Echo: after"
    (error,) = errors_logged(caplog)
    assert leaves(error.exc_info[1] if error.exc_info else None) == [BUG]
    assert f"conversation={CHAT}" in error.getMessage()
