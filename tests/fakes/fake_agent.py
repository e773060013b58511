#!/usr/bin/env python3
"""Scripted fake ACP agent: a real subprocess speaking ACP (JSON-RPC 2.0 over NDJSON) on stdio.

Stdlib only. Run as ``python tests/fakes/fake_agent.py [options]``; ``--help`` lists the options.

Architecture: the main thread reads stdin lines and dispatches them; every ``session/prompt`` runs
its script in its own daemon worker thread, so ``session/cancel`` and the client's responses to
agent->client requests are read while a prompt runs. All stdout writes go through one lock and are
flushed after every line (or block, for floods). Request ids the agent sends count up from 0.

The prompt text chooses a script:
  * ``SCRIPT:`` followed by a JSON array (parsed from after the marker to the end of the text);
  * else a marker ``SCN_<NAME>`` naming one of SCENARIOS below;
  * else the default: chunks "Echo: " and the prompt text, then ``end_turn``.

Step vocabulary (each step is a JSON object; steps run in order):
  {"chunk": text, "messageId"?}       agent_message_chunk
  {"thought": text, "messageId"?}     agent_thought_chunk
  {"update": {...}}                   session/update with this ``update`` verbatim
  {"notify": {"method", "params"?}}   any notification (sessionId filled in if params lacks it)
  {"raw": text}                       this exact line on stdout
  {"raw_hex": hex}                    these exact bytes (e.g. invalid UTF-8) plus a newline
  {"big_line": N, "json"?: bool}      one line of N bytes (json default true: a valid chunk)
  {"stderr": text, "repeat"?: N}      text lines on stderr
  {"sleep": seconds}                  interruptible by cancel
  {"permission": {"toolCall"?, "options"?}, "stop_on"?: {outcome: stopReason}}
                                      session/request_permission, wait, then chunk
                                      "permission:<optionId>" / "permission:cancelled" /
                                      "permission:error" / "permission:invalid"
  {"request": {"method", "params"?}, "save"?: NAME}
                                      any agent->client request; chunk "reply:<compact JSON>";
                                      with save, later params may say "$NAME.FIELD" for a field
                                      of its result (e.g. "$t1.terminalId")
  {"stop": reason, "usage"?, "meta"?} answer the prompt {stopReason, usage?, _meta?}
  {"error": {code, message, data?}}   answer the prompt with this error
  {"exit": N}                         flush and os._exit(N)
  {"hang": true}                      never answer (until cancelled)
  {"abandon": true, "then_chunk"?: t}  never answer, but free the session for the next prompt
                                      (then, the session free, chunk t)
  {"ignore_cancel": true}             from here on, cancel does not end the prompt
  {"attempts": [[...], [...]], "key"?} pick a list by a persisted per-prompt-text counter
  {"flood": N, "text"?: "x"}          N agent_message_chunk notifications, written in big blocks
  {"shell": cmd, "save"?: NAME, "max"?: N, "timeout"?: s}
                                      run `/bin/sh -c cmd` as the agent itself (a real agent's own
                                      shell tool: a child of this process, not terminal/*), in the
                                      session's cwd, with $AGENT_PID and $AGENT_PPID (this process
                                      and its parent) added to its environment; output (stdout and
                                      stderr) goes to a file, so a child left running in the
                                      background holds nothing open; chunk
                                      "shell:<exit code>:<the first `max` (default 4000) bytes>";
                                      killed after `timeout` (default 60) s or on cancel (code -9:
                                      a cancel then ends the turn as cancelled);
                                      with save, "$NAME.exitCode" / "$NAME.output" as for requests
  {"repeat": N, "steps": [...]}       run the steps N times (at most 100000) without showing their
                                      chunks, then chunk "repeat:<JSON {chunk: count}>": how often
                                      each distinct chunk (its first 300 characters) would have
                                      been said
  {"await_steer": seconds}            with --steering: wait for a `_session/steering` injection, then
                                      chunk "steered:<text>" ("steered:none" if none came)
Steps after the prompt was answered (stop/error) still run: they produce late frames.
A script that ends without answering answers ``end_turn``.

Log (``--log FILE`` or $FAKE_AGENT_LOG; JSON lines, appended with one write each, every record also
carries "pid" and "t" (epoch seconds)): {"event":"start","argv"}, {"event":"child","pid"},
{"dir":"in","frame"} (or "raw" for an unparsable line), {"dir":"out","frame"}, {"dir":"out","raw"|
"raw_hex"|"big_line"} for raw/big steps, one {"dir":"out","flood":N,"frame":<sample>} per flood,
{"event":"stdin_eof"}, {"event":"signal_ignored"}, {"event":"script_error"|"worker_crash"|
"handler_crash","error"}, {"event":"exit","code","reason"} (code -15 when killed by SIGTERM).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

PROTOCOL_KIRO = "2025-08-22"
PROTOCOL_INT = 1

PERMISSION_TOOL_CALL = {
    "toolCallId": "call_1",
    "title": "Run echo hi",
    "kind": "execute",
    "rawInput": {"command": "echo hi"},
}

PERMISSION_OPTIONS: dict[str, list[dict[str, str]]] = {
    "kiro": [
        {"optionId": "allow_once", "name": "Yes", "kind": "allow_once"},
        {"optionId": "allow_always", "name": "Always", "kind": "allow_always"},
        {"optionId": "reject_once", "name": "No", "kind": "reject_once"},
    ],
    "claude": [
        {"optionId": "allow-once", "name": "Allow", "kind": "allow_once"},
        {"optionId": "allow-with-updates", "name": "Always Allow", "kind": "allow_always"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    ],
    "codex": [
        {"optionId": "allow_once", "name": "Yes, proceed", "kind": "allow_once"},
        {
            "optionId": "accept_execpolicy_amendment",
            "name": "Yes, and don't ask again for commands that start with `echo hi`",
            "kind": "allow_always",
        },
        {
            "optionId": "cancel",
            "name": "No, and tell Codex what to do differently",
            "kind": "reject_once",
        },
    ],
}
PERMISSION_OPTIONS["generic"] = PERMISSION_OPTIONS["kiro"]

KIRO_REFUSAL_EXPLANATION = (
    "I can't help with this request because it could be used to compromise systems "
    "without authorization. If you are working on an authorized security assessment, "
    "please describe the defensive goal and I can help with detection or hardening instead."
)

KIRO_INTERRUPT_TEXT = "Tool uses were interrupted, waiting for the next user prompt"
CODEX_DISCONNECT_TEXT = "stream disconnected before completion: error sending request\n\n"

ERR_METHOD_NOT_FOUND = {"code": -32601, "message": "Method not found"}


def _scenarios(dialect: str) -> dict[str, list[dict[str, Any]]]:
    return {
        "STREAM": [
            {"chunk": "Hello"},
            {"chunk": ", "},
            {"chunk": "world"},
            {
                "stop": "end_turn",
                "usage": {"inputTokens": 10, "outputTokens": 3, "totalTokens": 13},
            },
        ],
        "THOUGHT": [
            {"thought": "Let me think about this."},
            {"chunk": "Here is the answer."},
        ],
        "TOOL": [
            {
                "update": {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "call_1",
                    "title": "Read README.md",
                    "kind": "read",
                    "status": "pending",
                    "rawInput": {"path": "README.md"},
                }
            },
            {
                "update": {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": "call_1",
                    "status": "completed",
                    "content": [
                        {"type": "content", "content": {"type": "text", "text": "# README"}}
                    ],
                }
            },
            {"chunk": "I read the file."},
        ],
        "PERMISSION": [
            {
                "permission": {
                    "toolCall": dict(PERMISSION_TOOL_CALL),
                    "options": [dict(o) for o in PERMISSION_OPTIONS[dialect]],
                }
            },
            {"stop": "end_turn"},
        ],
        "HANG": [{"chunk": "partial answer"}, {"hang": True}],
        "HANG_SILENT": [{"hang": True}],
        "DIE_BEFORE": [{"exit": 1}],
        "DIE_AFTER": [{"chunk": "about to die"}, {"exit": 1}],
        "GARBAGE": [
            {"raw": "this is not json"},
            {"raw": "\x1b[31mANSI banner\x1b[0m"},
            {"raw": ""},
            {"raw": "123"},
            {"raw": "true"},
            {"raw": "null"},
            {"raw": "[1,2]"},
            {"raw": '{"content":"x","type":"text"}'},
            {"raw": '{"jsonrpc":"2.0","method":'},
            {"raw_hex": "ff fe 41 c3 28"},
            {"chunk": "survived"},
            {"stop": "end_turn"},
        ],
        "HUGE": [
            {"big_line": 12 * 1024 * 1024, "json": True},
            {"chunk": "after huge"},
            {"stop": "end_turn"},
        ],
        "UNKNOWN_REQUEST": [
            {"request": {"method": "_vendor/whatever", "params": {"x": 1}}},
            # named like an ACP method, but none (fs/*, terminal/*, elicitation/* we serve)
            {"request": {"method": "session/ask_user", "params": {"message": "Your name?"}}},
            {"chunk": "done with requests"},
        ],
        "BUSY": [
            {
                "error": {
                    "code": -32603,
                    "message": "Internal error",
                    "data": "prompt already in progress",
                }
            }
        ],
        "REFUSAL_KIRO": [
            {
                "notify": {
                    "method": "_kiro.dev/metadata",
                    "params": {
                        "contextUsagePercentage": 41.2,
                        "meteringUsage": [
                            {"unit": "credit", "unitPlural": "credits", "value": 0.37}
                        ],
                        "stopReason": "CONTENT_FILTERED",
                        "refusal": {
                            "category": "CYBER",
                            "explanation": KIRO_REFUSAL_EXPLANATION,
                            "recommendedModel": "claude-sonnet-4",
                        },
                    },
                }
            },
            {"chunk": KIRO_REFUSAL_EXPLANATION},
            {"error": {"code": -32603, "message": "Internal error"}},
        ],
        "REFUSAL_BARE": [{"chunk": "I can't help with that."}, {"stop": "refusal"}],
        "MAX_TOKENS": [{"chunk": "This answer was cut"}, {"stop": "max_tokens"}],
        "KIRO_INTERRUPT": [{"chunk": KIRO_INTERRUPT_TEXT}, {"abandon": True}],
        "CODEX_SYSTEM_ERROR": [
            {
                "update": {
                    "sessionUpdate": "session_info_update",
                    "_meta": {"codex": {"threadStatus": {"type": "systemError"}}},
                }
            },
            {"chunk": CODEX_DISCONNECT_TEXT},
            {"stop": "end_turn", "usage": None},
        ],
        "AUTH": [{"error": {"code": -32000, "message": "Authentication required"}}],
        # A reply that is visibly under way and then takes a minute: time to kill the client.
        "SLOW_STREAM": [
            {"chunk": "Working on it: "},
            {"sleep": 0.3},
            {"chunk": "first part, "},
            {"sleep": 60},
            {"chunk": "and the rest."},
        ],
    }


SCENARIO_NAMES = sorted(_scenarios("generic"))


class ScriptError(Exception):
    """A script or step is malformed: the prompt is answered -32602 with this text."""


# ----------------------------------------------------------------------------- globals

ARGS: argparse.Namespace
LOG_PATH: str | None = None
STATE_DIR = ""
TEMP_STATE = False

OUT_LOCK = threading.RLock()
ERR_LOCK = threading.Lock()
LOG_LOCK = threading.RLock()
STATE_LOCK = threading.RLock()  # sessions, pending requests, request ids

_STDOUT = sys.stdout.buffer
_STDERR = sys.stderr.buffer
_next_request_id = 0
PENDING: dict[int, Slot] = {}
SESSIONS: dict[str, Session] = {}


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _line(obj: Any) -> bytes:
    """One NDJSON line. surrogateescape writes raw bytes from argv back as they came; a lone
    surrogate from a script ("\\ud800") goes out as a JSON escape, as JSON.stringify writes it."""
    try:
        return (_dumps(obj) + "\n").encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def log(record: dict[str, Any]) -> None:
    if not LOG_PATH:
        return
    rec = {"pid": os.getpid(), "t": round(time.time(), 6), **record}
    try:
        line = _line(rec)
    except (TypeError, ValueError):
        line = (_dumps({"pid": os.getpid(), "unloggable": repr(record)[:2000]}) + "\n").encode()
    with LOG_LOCK:
        try:
            fd = os.open(LOG_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError:
            pass


def exit_now(code: int, reason: str) -> None:
    """Log, drain our output buffers and leave immediately (no thread joins)."""
    OUT_LOCK.acquire(timeout=2.0)  # never cut a line in half; never released: we exit
    with contextlib.suppress(Exception):
        _STDOUT.flush()
    with contextlib.suppress(Exception):
        _STDERR.flush()
    log({"event": "exit", "code": code, "reason": reason})
    if TEMP_STATE:
        shutil.rmtree(STATE_DIR, ignore_errors=True)
    os._exit(code)


def write_line(data: bytes, logrec: dict[str, Any]) -> None:
    with OUT_LOCK:
        log(logrec)
        try:
            _STDOUT.write(data)
            _STDOUT.flush()
        except (OSError, ValueError):
            exit_now(0, "stdout closed")


def send(frame: dict[str, Any]) -> None:
    write_line(_line(frame), {"dir": "out", "frame": frame})


def reply(req_id: Any, result: Any) -> None:
    send({"jsonrpc": "2.0", "id": req_id, "result": result})


def reply_error(req_id: Any, error: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": req_id, "error": error})


def invalid_params(data: Any) -> dict[str, Any]:
    return {"code": -32602, "message": "Invalid params", "data": data}


def write_stderr(text: str) -> None:
    with ERR_LOCK:
        try:
            _STDERR.write(text.encode("utf-8", "surrogateescape"))
            _STDERR.flush()
        except (OSError, ValueError):
            pass


def next_request_id() -> int:
    global _next_request_id
    with STATE_LOCK:
        rid = _next_request_id
        _next_request_id += 1
        return rid


# ----------------------------------------------------------------------------- state


def _parse_list(spec: str | None) -> list[tuple[str, str]]:
    """'a,b=Name B' -> [('a','a'), ('b','Name B')]."""
    if not spec:
        return []
    out = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        ident, _, name = item.partition("=")
        out.append((ident.strip(), name.strip() or ident.strip()))
    return out


def _atomic_write_json(path: str, obj: Any) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)  # escaped: a transcript may hold a lone surrogate a script sent
    os.replace(tmp, path)


def _session_path(session_id: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", session_id)[:200] or "_"
    return os.path.join(STATE_DIR, "sessions", safe + ".json")


class Session:
    def __init__(self, data: dict[str, Any]) -> None:
        self.id: str = data["sessionId"]
        self.cwd: str = data.get("cwd", "")
        self.mode: str | None = data.get("mode")
        self.model: str | None = data.get("model")
        self.transcript: list[dict[str, str]] = list(data.get("transcript", []))
        self.running: Prompt | None = None
        self.lock = threading.Lock()

    def to_json(self) -> dict[str, Any]:
        return {
            "sessionId": self.id,
            "cwd": self.cwd,
            "mode": self.mode,
            "model": self.model,
            "transcript": self.transcript,
        }

    def save(self) -> None:
        with self.lock:
            data = self.to_json()
        _atomic_write_json(_session_path(self.id), data)

    def add_turn(self, user: str, agent: str) -> None:
        with self.lock:
            self.transcript.append({"role": "user", "text": user})
            if agent:
                self.transcript.append({"role": "agent", "text": agent})
        self.save()

    # -- modes / models / config options
    def modes_obj(self) -> dict[str, Any] | None:
        modes = _parse_list(ARGS.modes)
        if not modes:
            return None
        return {
            "currentModeId": self.mode,
            "availableModes": [{"id": i, "name": n} for i, n in modes],
        }

    def models_obj(self) -> dict[str, Any] | None:
        models = _parse_list(ARGS.models)
        if not models:
            return None
        return {
            "currentModelId": self.model,
            "availableModels": [{"modelId": i, "name": n} for i, n in models],
        }

    def config_options(self) -> list[dict[str, Any]]:
        opts = []
        modes = _parse_list(ARGS.modes)
        if modes:
            opts.append(
                {
                    "id": "mode",
                    "name": "Mode",
                    "category": "mode",
                    "type": "select",
                    "currentValue": self.mode,
                    "options": [{"value": i, "name": n} for i, n in modes],
                }
            )
        models = _parse_list(ARGS.models)
        if models:
            opts.append(
                {
                    "id": "model",
                    "name": "Model",
                    "category": "model",
                    "type": "select",
                    "currentValue": self.model,
                    "options": [{"value": i, "name": n} for i, n in models],
                }
            )
        return opts

    def decorate(self, result: dict[str, Any]) -> dict[str, Any]:
        modes = self.modes_obj()
        if modes is not None:
            result["modes"] = modes
        models = self.models_obj()
        if models is not None:
            result["models"] = models
        if ARGS.config_options:
            opts = self.config_options()
            if opts:
                result["configOptions"] = opts
        return _decorate_extras(self, result)


def load_session_file(session_id: str) -> dict[str, Any] | None:
    try:
        with open(_session_path(session_id), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("sessionId") != session_id:
        return None
    return data


def bump_attempt(key: str) -> int:
    """Return how many times `key` was attempted before (0 on the first run), persisted."""
    digest = hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:40]
    adir = os.path.join(STATE_DIR, "attempts")
    os.makedirs(adir, exist_ok=True)
    path = os.path.join(adir, digest + ".count")
    with open(os.path.join(STATE_DIR, "attempts.lock"), "a+") as lockf:
        fcntl.flock(lockf.fileno(), fcntl.LOCK_EX)
        try:
            try:
                with open(path, encoding="utf-8") as f:
                    count = int(f.read().strip() or "0")
            except (OSError, ValueError):
                count = 0
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write(str(count + 1))
            os.replace(path + ".tmp", path)
        finally:
            fcntl.flock(lockf.fileno(), fcntl.LOCK_UN)
    return count


# ----------------------------------------------------------------------------- prompts


class Slot:
    """An agent->client request waiting for its response."""

    def __init__(self, prompt: Prompt) -> None:
        self.prompt = prompt
        self.frame: dict[str, Any] | None = None


class Cancelled(Exception):
    pass


class Prompt:
    def __init__(self, req_id: Any, session: Session, text: str) -> None:
        self.req_id = req_id
        self.session = session
        self.text = text
        self.wake = threading.Event()
        self.lock = threading.Lock()
        self.cancel_requested = False
        self.ignore_cancel = False
        self.answered = False
        self.agent_text: list[str] = []
        self.tally: dict[str, int] | None = None  # a repeat step counts its chunks here
        self.steered: list[str] = []  # texts injected by `_session/steering` (--steering)

    # -- cancel / waiting
    def cancel(self) -> None:
        self.cancel_requested = True
        self.wake.set()

    def cancelled(self) -> bool:
        return self.cancel_requested and not self.ignore_cancel and not self.answered

    def check_cancel(self) -> None:
        if self.cancelled():
            raise Cancelled

    def wait(self, done: Any = None, timeout: float | None = None) -> None:
        """Wait until done() is true or timeout passes; raise Cancelled on an effective cancel."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.wake.clear()
            self.check_cancel()
            if done is not None and done():
                return
            if deadline is None:
                remaining = 1.0
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
            self.wake.wait(min(remaining, 1.0))

    # -- answering
    def _release(self) -> bool:
        with self.lock:
            if self.answered:
                return False
            self.answered = True
        with STATE_LOCK:
            if self.session.running is self:
                self.session.running = None
        return True

    def save_transcript(self) -> None:
        with contextlib.suppress(OSError):
            self.session.add_turn(self.text, "".join(self.agent_text))

    def answer(self, result: dict[str, Any]) -> None:
        if self._release():
            self.save_transcript()
            reply(self.req_id, result)

    def answer_error(self, error: dict[str, Any]) -> None:
        if self._release():
            self.save_transcript()
            reply_error(self.req_id, error)

    def abandon(self) -> None:
        if self._release():
            self.save_transcript()

    # -- emitting
    def update(self, update: dict[str, Any]) -> None:
        send(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {"sessionId": self.session.id, "update": update},
            }
        )

    def chunk(self, text: str, kind: str = "agent_message_chunk", message_id: Any = None) -> None:
        if self.tally is not None and kind == "agent_message_chunk":
            self.tally[text[:300]] = self.tally.get(text[:300], 0) + 1
            return
        upd: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        if message_id is not None:
            upd["messageId"] = message_id
        if kind == "agent_message_chunk":
            self.agent_text.append(text)
        self.update(upd)

    def request(self, method: str, params: Any) -> dict[str, Any]:
        rid = next_request_id()
        slot = Slot(self)
        with STATE_LOCK:
            PENDING[rid] = slot
        try:
            send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            self.wait(lambda: slot.frame is not None)
        finally:
            with STATE_LOCK:
                PENDING.pop(rid, None)
        assert slot.frame is not None
        return slot.frame


def _with_session(params: Any, session_id: str) -> Any:
    if params is None:
        return {"sessionId": session_id}
    if isinstance(params, dict) and "sessionId" not in params:
        return {"sessionId": session_id, **params}
    return params


# ---- saved request results (client capabilities: fs/*, terminal/*) --------------------------
# A request step with "save": NAME keeps its result; a later request's params may then use the
# string "$NAME.FIELD" (e.g. "$t1.terminalId"), replaced by that field of the saved result.
SAVED_RESULTS: dict[str, Any] = {}
_SAVED_REF = re.compile(r"^\$([A-Za-z0-9_]+)\.([A-Za-z0-9_]+)$")


def _save_result(step: dict[str, Any], frame: dict[str, Any]) -> None:
    name = step.get("save")
    if isinstance(name, str):
        SAVED_RESULTS[name] = frame.get("result")


def _substitute_saved(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _substitute_saved(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute_saved(v) for v in value]
    if isinstance(value, str):
        m = _SAVED_REF.match(value)
        saved = SAVED_RESULTS.get(m.group(1)) if m else None
        if m and isinstance(saved, dict) and m.group(2) in saved:
            return saved[m.group(2)]
    return value


def choose_script(text: str) -> list[Any]:
    idx = text.find("SCRIPT:")
    if idx >= 0:
        body = text[idx + len("SCRIPT:") :].strip()
        try:
            script = json.loads(body)
        except ValueError as exc:
            raise ScriptError(f"bad SCRIPT JSON: {exc}") from None
        if not isinstance(script, list):
            raise ScriptError("SCRIPT must be a JSON array")
        return script
    m = re.search(r"SCN_([A-Z0-9_]+)", text)
    if m:
        name = m.group(1)
        scenarios = _scenarios(ARGS.dialect)
        if name not in scenarios:
            raise ScriptError(f"unknown scenario SCN_{name}; known: {', '.join(SCENARIO_NAMES)}")
        return scenarios[name]
    return [{"chunk": "Echo: "}, {"chunk": text}, {"stop": "end_turn"}]


def _permission_outcome(frame: dict[str, Any]) -> str:
    if "error" in frame:
        return "error"
    result = frame.get("result")
    outcome = result.get("outcome") if isinstance(result, dict) else None
    if isinstance(outcome, dict):
        if outcome.get("outcome") == "selected" and isinstance(outcome.get("optionId"), str):
            return outcome["optionId"]
        if outcome.get("outcome") == "cancelled":
            return "cancelled"
    return "invalid"


def run_steps(p: Prompt, steps: list[Any]) -> bool:
    """Run steps; return False when the worker must stop (hang/abandon)."""
    sid = p.session.id
    for step in steps:
        if not p.answered:
            p.check_cancel()
        if not isinstance(step, dict):
            raise ScriptError(f"step is not an object: {_dumps(step)}")
        if "chunk" in step:
            p.chunk(str(step["chunk"]), "agent_message_chunk", step.get("messageId"))
        elif "thought" in step:
            p.chunk(str(step["thought"]), "agent_thought_chunk", step.get("messageId"))
        elif "update" in step:
            p.update(step["update"])
        elif "notify" in step:
            n = step["notify"]
            if not isinstance(n, dict) or not isinstance(n.get("method"), str):
                raise ScriptError("notify needs {method, params?}")
            send(
                {
                    "jsonrpc": "2.0",
                    "method": n["method"],
                    "params": _with_session(n.get("params"), sid),
                }
            )
        elif "raw" in step:
            text = str(step["raw"])
            write_line(
                (text + "\n").encode("utf-8", "surrogateescape"), {"dir": "out", "raw": text}
            )
        elif "raw_hex" in step:
            data = bytes.fromhex(str(step["raw_hex"]))
            write_line(data + b"\n", {"dir": "out", "raw_hex": data.hex()})
        elif "big_line" in step:
            emit_big_line(p, int(step["big_line"]), bool(step.get("json", True)))
        elif "stderr" in step:
            text = str(step["stderr"])
            if not text.endswith("\n"):
                text += "\n"
            write_stderr(text * int(step.get("repeat", 1)))
        elif "sleep" in step:
            p.wait(None, float(step["sleep"]))
        elif "permission" in step:
            perm = step["permission"] if isinstance(step["permission"], dict) else {}
            params = {
                "sessionId": sid,
                "toolCall": perm.get("toolCall", dict(PERMISSION_TOOL_CALL)),
                "options": perm.get("options", PERMISSION_OPTIONS[ARGS.dialect]),
            }
            outcome = _permission_outcome(p.request("session/request_permission", params))
            p.chunk(f"permission:{outcome}")
            stop_on = step.get("stop_on")
            if isinstance(stop_on, dict) and outcome in stop_on and not p.answered:
                p.answer({"stopReason": stop_on[outcome]})
        elif "request" in step:
            r = step["request"]
            if not isinstance(r, dict) or not isinstance(r.get("method"), str):
                raise ScriptError("request needs {method, params?}")
            params = _substitute_saved(r.get("params"))
            frame = p.request(r["method"], _with_session(params, sid))
            _save_result(step, frame)
            rest = {k: v for k, v in frame.items() if k not in ("jsonrpc", "id")}
            p.chunk("reply:" + json.dumps(rest, separators=(",", ":"), sort_keys=True))
        elif "stop" in step:
            result: dict[str, Any] = {"stopReason": step["stop"]}
            if "usage" in step:
                result["usage"] = step["usage"]
            if "meta" in step:
                result["_meta"] = step["meta"]
            p.answer(result)
        elif "error" in step:
            err = step["error"]
            if not isinstance(err, dict):
                raise ScriptError("error needs an object {code, message, data?}")
            p.answer_error(err)
        elif "exit" in step:
            if not p.answered:
                p.save_transcript()
            exit_now(int(step["exit"]), "script exit step")
        elif "hang" in step:
            if p.answered:
                return False
            p.wait(None, None)  # returns only by raising Cancelled
        elif "abandon" in step:
            p.abandon()
            if isinstance(step.get("then_chunk"), str):  # said once the session is free
                p.chunk(step["then_chunk"], "agent_message_chunk", None)
            return False
        elif "ignore_cancel" in step:
            p.ignore_cancel = bool(step["ignore_cancel"])
        elif "attempts" in step:
            lists = step["attempts"]
            if (
                not isinstance(lists, list)
                or not lists
                or not all(isinstance(x, list) for x in lists)
            ):
                raise ScriptError("attempts needs a non-empty list of step lists")
            n = bump_attempt(str(step.get("key", p.text)))
            if not run_steps(p, lists[min(n, len(lists) - 1)]):
                return False
        elif "flood" in step:
            emit_flood(p, int(step["flood"]), str(step.get("text", "x")))
        elif "shell" in step:
            run_shell(p, step)
        elif "repeat" in step:
            if not run_repeat(p, step):
                return False
        else:
            raise ScriptError(f"unknown step: {_dumps(step)}")
    return True


def run_shell(p: Prompt, step: dict[str, Any]) -> None:
    """The agent's own shell tool: what any real agent can run without asking the client."""
    command = step["shell"]
    if not isinstance(command, str):
        raise ScriptError("shell needs a command string")
    limit = int(step.get("max", 4000))
    env = {**os.environ, "AGENT_PID": str(os.getpid()), "AGENT_PPID": str(os.getppid())}
    cwd = p.session.cwd if os.path.isdir(p.session.cwd) else None
    deadline = time.monotonic() + float(step.get("timeout", 60))
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
        )
        log({"event": "shell", "pid": proc.pid, "command": command[:2000]})
        while proc.poll() is None:
            if p.cancelled() or time.monotonic() > deadline:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.05)
        out.seek(0)
        output = out.read(limit).decode("utf-8", "replace")
    code = proc.returncode
    if isinstance(step.get("save"), str):
        SAVED_RESULTS[step["save"]] = {"exitCode": code, "output": output}
    p.chunk(f"shell:{code}:{output}")
    if not p.answered:
        p.check_cancel()  # a shell ended by a cancel ends the turn as cancelled


def run_repeat(p: Prompt, step: dict[str, Any]) -> bool:
    count = step["repeat"]
    steps = step.get("steps")
    if type(count) is not int or not 0 <= count <= 100000 or not isinstance(steps, list):
        raise ScriptError("repeat needs a count (0..100000) and a list of steps")
    outer, p.tally = p.tally, {}
    try:
        for _ in range(count):
            if not run_steps(p, steps):
                return False
        tally = p.tally
    finally:
        p.tally = outer
    p.chunk("repeat:" + json.dumps(tally, separators=(",", ":"), sort_keys=True))
    return True


def emit_big_line(p: Prompt, size: int, as_json: bool) -> None:
    if not as_json:
        filler = b"#" * max(size, 1)
        write_line(filler + b"\n", {"dir": "out", "big_line": size, "json": False})
        return
    base = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": p.session.id,
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": ""},
            },
        },
    }
    base_len = len(_dumps(base).encode())
    base["params"]["update"]["content"]["text"] = "x" * max(size - base_len, 0)
    data = _dumps(base).encode() + b"\n"
    write_line(data, {"dir": "out", "big_line": size, "json": True})


def emit_flood(p: Prompt, count: int, text: str) -> None:
    frame = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": p.session.id,
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text},
            },
        },
    }
    line = (_dumps(frame) + "\n").encode("utf-8", "surrogateescape")
    per_block = max(1, (1 << 20) // len(line))
    block = line * per_block
    log({"dir": "out", "flood": count, "frame": frame})
    left = count
    while left > 0:
        if not p.answered:
            p.check_cancel()
        n = min(left, per_block)
        data = block if n == per_block else line * n
        with OUT_LOCK:
            try:
                _STDOUT.write(data)
                _STDOUT.flush()
            except (OSError, ValueError):
                exit_now(0, "stdout closed")
        left -= n


def prompt_worker(p: Prompt) -> None:
    try:
        script = choose_script(p.text)
        if run_steps(p, script):
            p.answer({"stopReason": "end_turn"})
    except Cancelled:
        p.answer({"stopReason": "cancelled"})
    except ScriptError as exc:
        log({"event": "script_error", "error": str(exc)})
        p.answer_error(invalid_params(f"fake-agent script error: {exc}"))
    except Exception as exc:
        log({"event": "worker_crash", "error": traceback.format_exc()})
        p.answer_error(
            {"code": -32603, "message": "Internal error", "data": f"fake-agent: {exc!r}"}
        )


# ----------------------------------------------------------------------------- handlers


def _check_cwd_mcp(params: dict[str, Any]) -> str | None:
    cwd = params.get("cwd")
    if not isinstance(cwd, str) or not cwd or not os.path.isabs(cwd):
        return "cwd must be an absolute, non-empty path"
    if not isinstance(params.get("mcpServers"), list):
        return "mcpServers must be a list"
    return None


def _get_session(params: dict[str, Any]) -> Session | None:
    sid = params.get("sessionId")
    with STATE_LOCK:
        return SESSIONS.get(sid) if isinstance(sid, str) else None


def _session_not_found(params: dict[str, Any]) -> dict[str, Any]:
    sid = params.get("sessionId")
    return {"code": -32002, "message": f"Session {sid} not found", "data": {"sessionId": sid}}


def h_initialize(rid: Any, params: dict[str, Any]) -> None:
    if ARGS.init_hang:
        return  # an agent stuck at start: it never answers initialize
    if ARGS.init_wait_file and not os.path.exists(ARGS.init_wait_file):
        _pool_answer_initialize_later(rid, params)
        return
    if ARGS.init_error is not None:
        reply_error(rid, ARGS.init_error)
        return
    version = params.get("protocolVersion")
    if ARGS.dialect == "kiro":
        ok = isinstance(version, str) and version == PROTOCOL_KIRO
    else:
        ok = type(version) is int and version == PROTOCOL_INT
    if not ok:
        reply_error(rid, invalid_params(f"unsupported protocolVersion {_dumps(version)}"))
        return
    reply(
        rid,
        {
            "protocolVersion": version,
            "agentCapabilities": {
                "loadSession": not ARGS.no_load,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
            },
            "authMethods": [],
            "agentInfo": {"name": "fake-agent", "version": "1.0"},
            # --init-result: fields that replace these, e.g. another protocolVersion or a null agentInfo
            **(ARGS.init_result or {}),
        },
    )
    if ARGS.exit_after_init is not None:
        exit_now(ARGS.exit_after_init, "--exit-after-init")


def _initial_choice(items: str | None, current: str | None) -> str | None:
    parsed = _parse_list(items)
    if not parsed:
        return None
    return current if current else parsed[0][0]


def h_session_new(rid: Any, params: dict[str, Any]) -> None:
    if ARGS.new_error is not None:
        reply_error(rid, ARGS.new_error)
        return
    bad = _check_cwd_mcp(params)
    if bad:
        reply_error(rid, invalid_params(bad))
        return
    sid = "sess-" + os.urandom(4).hex()
    sess = Session(
        {
            "sessionId": sid,
            "cwd": params["cwd"],
            "mode": _initial_choice(ARGS.modes, ARGS.current_mode),
            "model": _initial_choice(ARGS.models, ARGS.current_model),
        }
    )
    sess.save()
    with STATE_LOCK:
        SESSIONS[sid] = sess
    reply(rid, sess.decorate({"sessionId": sid}))


def h_session_load(rid: Any, params: dict[str, Any]) -> None:
    if ARGS.no_load:  # not advertised: behave like an agent without the method
        reply_error(rid, dict(ERR_METHOD_NOT_FOUND))
        return
    if ARGS.load_error is not None:
        reply_error(rid, ARGS.load_error)
        return
    bad = _check_cwd_mcp(params)
    if bad:
        reply_error(rid, invalid_params(bad))
        return
    sid = params.get("sessionId")
    data = load_session_file(sid) if isinstance(sid, str) else None
    if data is None:
        reply_error(
            rid, {"code": -32002, "message": "Resource not found", "data": {"sessionId": sid}}
        )
        return
    with STATE_LOCK:
        sess = SESSIONS.get(sid)
        if sess is None or sess.running is None:
            sess = Session(data)
            SESSIONS[sid] = sess
    sess.cwd = params["cwd"]
    for entry in list(sess.transcript):
        kind = "user_message_chunk" if entry.get("role") == "user" else "agent_message_chunk"
        send(
            {
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": {
                    "sessionId": sid,
                    "update": {
                        "sessionUpdate": kind,
                        "content": {"type": "text", "text": entry.get("text", "")},
                    },
                },
            }
        )
    reply(rid, sess.decorate({}))


def _known(spec: str | None, value: Any) -> bool:
    return isinstance(value, str) and value in {i for i, _ in _parse_list(spec)}


def _unknown_mode_error(mode: Any) -> dict[str, Any]:
    if ARGS.dialect == "kiro":
        return {"code": -32603, "message": "Internal error", "data": f"Mode '{mode}' not found"}
    return invalid_params(f"unknown modeId {_dumps(mode)}")


def h_set_mode(rid: Any, params: dict[str, Any]) -> None:
    sess = _get_session(params)
    if sess is None:
        reply_error(rid, _session_not_found(params))
        return
    mode = params.get("modeId")
    if not _known(ARGS.modes, mode):
        reply_error(rid, _unknown_mode_error(mode))
        return
    sess.mode = mode
    sess.save()
    reply(rid, {})


def h_set_model(rid: Any, params: dict[str, Any]) -> None:
    sess = _get_session(params)
    if sess is None:
        reply_error(rid, _session_not_found(params))
        return
    model = params.get("modelId")
    if not _known(ARGS.models, model):
        reply_error(rid, invalid_params(f"unknown modelId {_dumps(model)}"))
        return
    sess.model = model
    sess.save()
    reply(rid, {})


def h_set_config_option(rid: Any, params: dict[str, Any]) -> None:
    sess = _get_session(params)
    if sess is None:
        reply_error(rid, _session_not_found(params))
        return
    config_id = params.get("configId")
    value = params.get("value")
    if config_id == "mode" and _parse_list(ARGS.modes):
        if not _known(ARGS.modes, value):
            reply_error(rid, invalid_params(f"unknown value {_dumps(value)} for mode"))
            return
        sess.mode = value
    elif config_id == "model" and _parse_list(ARGS.models):
        if not _known(ARGS.models, value):
            reply_error(rid, invalid_params(f"unknown value {_dumps(value)} for model"))
            return
        sess.model = value
    else:
        reply_error(rid, invalid_params(f"unknown configId {_dumps(config_id)}"))
        return
    sess.save()
    reply(rid, {"configOptions": sess.config_options()})


def h_prompt(rid: Any, params: dict[str, Any]) -> None:
    prompt = params.get("prompt")
    with STATE_LOCK:
        sess = _get_session(params)
        if sess is None:
            reply_error(rid, _session_not_found(params))
            return
        if not isinstance(prompt, list):
            reply_error(rid, invalid_params("prompt must be a list of content blocks"))
            return
        if sess.running is not None:
            if ARGS.dialect == "kiro":
                busy = {
                    "code": -32603,
                    "message": "Internal error",
                    "data": "prompt already in progress",
                }
            else:
                busy = {"code": -32600, "message": "Prompt already in progress"}
            reply_error(rid, busy)
            return
        texts = [
            b["text"]
            for b in prompt
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        p = Prompt(rid, sess, "\n".join(texts))
        sess.running = p
    threading.Thread(target=prompt_worker, args=(p,), name=f"prompt-{rid}", daemon=True).start()


def h_cancel(params: dict[str, Any]) -> None:
    sess = _get_session(params)
    if sess is None:
        return
    with STATE_LOCK:
        p = sess.running
    if p is not None:
        p.cancel()


REQUEST_HANDLERS = {
    "initialize": h_initialize,
    "session/new": h_session_new,
    "session/load": h_session_load,
    "session/set_mode": h_set_mode,
    "session/set_model": h_set_model,
    "session/set_config_option": h_set_config_option,
    "session/prompt": h_prompt,
}


# ---- session state between turns (issue 12: state, kiro extensions, models) -----------------
# --after-new JSON   a list of {"method", "params"?} notifications sent right after every
#                    session/new and session/load answer (sessionId filled in), e.g. the
#                    command menu an agent sends before the first prompt.
# --config-json JSON the session's configOptions verbatim (any ids, categories, grouped select
#                    options as {"group", "name", "options": [...]}) instead of the generated
#                    ones; session/set_config_option accepts any listed id and value, and
#                    answers with every option.
# --config-refuse V  session/set_config_option to value V fails (-32603, kiro-style data), as
#                    when an account may not use a model the agent lists.
EXTRA_OPTIONS: dict[str, list[dict[str, Any]]] = {}  # per session id, when --config-json


def _extra_options(session_id: str) -> list[dict[str, Any]]:
    with STATE_LOCK:
        if session_id not in EXTRA_OPTIONS:
            EXTRA_OPTIONS[session_id] = json.loads(json.dumps(ARGS.config_json))
        return EXTRA_OPTIONS[session_id]


def _flat_values(option: dict[str, Any]) -> set[str]:
    values = set()
    for item in option.get("options") or ():
        if isinstance(item, dict) and isinstance(item.get("options"), list):
            values |= {c.get("value") for c in item["options"] if isinstance(c, dict)}
        elif isinstance(item, dict):
            values.add(item.get("value"))
    return values


def _send_after_new(session_id: str) -> None:
    for frame in ARGS.after_new or ():
        params = _with_session(frame.get("params") or {}, session_id)
        send({"jsonrpc": "2.0", "method": frame["method"], "params": params})


def _decorate_extras(session: Session, result: dict[str, Any]) -> dict[str, Any]:
    if ARGS.config_json is not None:
        result["configOptions"] = _extra_options(session.id)
    return result


def h_session_new_extras(rid: Any, params: dict[str, Any]) -> None:
    with STATE_LOCK:
        before = set(SESSIONS)
    h_session_new(rid, params)
    with STATE_LOCK:
        created = set(SESSIONS) - before
    for session_id in created:
        _send_after_new(session_id)


def h_session_load_extras(rid: Any, params: dict[str, Any]) -> None:
    h_session_load(rid, params)
    session_id = params.get("sessionId")
    with STATE_LOCK:
        known = isinstance(session_id, str) and session_id in SESSIONS
    if known:
        _send_after_new(session_id)


def h_set_config_option_extras(rid: Any, params: dict[str, Any]) -> None:
    if ARGS.config_json is None:
        h_set_config_option(rid, params)
        return
    sess = _get_session(params)
    if sess is None:
        reply_error(rid, _session_not_found(params))
        return
    options = _extra_options(sess.id)
    config_id, value = params.get("configId"), params.get("value")
    if ARGS.config_refuse is not None and value == ARGS.config_refuse:
        reply_error(
            rid, {"code": -32603, "message": "Internal error", "data": "Model is not available"}
        )
        return
    for option in options:
        if option.get("id") == config_id:
            if value not in _flat_values(option):
                reply_error(rid, invalid_params(f"unknown value {_dumps(value)}"))
                return
            option["currentValue"] = value
            reply(rid, {"configOptions": options})
            return
    reply_error(rid, invalid_params(f"unknown configId {_dumps(config_id)}"))


REQUEST_HANDLERS["session/new"] = h_session_new_extras
REQUEST_HANDLERS["session/load"] = h_session_load_extras
REQUEST_HANDLERS["session/set_config_option"] = h_set_config_option_extras
# ---- end of the session state block ----------------------------------------------------------


def handle_line(raw: bytes) -> None:
    line = raw.rstrip(b"\r\n")
    if not line.strip():
        return
    try:
        text = line.decode("utf-8")
        frame = json.loads(text)
    except (UnicodeDecodeError, ValueError):
        log({"dir": "in", "raw": line[:2000].decode("utf-8", "replace")})
        reply_error(None, {"code": -32700, "message": "Parse error"})
        return
    log({"dir": "in", "frame": frame})
    if not isinstance(frame, dict):
        reply_error(None, {"code": -32600, "message": "Invalid Request"})
        return
    method = frame.get("method")
    has_id = "id" in frame
    if method is None:
        if has_id:  # a response to one of our requests
            with STATE_LOCK:
                slot = PENDING.get(frame["id"]) if isinstance(frame["id"], int) else None
            if slot is not None:
                slot.frame = frame
                slot.prompt.wake.set()
        return
    params = frame.get("params")
    if not isinstance(params, dict):
        params = {}
    if not has_id:
        if method == "session/cancel":
            h_cancel(params)
        return
    rid = frame["id"]
    handler = REQUEST_HANDLERS.get(method) if isinstance(method, str) else None
    if handler is None:
        reply_error(rid, dict(ERR_METHOD_NOT_FOUND))
        return
    try:
        handler(rid, params)
    except Exception as exc:
        log({"event": "handler_crash", "error": traceback.format_exc()})
        reply_error(
            rid, {"code": -32603, "message": "Internal error", "data": f"fake-agent: {exc!r}"}
        )


# ----------------------------------------------------------------------------- tool gate extras
# (issue 12, the tool gate.) Modes as real agents describe them:
#   --mode-descriptions JSON   {modeId: description} for availableModes and the mode option's values
#   --mode-option-id ID        the mode config option's id (category stays "mode"); default "mode"
#   --mode-update              after a mode switch, send current_mode_update before the answer
#   --mode-stuck               a mode switch succeeds but the mode stays as it was (and is reported)


def _gate_add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--mode-descriptions", type=_json_arg)
    ap.add_argument("--mode-option-id", default="mode")
    ap.add_argument("--mode-update", action="store_true")
    ap.add_argument("--mode-stuck", action="store_true")


def _gate_install() -> None:
    described = ARGS.mode_descriptions or {}
    option_id = ARGS.mode_option_id
    plain_modes_obj = Session.modes_obj
    plain_config_options = Session.config_options

    def modes_obj(self: Session) -> dict[str, Any] | None:
        modes = plain_modes_obj(self)
        for mode in (modes or {}).get("availableModes", []):
            if mode["id"] in described:
                mode["description"] = described[mode["id"]]
        return modes

    def config_options(self: Session) -> list[dict[str, Any]]:
        opts = plain_config_options(self)
        for opt in opts:
            if opt["id"] == "mode":
                opt["id"] = option_id
                for choice in opt["options"]:
                    if choice["value"] in described:
                        choice["description"] = described[choice["value"]]
        return opts

    Session.modes_obj = modes_obj  # type: ignore[method-assign]
    Session.config_options = config_options  # type: ignore[method-assign]

    def around(handler: Any) -> Any:
        def wrapped(rid: Any, params: dict[str, Any]) -> None:
            if params.get("configId") == option_id:
                params = {**params, "configId": "mode"}
            sess = _get_session(params)
            is_mode = "modeId" in params or params.get("configId") == "mode"
            value = params.get("modeId") if "modeId" in params else params.get("value")
            quirky = ARGS.mode_update or ARGS.mode_stuck
            if not (quirky and is_mode and sess is not None and _known(ARGS.modes, value)):
                handler(rid, params)
                return
            if not ARGS.mode_stuck:
                sess.mode = value
                sess.save()
            if ARGS.mode_update:
                update = {"sessionUpdate": "current_mode_update", "currentModeId": sess.mode}
                send(
                    {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {"sessionId": sess.id, "update": update},
                    }
                )
            reply(rid, {"configOptions": sess.config_options()} if "configId" in params else {})

        return wrapped

    for method in ("session/set_mode", "session/set_config_option"):
        REQUEST_HANDLERS[method] = around(REQUEST_HANDLERS[method])


# ----------------------------------------------------------------------------- prompt content extras
# (issue 13, files in.) What the agent takes besides text, and what it says it received:
#   --prompt-capabilities JSON   agentCapabilities.promptCapabilities, e.g. '{"image": true}'
# A prompt with blocks other than text is answered as if its text ended with one line naming them,
# "[received: image image/png 68B | resource_link photo.png image/png 68B | resource x.txt 12
# chars]", so the default echo (and any SCN_ scenario) shows what arrived; a SCRIPT: prompt is left
# as it is (its JSON runs to the end of the text). The frame itself is in the log ("dir":"in").
# A file in the reply is the `update` step with an agent_message_chunk whose content is an image,
# audio, resource or resource_link block.


def _files_add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--prompt-capabilities", type=_json_arg)


def _describe_block(block: Any) -> str:
    if not isinstance(block, dict):
        return "invalid"
    kind = str(block.get("type"))
    if kind in ("image", "audio"):
        data = block.get("data")
        size = len(base64.b64decode(data)) if isinstance(data, str) else -1
        return f"{kind} {block.get('mimeType')} {size}B"
    if kind == "resource_link":
        return f"{kind} {block.get('name')} {block.get('mimeType')} {block.get('size')}B"
    if kind == "resource":
        resource = block.get("resource") or {}
        text = resource.get("text") if isinstance(resource, dict) else None
        name = str(resource.get("uri", "")).rsplit("/", 1)[-1] if isinstance(resource, dict) else ""
        return f"{kind} {name} {len(text) if isinstance(text, str) else -1} chars"
    return kind


def _files_install() -> None:
    if ARGS.prompt_capabilities is not None:
        capabilities = {
            "loadSession": not ARGS.no_load,
            "promptCapabilities": ARGS.prompt_capabilities,
        }
        ARGS.init_result = {**(ARGS.init_result or {}), "agentCapabilities": capabilities}
    plain_prompt = REQUEST_HANDLERS["session/prompt"]

    def prompt(rid: Any, params: dict[str, Any]) -> None:
        blocks = params.get("prompt")
        if isinstance(blocks, list) and any(
            not (isinstance(b, dict) and b.get("type") == "text") for b in blocks
        ):
            texts = " ".join(
                str(b.get("text"))
                for b in blocks
                if isinstance(b, dict) and b.get("type") == "text"
            )
            if "SCRIPT:" not in texts:
                others = [
                    _describe_block(b)
                    for b in blocks
                    if not (isinstance(b, dict) and b.get("type") == "text")
                ]
                line = {"type": "text", "text": "\n[received: " + " | ".join(others) + "]"}
                params = {**params, "prompt": [*blocks, line]}
        plain_prompt(rid, params)

    REQUEST_HANDLERS["session/prompt"] = prompt


# ----------------------------------------------------------------------------- session list extras
# (issue 14, /sessions.) The sessions the agent persisted (every session/new and session/load saves
# one, in --state-dir), listed as a real agent lists them:
#   --session-list      advertise agentCapabilities.sessionCapabilities.list and answer session/list
#                       {cwd?, cursor?} -> {sessions: [{sessionId, cwd, title, updatedAt}], nextCursor?},
#                       most recently updated first; the title is a saved "title" field, else the
#                       first user message (its first 40 characters); a bad cursor is -32602
#   --list-page N       sessions per page (default 2): more make a nextCursor ("page:<offset>")
#   --list-extra JSON   a list of raw entries appended to every page verbatim (hostile shapes)
#   --list-error JSON   session/list answers this error instead


def _list_add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--session-list", action="store_true")
    ap.add_argument("--list-page", type=int, default=2)
    ap.add_argument("--list-extra", type=json.loads)
    ap.add_argument("--list-error", type=_json_arg)


def _listed_sessions(cwd: Any) -> list[dict[str, Any]]:
    folder = os.path.join(STATE_DIR, "sessions")
    found: list[tuple[float, dict[str, Any]]] = []
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            mtime = os.stat(path).st_mtime
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or (isinstance(cwd, str) and data.get("cwd") != cwd):
            continue
        users = [e.get("text", "") for e in data.get("transcript", []) if e.get("role") == "user"]
        title = data.get("title") or (users[0][:40] if users else None)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
        entry = {"sessionId": data.get("sessionId"), "cwd": data.get("cwd"), "updatedAt": stamp}
        if title:
            entry["title"] = title
        found.append((mtime, entry))
    found.sort(key=lambda item: item[0], reverse=True)
    return [entry for _, entry in found]


def h_session_list(rid: Any, params: dict[str, Any]) -> None:
    if ARGS.list_error is not None:
        reply_error(rid, ARGS.list_error)
        return
    cursor = params.get("cursor")
    offset = 0
    if cursor is not None:
        if not (isinstance(cursor, str) and re.fullmatch(r"page:\d+", cursor)):
            reply_error(rid, invalid_params(f"bad cursor {_dumps(cursor)}"))
            return
        offset = int(cursor.split(":", 1)[1])
    listed = _listed_sessions(params.get("cwd"))
    page = listed[offset : offset + ARGS.list_page] + list(ARGS.list_extra or ())
    result: dict[str, Any] = {"sessions": page}
    if offset + ARGS.list_page < len(listed):
        result["nextCursor"] = f"page:{offset + ARGS.list_page}"
    reply(rid, result)


def _list_install() -> None:
    if not ARGS.session_list:
        return
    capabilities = dict((ARGS.init_result or {}).get("agentCapabilities") or {})
    capabilities.setdefault("loadSession", not ARGS.no_load)
    capabilities.setdefault(
        "promptCapabilities", {"image": False, "audio": False, "embeddedContext": False}
    )
    capabilities["sessionCapabilities"] = {"list": {}}
    ARGS.init_result = {**(ARGS.init_result or {}), "agentCapabilities": capabilities}
    REQUEST_HANDLERS["session/list"] = h_session_list


# ---- ACP v1 session and request extras (issue 22: resume, close, $/cancel_request) ----------
#   --session-resume        advertise sessionCapabilities.resume; session/resume answers like
#                           session/load but replays nothing
#   --session-close         advertise sessionCapabilities.close; session/close forgets the session
#                           (logged as {"event": "closed", "sessionId"})
#   --resume-bare           session/load and session/resume answer `{}` (no modes, no options)
#   --hang-requests M,...   requests with these methods are never answered, until the client
#                           sends $/cancel_request for them: then -32800 (logged "withdrawn_by_client")
#   --terminal-auth JSON    an authMethods entry offered only when the client advertised
#                           clientCapabilities.auth.terminal (e.g. {"type": "terminal", ...})
# Step {"withdraw": {"method", "params"?}, "when_file"?: path}: send the request, wait until the
# file exists (when given), send $/cancel_request for it, wait for the client's answer, then chunk
# "withdrawn:<compact JSON of the answer's result or error>".
HUNG: set[Any] = set()


def _v1_add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--session-resume", action="store_true")
    ap.add_argument("--session-close", action="store_true")
    ap.add_argument("--resume-bare", action="store_true")
    ap.add_argument("--hang-requests", default="")
    ap.add_argument("--terminal-auth", type=_json_arg)


def h_session_resume(rid: Any, params: dict[str, Any]) -> None:
    bad = _check_cwd_mcp(params)
    if bad:
        reply_error(rid, invalid_params(bad))
        return
    sid = params.get("sessionId")
    data = load_session_file(sid) if isinstance(sid, str) else None
    if data is None:
        reply_error(rid, _session_not_found(params))
        return
    with STATE_LOCK:
        sess = SESSIONS.get(sid)
        if sess is None or sess.running is None:
            sess = SESSIONS[sid] = Session(data)
    sess.cwd = params["cwd"]
    reply(rid, {} if ARGS.resume_bare else sess.decorate({}))
    _send_after_new(sess.id)


def h_session_close(rid: Any, params: dict[str, Any]) -> None:
    sess = _get_session(params)
    if sess is None:
        reply_error(rid, _session_not_found(params))
        return
    with STATE_LOCK:
        SESSIONS.pop(sess.id, None)
        running = sess.running
    if running is not None:
        running.cancel()
    log({"event": "closed", "sessionId": sess.id})
    reply(rid, {})


def _v1_run_steps(plain: Any) -> Any:
    def run(p: Prompt, steps: list[Any]) -> bool:
        for index, step in enumerate(steps):
            if isinstance(step, dict) and "withdraw" in step:
                _withdraw(p, step)
            elif not plain(p, steps[index : index + 1]):
                return False
        return True

    return run


def _withdraw(p: Prompt, step: dict[str, Any]) -> None:
    r = step["withdraw"]
    if not isinstance(r, dict) or not isinstance(r.get("method"), str):
        raise ScriptError("withdraw needs {method, params?}")
    rid = next_request_id()
    slot = Slot(p)
    with STATE_LOCK:
        PENDING[rid] = slot
    try:
        params = _with_session(_substitute_saved(r.get("params")), p.session.id)
        send({"jsonrpc": "2.0", "id": rid, "method": r["method"], "params": params})
        when = step.get("when_file")
        if isinstance(when, str):
            p.wait(lambda: os.path.exists(when))
        send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": rid}})
        p.wait(lambda: slot.frame is not None)
    finally:
        with STATE_LOCK:
            PENDING.pop(rid, None)
    assert slot.frame is not None
    rest = {k: v for k, v in slot.frame.items() if k not in ("jsonrpc", "id")}
    p.chunk("withdrawn:" + json.dumps(rest, separators=(",", ":"), sort_keys=True))


def _v1_handle_line(plain: Any) -> Any:
    def handle(raw: bytes) -> None:
        try:
            frame = json.loads(raw)
        except ValueError:
            frame = None
        if isinstance(frame, dict) and frame.get("method") == "$/cancel_request":
            log({"dir": "in", "frame": frame})
            params = frame.get("params") if isinstance(frame.get("params"), dict) else {}
            rid = params.get("requestId")
            with STATE_LOCK:
                hung = rid in HUNG
                HUNG.discard(rid)
            if hung:
                log({"event": "withdrawn_by_client", "requestId": rid})
                reply_error(rid, {"code": -32800, "message": "Request cancelled"})
            return
        plain(raw)

    return handle


def _hang(rid: Any, params: dict[str, Any]) -> None:
    with STATE_LOCK:
        HUNG.add(rid)


def _v1_install() -> None:
    global run_steps, handle_line
    capabilities = dict((ARGS.init_result or {}).get("agentCapabilities") or {})
    if ARGS.session_resume or ARGS.session_close:
        capabilities.setdefault("loadSession", not ARGS.no_load)
        capabilities.setdefault(
            "promptCapabilities", {"image": False, "audio": False, "embeddedContext": False}
        )
        session_caps = dict(capabilities.get("sessionCapabilities") or {})
        if ARGS.session_resume:
            session_caps["resume"] = {}
            REQUEST_HANDLERS["session/resume"] = h_session_resume
        if ARGS.session_close:
            session_caps["close"] = {}
            REQUEST_HANDLERS["session/close"] = h_session_close
        capabilities["sessionCapabilities"] = session_caps
        ARGS.init_result = {**(ARGS.init_result or {}), "agentCapabilities": capabilities}
    if ARGS.resume_bare:
        plain_load = REQUEST_HANDLERS["session/load"]

        def bare_load(rid: Any, params: dict[str, Any]) -> None:
            plain_decorate = Session.decorate
            Session.decorate = lambda self, result: result  # type: ignore[method-assign,assignment,misc]
            try:
                plain_load(rid, params)
            finally:
                Session.decorate = plain_decorate  # type: ignore[method-assign]

        REQUEST_HANDLERS["session/load"] = bare_load
    for method in filter(None, ARGS.hang_requests.split(",")):
        REQUEST_HANDLERS[method] = _hang
    if ARGS.terminal_auth is not None:
        plain_init = REQUEST_HANDLERS["initialize"]

        def init(rid: Any, params: dict[str, Any]) -> None:
            caps = params.get("clientCapabilities")
            auth = caps.get("auth") if isinstance(caps, dict) else None
            if isinstance(auth, dict) and auth.get("terminal") is True:
                methods = [*(ARGS.init_result or {}).get("authMethods", []), ARGS.terminal_auth]
                ARGS.init_result = {**(ARGS.init_result or {}), "authMethods": methods}
            plain_init(rid, params)

        REQUEST_HANDLERS["initialize"] = init
    run_steps = _v1_run_steps(run_steps)
    handle_line = _v1_handle_line(handle_line)


# ---- end of the ACP v1 extras ------------------------------------------------------------------
# ----------------------------------------------------------------------------- boolean options
# (issue 22, the agent's approval state.) A `--config-json` option of `"type": "boolean"` is set
# by session/set_config_option with `"type": "boolean"` and a JSON boolean `value` (the v1
# schema), answered with every option; any other value for it is invalid params.


def _boolean_install() -> None:
    plain = REQUEST_HANDLERS["session/set_config_option"]

    def handler(rid: Any, params: dict[str, Any]) -> None:
        sess = _get_session(params) if ARGS.config_json is not None else None
        option = next(
            (
                o
                for o in (_extra_options(sess.id) if sess is not None else [])
                if o.get("id") == params.get("configId") and o.get("type") == "boolean"
            ),
            None,
        )
        if sess is None or option is None:
            plain(rid, params)
            return
        value = params.get("value")
        if params.get("type") != "boolean" or not isinstance(value, bool):
            reply_error(rid, invalid_params(f"{option['id']} takes a boolean value"))
            return
        option["currentValue"] = value
        reply(rid, {"configOptions": _extra_options(sess.id)})

    REQUEST_HANDLERS["session/set_config_option"] = handler


# ----------------------------------------------------------------------------- steering
# (issue 24, steering.) As claude-agent-acp 0.101.0 does it:
#   --steering   advertise `_meta: {steering: {supported: true}}` at the top of initialize's result
#                and answer `_session/steering` {sessionId, prompt}: during a running prompt
#                {"outcome": "injected"} (its text handed to the running script), when the session
#                is idle {"outcome": "promptRequired"}. Without the option the request is answered
#                -32601, logged {"event": "steer_unadvertised"} (a client must never probe it).
# Step {"await_steer": seconds}: wait (interruptible by cancel) until a steer was injected into
# this prompt, then chunk "steered:<its text>" for each one injected so far; "steered:none" when
# none came in time.
# Every steering request is logged {"event": "steer", "outcome", "meta": its _meta}.


def _steer_add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--steering", action="store_true")


def h_steering(rid: Any, params: dict[str, Any]) -> None:
    if not ARGS.steering:
        log({"event": "steer_unadvertised"})
        reply_error(rid, dict(ERR_METHOD_NOT_FOUND))
        return
    sess = _get_session(params)
    blocks = params.get("prompt")
    if sess is None:
        reply_error(rid, _session_not_found(params))
        return
    if not isinstance(blocks, list) or not blocks:
        reply_error(rid, invalid_params("steer params require a non-empty prompt array"))
        return
    text = " ".join(
        str(b.get("text")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )
    with STATE_LOCK:
        p = sess.running
        outcome = "promptRequired" if p is None or p.answered else "injected"
        if p is not None and outcome == "injected":
            p.steered.append(text)
    log({"event": "steer", "outcome": outcome, "meta": params.get("_meta")})
    if p is not None and outcome == "injected":
        p.wake.set()
    reply(rid, {"outcome": outcome})


def _steer_run_steps(plain: Any) -> Any:
    def run(p: Prompt, steps: list[Any]) -> bool:
        for index, step in enumerate(steps):
            if isinstance(step, dict) and "await_steer" in step:
                p.wait(lambda: bool(p.steered), float(step["await_steer"]))
                for text in p.steered or ["none"]:
                    p.chunk(f"steered:{text}")
            elif not plain(p, steps[index : index + 1]):
                return False
        return True

    return run


def _steer_install() -> None:
    global run_steps
    if ARGS.steering:
        meta = dict((ARGS.init_result or {}).get("_meta") or {})
        meta["steering"] = {"supported": True}
        ARGS.init_result = {**(ARGS.init_result or {}), "_meta": meta}
    REQUEST_HANDLERS["_session/steering"] = h_steering
    run_steps = _steer_run_steps(run_steps)


# ----------------------------------------------------------------------------- startup


def _json_arg(value: str) -> dict[str, Any]:
    try:
        obj = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return obj


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="fake_agent.py", description="Scripted fake ACP agent")
    ap.add_argument("--dialect", choices=["kiro", "claude", "codex", "generic"], default="generic")
    ap.add_argument("--no-load", action="store_true", help="do not advertise loadSession")
    ap.add_argument("--modes", help="comma list of mode ids (id or id=Name)")
    ap.add_argument("--current-mode")
    ap.add_argument("--models", help="comma list of model ids (id or id=Name)")
    ap.add_argument("--current-model")
    ap.add_argument("--config-options", action="store_true")
    ap.add_argument("--after-new", type=json.loads, help="notifications after session/new|load")
    ap.add_argument("--config-json", type=json.loads, help="configOptions verbatim")
    ap.add_argument("--config-refuse", help="set_config_option to this value fails")
    ap.add_argument("--init-error", type=_json_arg)
    ap.add_argument("--init-result", type=_json_arg, help="fields replacing initialize's result")
    ap.add_argument("--init-hang", action="store_true", help="never answer initialize")
    ap.add_argument("--new-error", type=_json_arg)
    ap.add_argument("--load-error", type=_json_arg)
    ap.add_argument("--exit-on-start", type=int)
    ap.add_argument("--exit-after-init", type=int)
    ap.add_argument("--stderr-on-start")
    ap.add_argument("--stderr-flood", type=int, metavar="BYTES")
    ap.add_argument("--ignore-stdin-eof", action="store_true")
    ap.add_argument("--ignore-sigterm", action="store_true")
    ap.add_argument("--fork-child", action="store_true")
    ap.add_argument("--log", default=os.environ.get("FAKE_AGENT_LOG") or None)
    ap.add_argument("--state-dir", default=os.environ.get("FAKE_AGENT_STATE") or None)
    _gate_add_args(ap)  # tool gate extras
    _pool_add_args(ap)  # runtime pool extras
    _files_add_args(ap)  # prompt content extras
    _list_add_args(ap)  # session list extras
    _v1_add_args(ap)  # ACP v1 extras
    _steer_add_args(ap)  # steering
    return ap.parse_args(argv)


# ---- runtime pool extras (issue 14): a slow start the test controls -------------------------
def _pool_add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--init-wait-file",
        help="answer initialize only once this file exists (a slow start ended by the test)",
    )


def _pool_answer_initialize_later(rid: Any, params: dict[str, Any]) -> None:
    """Wait for the file on a thread (the main thread keeps reading stdin), then answer."""

    def wait() -> None:
        while not os.path.exists(ARGS.init_wait_file):
            time.sleep(0.02)
        log({"event": "init_released"})
        ARGS.init_wait_file = None
        h_initialize(rid, params)

    threading.Thread(target=wait, daemon=True).start()


def _on_sigterm(signum: int, _frame: Any) -> None:
    if ARGS.ignore_sigterm:
        log({"event": "signal_ignored", "signal": signum})
        return
    log({"event": "exit", "code": -signum, "reason": "signal"})
    if TEMP_STATE:
        shutil.rmtree(STATE_DIR, ignore_errors=True)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _stderr_flood(total: int) -> None:
    """Write exactly `total` bytes of numbered stderr lines, in 64 KiB writes."""
    parts: list[str] = []
    size = 0
    n = 0
    while size < total:
        line = f"fake-agent stderr flood line {n:08d} {'.' * 60}\n"
        if size + len(line) > total:
            line = "." * (total - size - 1) + "\n"
        parts.append(line)
        size += len(line)
        n += 1
    data = "".join(parts)
    for start in range(0, len(data), 65536):
        write_stderr(data[start : start + 65536])


def main(argv: list[str]) -> None:
    global ARGS, LOG_PATH, STATE_DIR, TEMP_STATE
    ARGS = parse_args(argv)
    _gate_install()  # tool gate extras
    _files_install()  # prompt content extras
    _list_install()  # session list extras
    _v1_install()  # ACP v1 extras
    _boolean_install()  # boolean options
    _steer_install()  # steering
    LOG_PATH = ARGS.log
    if ARGS.state_dir:
        STATE_DIR = os.path.abspath(ARGS.state_dir)
    else:
        STATE_DIR = tempfile.mkdtemp(prefix="fake-agent-")
        TEMP_STATE = True
    os.makedirs(os.path.join(STATE_DIR, "sessions"), exist_ok=True)

    log({"event": "start", "pid": os.getpid(), "argv": sys.argv})
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_DFL)

    if ARGS.stderr_on_start is not None:
        text = ARGS.stderr_on_start
        write_stderr(text if text.endswith("\n") else text + "\n")
    if ARGS.exit_on_start is not None:
        write_stderr(f"fake-agent: exiting on start with code {ARGS.exit_on_start}\n")
        exit_now(ARGS.exit_on_start, "--exit-on-start")
    if ARGS.fork_child:
        child = subprocess.Popen(
            [sys.executable, "-c", "import time\nfor _ in range(300):\n    time.sleep(1)\n"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        log({"event": "child", "pid": child.pid})
    if ARGS.stderr_flood:
        _stderr_flood(ARGS.stderr_flood)

    stdin = sys.stdin.buffer
    while True:
        try:
            raw = stdin.readline()
        except (OSError, ValueError):
            raw = b""
        if not raw:
            break
        handle_line(raw)

    log({"event": "stdin_eof"})
    if not ARGS.ignore_stdin_eof:
        exit_now(0, "stdin eof")
    forever = threading.Event()
    while True:
        forever.wait(1.0)


if __name__ == "__main__":
    main(sys.argv[1:])
