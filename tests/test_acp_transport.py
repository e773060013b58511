"""The JSON-RPC transport (acp/session_handle.py) against the fake agent, through acp's API: what
it skips, what it drops, the order it delivers in, what it answers, and how it fails."""

from __future__ import annotations

import json
import logging
import os
import signal
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import (
    AcpEvent,
    AcpProcessDied,
    AcpRequestTimeout,
    AcpRuntimeDead,
    EventKind,
    PendingPermission,
)
from acp.session_handle import DEFAULT_MAX_LINE_BYTES, RpcReply
from tests.acp_helpers import agent_spec as _spec
from tests.acp_helpers import collect_turn as _turn
from tests.acp_helpers import open_test_client as _client
from tests.acp_helpers import texts
from tests.conftest import FakeAgent, script

WAIT = 20  # seconds: an upper bound on every test here, never a measurement
SMALL_LIMIT = 64 * 1024


def stop_reason(events: list[AcpEvent]) -> str:
    assert events and events[-1].kind is EventKind.TERMINAL and events[-1].stats is not None
    return events[-1].stats.stop_reason


def debug_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "acp.session_handle" and r.levelno == logging.DEBUG
    ]


# ---- skipped lines ------------------------------------------------------------------------------
GARBAGE_LINES = [
    b"this is not json",
    b"\x1b[31mANSI banner\x1b[0m",
    b"123",
    b"true",
    b"null",
    b"[1,2]",
    b'{"content":"x","type":"text"}',  # kiro-cli 1.26: neither method nor id
    b'{"jsonrpc":"2.0","method":',
    bytes.fromhex("fffe41c328"),
]


@pytest.mark.anyio
async def test_non_json_scalars_arrays_and_method_less_objects_are_skipped_and_debug_logged_with_their_text(
    fake_agent: FakeAgent, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="acp.session_handle")
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            events = await _turn(session, "SCN_GARBAGE")
            assert client.runtime.alive
    assert texts(events) == ["survived"]
    assert stop_reason(events) == "end_turn"
    logged = debug_lines(caplog)
    for line in GARBAGE_LINES:
        assert any(repr(line) in message for message in logged), (line, logged)


@pytest.mark.anyio
async def test_a_frame_with_invalid_utf8_is_skipped_and_logged_and_the_turn_goes_on(
    fake_agent: FakeAgent, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="acp.session_handle")
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            update = {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "bad BYTE here"},
            }
            params = {"sessionId": session.session_id, "update": update}
            frame = json.dumps({"jsonrpc": "2.0", "method": "session/update", "params": params})
            broken = frame.encode().replace(b"BYTE", b"\xff\xc3(")
            events = await _turn(
                session, script({"raw_hex": broken.hex()}, {"chunk": "after"}, {"stop": "end_turn"})
            )
    assert texts(events) == ["after"]
    assert any("bad \\xff\\xc3( here" in message for message in debug_lines(caplog))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("size", "as_json"),
    [
        pytest.param(200_000, True, id="one-read-json"),
        pytest.param(1_500_000, True, id="many-reads-json"),
        pytest.param(1_500_000, False, id="many-reads-not-json"),
    ],
)
async def test_a_line_over_max_line_bytes_is_dropped_and_the_session_continues(
    fake_agent: FakeAgent,
    workspace: Path,
    caplog: pytest.LogCaptureFixture,
    size: int,
    as_json: bool,
) -> None:
    caplog.set_level(logging.WARNING, logger="acp.session_handle")
    spec = _spec(fake_agent, workspace, max_line_bytes=SMALL_LIMIT)
    with anyio.fail_after(WAIT):
        async with _client(spec) as client:
            session = await client.open_session()
            events = await _turn(
                session,
                script(
                    {"chunk": "before"},
                    {"big_line": size, "json": as_json},
                    {"chunk": "after"},
                    {"stop": "end_turn"},
                ),
            )
            again = await _turn(session, "still here")
            assert client.runtime.alive
    assert texts(events) == ["before", "after"]
    assert stop_reason(events) == "end_turn"
    assert texts(again) == ["Echo: ", "still here"]
    assert any("dropping a line" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_a_line_just_under_max_line_bytes_is_delivered_whole(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = _spec(fake_agent, workspace, max_line_bytes=SMALL_LIMIT)
    with anyio.fail_after(WAIT):
        async with _client(spec) as client:
            session = await client.open_session()
            events = await _turn(session, script({"big_line": SMALL_LIMIT - 100}, {"chunk": "end"}))
    big, end = texts(events)
    assert set(big) == {"x"} and len(big) > SMALL_LIMIT - 400
    assert end == "end"


def test_the_default_line_limit_is_within_the_recommended_range() -> None:
    assert 16 * 1024 * 1024 <= DEFAULT_MAX_LINE_BYTES <= 64 * 1024 * 1024


# ---- order, requests, notifications --------------------------------------------------------------
@pytest.mark.anyio
async def test_session_updates_are_handled_strictly_in_arrival_order(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    count = 400
    steps: list[dict[str, Any]] = []
    for n in range(count):
        steps.append({"chunk": f"{n} "} if n % 7 else {"thought": f"{n} "})
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            events = await _turn(session, script(*steps, {"stop": "end_turn"}))
    numbered = [e.text for e in events if e.kind in (EventKind.TEXT, EventKind.THOUGHT)]
    assert numbered == [f"{n} " for n in range(count)]


@pytest.mark.anyio
async def test_with_on_text_every_chunk_reaches_it_in_order_with_the_other_events(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    count = 400
    steps: list[dict[str, Any]] = []
    for n in range(count):
        steps.append({"chunk": f"{n} "} if n % 7 else {"thought": f"{n} "})
    seen: list[str] = []
    yielded: list[EventKind] = []

    def on_text(event: AcpEvent) -> None:
        seen.append(event.text)

    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            stream = session.prompt(script(*steps, {"stop": "end_turn"}), on_text=on_text)
            async with aclosing(stream):  # type: ignore[type-var]
                async for event in stream:
                    yielded.append(event.kind)
                    if event.kind is EventKind.THOUGHT:
                        seen.append(event.text)
    assert seen == [f"{n} " for n in range(count)]
    assert EventKind.TEXT not in yielded and yielded[-1] is EventKind.TERMINAL


@pytest.mark.anyio
async def test_what_on_text_raises_ends_that_turn_only_and_the_agent_serves_other_sessions(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    def on_text(event: AcpEvent) -> None:
        raise LookupError(f"a bug in the consumer, at {event.text!r}")

    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            first, second = await client.open_session(), await client.open_session()
            stream = first.prompt(script({"chunk": "Hello"}, {"stop": "end_turn"}), on_text=on_text)
            with pytest.raises(LookupError, match="at 'Hello'"):
                async with aclosing(stream):  # type: ignore[type-var]
                    async for _ in stream:
                        pass
            assert first.turn is None  # released: the session takes a new prompt
            answer = script({"chunk": "still"}, {"chunk": " here"}, {"stop": "end_turn"})
            assert texts(await _turn(second, answer)) == ["still", " here"]


@pytest.mark.anyio
async def test_unknown_agent_requests_are_answered_method_not_found(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    requests = [
        {"request": {"method": "_kiro/auth/getAccessToken", "params": {}}},
        # fs/*, terminal/* (tests/test_client_capabilities.py) and elicitation/create
        # (tests/test_acp_elicitation.py) are served now; these are not
        {"request": {"method": "session/ask_user", "params": {"message": "Your name?"}}},
        {"request": {"method": "terminal/attach", "params": {"terminalId": "t"}}},
        {"request": {"method": "session/request_permission", "params": [1, 2]}},
    ]
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            events = await _turn(session, script(*requests, {"chunk": "done"}))
    assert texts(events)[-1] == "done"
    answers = [
        r["frame"]
        for r in fake_agent.records()
        if r.get("dir") == "in" and "method" not in r.get("frame", {"method": None})
    ]
    assert [a["id"] for a in answers] == [0, 1, 2, 3]
    assert all(a["error"]["code"] == -32601 for a in answers), answers


@pytest.mark.anyio
async def test_notifications_without_a_session_are_ignored_without_ending_the_turn(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    status = (
        '{"jsonrpc":"2.0","method":"_auth/status_update","params":{"authStatus":{"kind":"none"}}}'
    )
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            events = await _turn(
                session,
                script(
                    {"raw": status},
                    {"notify": {"method": "_kiro.dev/commands/available", "params": {}}},
                    {"chunk": "ok"},
                ),
            )
    assert texts(events) == ["ok"]
    assert stop_reason(events) == "end_turn"


@pytest.mark.anyio
async def test_the_agent_withdrawing_a_pending_permission_with_cancel_request_is_answered_32800(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    # Two sessions: the first waits on a permission (the agent's request id 0); the second one's
    # script makes the agent send `$/cancel_request {requestId: 0}` while that is pending.
    withdraw = '{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}'
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            asking = await client.open_session()
            other = await client.open_session()
            stream = asking.prompt(script({"permission": {}}, {"stop": "end_turn"}))
            async with aclosing(stream):  # type: ignore[type-var]
                first = await stream.__anext__()
                assert first.kind is EventKind.PERMISSION and first.permission is not None
                pending = first.permission
                assert not pending.answered
                assert texts(await _turn(other, script({"raw": withdraw}, {"chunk": "sent"}))) == [
                    "sent"
                ]
                assert await pending.wait() is None
                assert pending.withdrawn
                rest = [event async for event in stream]
    assert "permission:error" in texts(rest)
    assert stop_reason(rest) == "end_turn"
    answers = [
        r["frame"]
        for r in fake_agent.records()
        if r.get("dir") == "in" and r.get("frame", {}).get("id") == 0 and "method" not in r["frame"]
    ]
    assert answers == [
        {"jsonrpc": "2.0", "id": 0, "error": {"code": -32800, "message": "Request cancelled"}}
    ]


# ---- timeouts and death -------------------------------------------------------------------------
@pytest.mark.anyio
async def test_a_request_the_agent_never_answers_raises_request_timeout_naming_the_method(
    fake_agent: FakeAgent, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="acp.session_handle")
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            pid = client.runtime.pid
            os.kill(pid, signal.SIGSTOP)  # a stopped agent reads nothing and answers nothing
            try:
                with pytest.raises(AcpRequestTimeout) as caught:
                    await client.runtime.call(
                        "session/new", {"cwd": str(workspace), "mcpServers": []}, timeout=0.5
                    )
            finally:
                os.kill(pid, signal.SIGCONT)
            assert caught.value.method == "session/new"
            assert caught.value.timeout == 0.5
            assert "session/new" in str(caught.value)
            # the late answer is dropped, and the connection still works
            session = await client.open_session()
            assert texts(await _turn(session, "after the timeout")) == [
                "Echo: ",
                "after the timeout",
            ]
    assert any("dropping reply" in message for message in debug_lines(caplog))


@pytest.mark.anyio
async def test_a_dead_agent_fails_every_pending_request_with_runtime_dead(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            runtime = client.runtime
            os.kill(runtime.pid, signal.SIGSTOP)  # nothing gets answered from here on
            replies: list[RpcReply | Exception] = []
            both = anyio.Event()

            def sink(value: RpcReply | Exception) -> None:
                replies.append(value)
                if len(replies) == 2:
                    both.set()

            params = {"cwd": str(workspace), "mcpServers": []}
            await runtime.handle.send_request("session/new", params, sink)
            await runtime.handle.send_request("session/new", params, sink)
            os.kill(runtime.pid, signal.SIGKILL)
            await both.wait()
            assert all(isinstance(r, AcpRuntimeDead) for r in replies), replies
            dead = replies[0]
            assert isinstance(dead, AcpRuntimeDead) and dead.returncode == -signal.SIGKILL
            assert not runtime.alive
            with pytest.raises(AcpRuntimeDead):
                await runtime.call("session/new", params)


@pytest.mark.anyio
async def test_an_agent_dying_before_any_output_is_an_unambiguous_process_death(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            with pytest.raises(AcpProcessDied) as caught:
                await _turn(session, "SCN_DIE_BEFORE")
    assert caught.value.ambiguous_delivery is False
    assert caught.value.transient is True
    assert caught.value.returncode == 1
    assert caught.value.partial_output == ""


@pytest.mark.anyio
async def test_an_agent_dying_after_output_is_an_ambiguous_delivery(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            with pytest.raises(AcpProcessDied) as caught:
                await _turn(session, "SCN_DIE_AFTER")
    assert caught.value.ambiguous_delivery is True
    assert caught.value.transient is False
    assert caught.value.partial_output == "about to die"


@pytest.mark.anyio
async def test_a_permission_request_withdrawn_right_after_it_was_sent_is_still_withdrawn(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    # One write holds the request and its withdrawal, so both arrive in one read.
    seen: list[PendingPermission] = []
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            request = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "session/request_permission",
                "params": {
                    "sessionId": session.session_id,
                    "toolCall": {"toolCallId": "call_1", "title": "Run echo hi", "kind": "execute"},
                    "options": [
                        {"optionId": "allow_once", "name": "Yes", "kind": "allow_once"},
                        {"optionId": "reject_once", "name": "No", "kind": "reject_once"},
                    ],
                },
            }
            withdraw = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 7}}
            both = json.dumps(request) + "\n" + json.dumps(withdraw)

            async def consume() -> None:
                stream = session.prompt(script({"raw": both}, {"hang": True}))
                async with aclosing(stream):  # type: ignore[type-var]
                    async for event in stream:
                        if event.permission is not None:
                            seen.append(event.permission)  # nobody answers it

            def answer_to_7() -> list[dict[str, Any]]:
                return [
                    r["frame"]
                    for r in fake_agent.records()
                    if r.get("dir") == "in" and r.get("frame", {}).get("id") == 7
                ]

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                with anyio.move_on_after(2):  # the withdrawal is answered at once, or never
                    while not answer_to_7():
                        await anyio.sleep(0.02)
                await session.cancel()
    assert answer_to_7() == [
        {"jsonrpc": "2.0", "id": 7, "error": {"code": -32800, "message": "Request cancelled"}}
    ]
    assert all(pending.withdrawn for pending in seen)


def test_cancelled_timers_are_swept_from_the_heap_and_live_ones_are_kept() -> None:
    """A turn's prompt-timeout timer is cancelled when the turn ends, minutes before its time:
    the heap must not hold every finished turn's timer (and the inbox its callback holds)."""
    from typing import cast

    from acp.session_handle import SessionHandle

    handle = SessionHandle(cast(Any, None), cast(Any, None))  # never served: only the timers
    far = 1e9  # never due
    live = handle.call_at(far, lambda: None)
    for index in range(1000):
        handle.cancel_timer(handle.call_at(far + index, lambda: None))
    assert len(handle._timers) < 100
    assert live in {timer_id for _, timer_id, _ in handle._timers}
    assert live not in handle._cancelled_timers
