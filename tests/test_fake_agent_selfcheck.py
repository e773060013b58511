"""Self-checks for tests/fakes/fake_agent.py, driven with subprocess and raw JSON lines."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeAgent

TIMEOUT = 10.0


class Agent:
    """The fake agent as a subprocess, with stdout parsed into a queue and stderr drained."""

    def __init__(self, tmp_path: Path, *args: str, state: Path | None = None) -> None:
        self.log_path = tmp_path / "agent.log"
        self.state = state or tmp_path / "state"
        # The fake's own default dialect (generic) unless `args` name one: the last one counts.
        argv = FakeAgent(self.log_path, self.state).argv(*args, dialect="generic")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.frames: queue.Queue[Any] = queue.Queue()
        self.stderr = bytearray()
        self._next_id = 100
        self._t_out = threading.Thread(target=self._read_out, daemon=True)
        self._t_err = threading.Thread(target=self._read_err, daemon=True)
        self._t_out.start()
        self._t_err.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.frames.put(json.loads(line))
            except ValueError:
                self.frames.put(("raw", line))
        self.frames.put(("eof", b""))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        while chunk := self.proc.stderr.read(65536):
            self.stderr += chunk

    def send(self, obj: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> int:
        self._next_id += 1
        self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        return self._next_id

    def recv(self, timeout: float = TIMEOUT) -> Any:
        return self.frames.get(timeout=timeout)

    def until(self, pred: Any, timeout: float = TIMEOUT) -> tuple[Any, list[Any]]:
        """Read frames until pred(frame); return (that frame, frames before it)."""
        seen: list[Any] = []
        deadline = time.monotonic() + timeout
        while True:
            frame = self.recv(max(0.01, deadline - time.monotonic()))
            if pred(frame):
                return frame, seen
            seen.append(frame)

    def response(self, rid: int, timeout: float = TIMEOUT) -> tuple[dict[str, Any], list[Any]]:
        return self.until(
            lambda f: isinstance(f, dict) and f.get("id") == rid and "method" not in f, timeout
        )

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        return self.response(self.request(method, params))[0]

    def handshake(self, version: Any = 1) -> str:
        init = self.call("initialize", {"protocolVersion": version, "clientCapabilities": {}})
        assert "result" in init, init
        new = self.call("session/new", {"cwd": "/tmp", "mcpServers": []})
        return str(new["result"]["sessionId"])

    def prompt(self, sid: str, text: str) -> int:
        return self.request(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
        )

    def close(self) -> int:
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            rc = self.proc.wait(timeout=5)
        self._t_out.join(5)
        self._t_err.join(5)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc

    def log(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.log_path.read_text().splitlines() if x.strip()]


def chunks(frames: list[Any]) -> list[str]:
    out = []
    for f in frames:
        if isinstance(f, dict) and f.get("method") == "session/update":
            upd = f["params"]["update"]
            if upd.get("sessionUpdate") == "agent_message_chunk":
                out.append(upd["content"]["text"])
    return out


@pytest.fixture
def agents(tmp_path: Path):  # type: ignore[no-untyped-def]
    made: list[Agent] = []

    def make(*args: str, state: Path | None = None, sub: str = "a") -> Agent:
        d = tmp_path / f"{sub}{len(made)}"
        d.mkdir()
        agent = Agent(d, *args, state=state)
        made.append(agent)
        return agent

    yield make
    for a in made:
        a.close()


def test_handshake_and_echo(agents) -> None:  # type: ignore[no-untyped-def]
    a = agents("--dialect", "kiro", "--modes", "dev,review", "--config-options")
    bad = a.call("initialize", {"protocolVersion": 1})
    assert bad["error"] == {
        "code": -32602,
        "message": "Invalid params",
        "data": "unsupported protocolVersion 1",
    }
    ok = a.call("initialize", {"protocolVersion": "2025-08-22"})["result"]
    assert ok["protocolVersion"] == "2025-08-22"
    assert ok["agentCapabilities"]["loadSession"] is True
    assert ok["agentInfo"] == {"name": "fake-agent", "version": "1.0"}
    rel = a.call("session/new", {"cwd": "rel/dir", "mcpServers": []})
    assert rel["error"]["code"] == -32602 and "cwd" in rel["error"]["data"]
    no_mcp = a.call("session/new", {"cwd": "/tmp"})
    assert "mcpServers" in no_mcp["error"]["data"]
    new = a.call("session/new", {"cwd": "/tmp", "mcpServers": []})["result"]
    sid = new["sessionId"]
    assert sid.startswith("sess-") and len(sid) == 13
    assert new["modes"]["currentModeId"] == "dev"
    assert new["configOptions"][0]["category"] == "mode"
    assert a.call("session/set_mode", {"sessionId": sid, "modeId": "review"})["result"] == {}
    assert a.call("session/set_mode", {"sessionId": sid, "modeId": "nope"})["error"]["code"]
    assert a.call("whatever/else", {})["error"] == {"code": -32601, "message": "Method not found"}
    resp, before = a.response(a.prompt(sid, "hi there"))
    assert resp["result"] == {"stopReason": "end_turn"}
    assert chunks(before) == ["Echo: ", "hi there"]
    unknown = a.call("session/prompt", {"sessionId": "sess-nope", "prompt": []})
    assert unknown["error"]["code"] == -32002
    assert a.close() == 0


def test_script_steps_and_garbage(agents) -> None:  # type: ignore[no-untyped-def]
    a = agents()
    sid = a.handshake()
    script = [
        {"thought": "hmm"},
        {"chunk": "one", "messageId": "m1"},
        {"update": {"sessionUpdate": "plan", "entries": []}},
        {"notify": {"method": "_x/notice", "params": {"k": 1}}},
        {"raw": "not json"},
        {"stderr": "err line", "repeat": 3},
        {"stop": "max_tokens", "usage": None, "meta": {"m": 1}},
    ]
    resp, before = a.response(a.prompt(sid, "go SCRIPT: " + json.dumps(script)))
    assert resp["result"] == {"stopReason": "max_tokens", "usage": None, "_meta": {"m": 1}}
    kinds = [
        f["params"]["update"]["sessionUpdate"] if f.get("method") == "session/update" else f
        for f in before
        if isinstance(f, dict)
    ]
    assert kinds[:3] == ["agent_thought_chunk", "agent_message_chunk", "plan"]
    assert before[3]["params"] == {"sessionId": sid, "k": 1}
    assert before[4] == ("raw", b"not json\n")
    resp, before = a.response(a.prompt(sid, "SCN_GARBAGE"))
    assert resp["result"]["stopReason"] == "end_turn"
    assert 123 in before and [1, 2] in before and ("raw", b"\n") in before
    assert {"content": "x", "type": "text"} in before
    assert chunks(before) == ["survived"]
    resp, before = a.response(a.prompt(sid, "SCN_CODEX_SYSTEM_ERROR"))
    assert resp["result"] == {"stopReason": "end_turn", "usage": None}
    resp, _ = a.response(a.prompt(sid, "SCN_AUTH"))
    assert resp["error"] == {"code": -32000, "message": "Authentication required"}
    resp, before = a.response(a.prompt(sid, 'SCRIPT: [{"flood": 5000, "text": "y"}]'))
    assert chunks(before) == ["y"] * 5000
    assert a.close() == 0
    assert a.stderr.count(b"err line\n") == 3


def test_cancel_and_busy(agents) -> None:  # type: ignore[no-untyped-def]
    a = agents("--dialect", "claude")
    sid = a.handshake()
    rid = a.prompt(sid, "SCN_HANG")
    a.until(lambda f: chunks([f]) == ["partial answer"])
    busy = a.call("session/prompt", {"sessionId": sid, "prompt": []})
    assert busy["error"] == {"code": -32600, "message": "Prompt already in progress"}
    t0 = time.monotonic()
    a.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    resp, _ = a.response(rid)
    assert resp["result"] == {"stopReason": "cancelled"}
    assert time.monotonic() - t0 < 1.0
    # a sleep is interrupted too, and the session is free again afterwards
    rid = a.prompt(sid, 'SCRIPT: [{"sleep": 30}]')
    time.sleep(0.1)
    a.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    assert a.response(rid, timeout=2)[0]["result"] == {"stopReason": "cancelled"}
    # ignore_cancel keeps going
    rid = a.prompt(sid, 'SCRIPT: [{"ignore_cancel": true}, {"sleep": 0.3}, {"chunk": "late"}]')
    a.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    resp, before = a.response(rid)
    assert resp["result"] == {"stopReason": "end_turn"} and chunks(before) == ["late"]
    assert a.close() == 0


@pytest.mark.parametrize(
    ("dialect", "pick"), [("claude", "allow-once"), ("codex", "cancel"), ("kiro", "reject_once")]
)
def test_permission_round_trip(agents, dialect: str, pick: str) -> None:  # type: ignore[no-untyped-def]
    a = agents("--dialect", dialect)
    sid = a.handshake("2025-08-22" if dialect == "kiro" else 1)
    rid = a.prompt(sid, "please SCN_PERMISSION")
    req, _ = a.until(
        lambda f: isinstance(f, dict) and f.get("method") == "session/request_permission"
    )
    assert req["id"] == 0
    assert req["params"]["toolCall"]["toolCallId"] == "call_1"
    assert pick in [o["optionId"] for o in req["params"]["options"]]
    a.send(
        {
            "jsonrpc": "2.0",
            "id": req["id"],
            "result": {"outcome": {"outcome": "selected", "optionId": pick}},
        }
    )
    resp, before = a.response(rid)
    assert resp["result"] == {"stopReason": "end_turn"}
    assert chunks(before) == [f"permission:{pick}"]
    # second request: id 1; cancel while waiting for the answer ends the prompt promptly
    rid = a.prompt(sid, "SCN_PERMISSION")
    req, _ = a.until(
        lambda f: isinstance(f, dict) and f.get("method") == "session/request_permission"
    )
    assert req["id"] == 1
    a.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
    assert a.response(rid, timeout=2)[0]["result"] == {"stopReason": "cancelled"}
    assert a.close() == 0


def test_unknown_requests_reply_chunks(agents) -> None:  # type: ignore[no-untyped-def]
    a = agents()
    sid = a.handshake()
    rid = a.prompt(sid, "SCN_UNKNOWN_REQUEST")
    for _ in range(2):
        req, _ = a.until(lambda f: isinstance(f, dict) and "method" in f and "id" in f)
        a.send({"jsonrpc": "2.0", "id": req["id"], "error": {"code": -32601, "message": "nope"}})
    _, before = a.response(rid)
    assert chunks(before)[0] == 'reply:{"error":{"code":-32601,"message":"nope"}}'
    assert a.close() == 0


def test_load_replay_attempts_and_log(agents, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "shared-state"
    script = 'SCRIPT: [{"attempts": [[{"error": {"code": -32603, "message": "boom"}}], '
    script += '[{"chunk": "ok"}]]}]'
    a = agents(state=state)
    sid = a.handshake()
    assert a.response(a.prompt(sid, script))[0]["error"]["message"] == "boom"
    resp, before = a.response(a.prompt(sid, script))
    assert resp["result"]["stopReason"] == "end_turn" and chunks(before) == ["ok"]
    assert a.close() == 0
    log = a.log()
    assert log[0]["event"] == "start" and log[-1] == {**log[-1], "event": "exit", "code": 0}
    ins = [r["frame"] for r in log if r.get("dir") == "in"]
    outs = [r["frame"] for r in log if r.get("dir") == "out"]
    assert ins[0]["method"] == "initialize" and outs[0]["id"] == ins[0]["id"]

    b = agents(state=state)  # a respawn sharing the state dir
    b.call("initialize", {"protocolVersion": 1})
    missing = b.call(
        "session/load", {"sessionId": "sess-00000000", "cwd": "/tmp", "mcpServers": []}
    )
    assert missing["error"] == {
        "code": -32002,
        "message": "Resource not found",
        "data": {"sessionId": "sess-00000000"},
    }
    resp, before = b.response(
        b.request("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
    )
    assert resp["result"] == {}
    replay = [
        (f["params"]["update"]["sessionUpdate"], f["params"]["update"]["content"]["text"])
        for f in before
    ]
    assert replay == [
        ("user_message_chunk", script),
        ("user_message_chunk", script),
        ("agent_message_chunk", "ok"),
    ]
    resp, before = b.response(b.prompt(sid, script))  # the last attempt list repeats
    assert chunks(before) == ["ok"]
    assert b.close() == 0


def test_process_level_options(agents) -> None:  # type: ignore[no-untyped-def]
    a = agents("--exit-on-start", "3", "--stderr-on-start", "hello stderr")
    assert a.close() == 3
    assert b"hello stderr" in a.stderr
    assert a.log()[-1]["code"] == 3

    b = agents("--exit-after-init", "4")
    assert "result" in b.call("initialize", {"protocolVersion": 1})
    assert b.close() == 4

    c = agents("--stderr-flood", "300000")
    assert "result" in c.call("initialize", {"protocolVersion": 1})
    assert c.close() == 0
    assert len(c.stderr) == 300000

    d = agents("--ignore-sigterm", "--ignore-stdin-eof", "--fork-child")
    assert "result" in d.call("initialize", {"protocolVersion": 1})
    assert d.proc.stdin is not None
    d.proc.stdin.close()
    child = next(r["pid"] for r in d.log() if r.get("event") == "child")
    os.killpg(d.proc.pid, signal.SIGTERM)
    time.sleep(0.3)
    assert d.proc.poll() is None  # ignored SIGTERM, ignored EOF
    os.killpg(d.proc.pid, signal.SIGKILL)
    assert d.close() == -signal.SIGKILL
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the grandchild is in the same group
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("grandchild survived the group kill")


def test_huge_line_and_die(agents) -> None:  # type: ignore[no-untyped-def]
    a = agents()
    sid = a.handshake()
    _, before = a.response(a.prompt(sid, "SCN_HUGE"))
    big = before[0]["params"]["update"]["content"]["text"]
    assert len(big) > 12_000_000 and chunks(before)[1:] == ["after huge"]
    a.prompt(sid, "SCN_DIE_AFTER")
    _, before = a.until(lambda f: f == ("eof", b""))
    assert chunks(before) == ["about to die"]
    assert a.close() == 1
