"""The scripted agent's steps the attack suite relies on (tests/fakes/fake_agent.py): `shell`, the
agent's own shell tool, and `repeat`, driven over raw JSON lines as the other self-checks are."""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from pathlib import Path

from tests.test_fake_agent_selfcheck import agents, chunks  # noqa: F401 (a fixture)


def _pids_with(argument: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if argument.encode() in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_a_shell_step_runs_as_the_agent_s_own_child_and_reports_its_exit_and_output(
    agents,  # type: ignore[no-untyped-def]  # noqa: F811
) -> None:
    a = agents()
    sid = a.handshake()
    nonce = f"29.{secrets.randbelow(10**8):08d}"  # a background sleep only this test starts
    script = [
        {"shell": 'echo "me=$AGENT_PID parent=$AGENT_PPID"; echo oops >&2'},
        {"shell": "printf 0123456789; exit 3", "max": 4},
        {"shell": f"sleep {nonce} >/dev/null 2>&1 &"},
    ]
    try:
        resp, before = a.response(a.prompt(sid, "SCRIPT:" + json.dumps(script)))
        assert resp["result"] == {"stopReason": "end_turn"}
        # the agent's own child (its parent is us, the agent's parent), stderr kept with stdout
        assert chunks(before) == [
            f"shell:0:me={a.proc.pid} parent={os.getpid()}\noops\n",
            "shell:3:0123",  # bounded to `max` bytes
            "shell:0:",  # a child left running in the background did not hold the step
        ]
        deadline = time.monotonic() + 10  # it runs on: exec'd by its shell in a moment
        while not _pids_with(nonce):
            assert time.monotonic() < deadline, "the background child was not started"
            time.sleep(0.02)
    finally:
        for pid in _pids_with(nonce):
            os.kill(pid, signal.SIGKILL)


def test_a_cancel_kills_a_running_shell_step(agents) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    a = agents()
    sid = a.handshake()
    rid = a.prompt(sid, "SCRIPT:" + json.dumps([{"chunk": "go"}, {"shell": "exec sleep 60"}]))
    a.until(lambda f: isinstance(f, dict) and f.get("method") == "session/update")
    deadline = time.monotonic() + 10
    while not any(r.get("event") == "shell" for r in a.log()):  # the shell runs: now cancel
        assert time.monotonic() < deadline, "the shell step did not start"
        time.sleep(0.02)
    a.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    resp, before = a.response(rid)
    assert resp["result"] == {"stopReason": "cancelled"}
    assert chunks(before) == [f"shell:-{signal.SIGKILL.value}:"]


def test_a_repeat_step_tells_how_often_each_chunk_was_said_instead_of_saying_them(
    agents,  # type: ignore[no-untyped-def]  # noqa: F811
) -> None:
    a = agents()
    sid = a.handshake()
    script = [
        {"repeat": 3, "steps": [{"chunk": "a"}, {"chunk": "b"}, {"chunk": "a"}]},
        {"chunk": "after"},
    ]
    resp, before = a.response(a.prompt(sid, "SCRIPT:" + json.dumps(script)))
    assert resp["result"] == {"stopReason": "end_turn"}
    assert chunks(before) == ['repeat:{"a":6,"b":3}', "after"]
    bad = a.call(
        "session/prompt",
        {
            "sessionId": sid,
            "prompt": [{"type": "text", "text": 'SCRIPT:[{"repeat": -1, "steps": []}]'}],
        },
    )
    assert bad["error"]["code"] == -32602 and "repeat needs" in bad["error"]["data"]
