"""Loopback mock model API for running the real agents offline (stdlib only).

One threaded HTTP server on 127.0.0.1 serves both:

* the Anthropic Messages API (``POST /v1/messages`` with or without ``?beta=true``; SSE when the
  body has ``"stream": true``, plain JSON otherwise; ``POST /v1/messages/count_tokens``;
  ``GET /v1/models``) for claude-agent-acp, and
* the OpenAI Responses API (``POST /v1/responses``, SSE) for codex-acp,
* the Gemini API (``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` and
  ``:generateContent``, ``:countTokens``) for gemini-cli (``GOOGLE_GEMINI_BASE_URL`` = ``url``), and
* OpenAI Chat Completions (``POST /v1/chat/completions``, SSE ``data:`` chunks ending in
  ``data: [DONE]``) for opencode (provider ``baseURL`` = ``openai_base_url``).

The scenario is picked from a marker word (``SCN_...``) anywhere in the user text of the
conversation; the **last** marker wins. Scenarios apply only to requests carrying a non-empty
``tools`` list: tool-less requests (session-title generation and other side calls) always get the
plain text reply. See ``SCENARIOS``. Each ``RecordedRequest`` keeps what a test asserts on: the
user texts and tool results the request carried, the tools it offered, and the user texts that
came after the marker's (``injected_texts``: what a steer put into the running turn).

Module use::

    with MockModelServer() as mock:
        env["ANTHROPIC_BASE_URL"] = mock.url
        ...
        assert mock.count(api="anthropic", scenario="SCN_E429") == 1

Script use: ``python tests/fakes/mock_model.py --port 0`` prints the bound port on the first line of
stdout, then serves until SIGINT/SIGTERM. ``--log`` prints one JSON line per request to stderr.

Request and response shapes are those of the real Anthropic Messages and OpenAI Responses APIs,
as far as claude-agent-acp and codex-acp read them (see tests/fakes/REAL_AGENTS_NOTES.md).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import re
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "ANTHROPIC_MODEL",
    "DEFAULT_SCENARIO",
    "GEMINI_MODEL",
    "MOCK_ASK_ANSWERED",
    "MOCK_ASK_HEADER",
    "MOCK_ASK_INPUT",
    "MOCK_ASK_OPTIONS",
    "MOCK_ASK_QUESTION",
    "MOCK_ASK_TOOL",
    "MOCK_ASK_UNAVAILABLE",
    "MOCK_SLOW_PREFIX",
    "MOCK_STEER_SEEN",
    "MOCK_TEXT",
    "MOCK_TITLE",
    "MOCK_TOOL_COMMAND",
    "MOCK_TOOL_DONE_TEXT",
    "MOCK_TOOL_MARKER",
    "MOCK_TOOL_OUTPUT_FILE",
    "OPENAI_MODEL",
    "SCENARIOS",
    "MockModelServer",
    "RecordedRequest",
    "find_marker",
]

# --------------------------------------------------------------------------------------------
# Deterministic content
# --------------------------------------------------------------------------------------------

MOCK_TEXT = "Hello from the mock model. This is the Switchboard mock reply."
MOCK_TOOL_DONE_TEXT = "The tool has finished. Switchboard mock tool turn complete."
MOCK_TOOL_MARKER = "switchboard-tool-ran"
MOCK_TOOL_OUTPUT_FILE = "tool_ran.txt"
MOCK_TOOL_COMMAND = f"echo {MOCK_TOOL_MARKER} > {MOCK_TOOL_OUTPUT_FILE}"
MOCK_TOOL_DESCRIPTION = "Write a marker file for the Switchboard mock"
MOCK_TOOL_JUSTIFICATION = "The Switchboard mock model needs to write tool_ran.txt in the workspace."
MOCK_SLOW_PREFIX = "slow-tick"
MOCK_REFUSAL_TEXT = "I can't help with that request."
MOCK_STEER_SEEN = "Steer seen by the mock:"
MOCK_ASK_TOOL = "AskUserQuestion"
MOCK_ASK_QUESTION = "Which colour should the mock paint the shed?"
MOCK_ASK_HEADER = "Colour"
MOCK_ASK_OPTIONS = ("Red", "Blue")
MOCK_ASK_INPUT = {
    "questions": [
        {
            "question": MOCK_ASK_QUESTION,
            "header": MOCK_ASK_HEADER,
            "options": [
                {"label": label, "description": f"Paint it {label.lower()}"}
                for label in MOCK_ASK_OPTIONS
            ],
            "multiSelect": False,
        }
    ]
}
MOCK_ASK_ANSWERED = "The mock read the answer:"
MOCK_ASK_UNAVAILABLE = "The mock wanted to ask a question, but AskUserQuestion is not offered."
ANTHROPIC_MODEL = "claude-mock-1"
OPENAI_MODEL = "gpt-mock"

DEFAULT_SCENARIO = "SCN_TEXT"

#: marker -> one-line description. A marker is matched as a whole word (``SCN_E429`` does not
#: match inside ``SCN_E429_ONCE``).
SCENARIOS: dict[str, str] = {
    "SCN_TEXT": "plain streamed text reply (MOCK_TEXT); the default",
    "SCN_E429": "HTTP 429 rate limit (anthropic rate_limit_error / openai rate_limit_exceeded)",
    "SCN_E429_ONCE": "HTTP 429 on the first scenario-bearing request per API, then plain text",
    "SCN_QUOTA": "openai 429 insufficient_quota; anthropic 400 'Your credit balance is too low...'",
    "SCN_E500": "HTTP 500 server error",
    "SCN_E401": "HTTP 401 invalid API key",
    "SCN_REFUSAL": "anthropic stop_reason 'refusal' on every call; openai a refusal content part",
    "SCN_TOOL": "one tool call (anthropic Bash / openai exec_command require_escalated), then text",
    "SCN_SLOW": "text streamed slowly (one delta per slow_interval for slow_duration seconds)",
    "SCN_STEER": "anthropic: as SCN_SLOW until a request carries user text after the marker's "
    "while the slow reply was cut short (a steer injected into the running turn), then text "
    "MOCK_STEER_SEEN + those texts joined by ' | '; a prompt after a finished reply streams slowly",
    "SCN_ASK": "anthropic: tool_use AskUserQuestion (MOCK_ASK_INPUT: one question, options "
    "MOCK_ASK_OPTIONS), then text MOCK_ASK_ANSWERED + the tool_result's text; "
    "MOCK_ASK_UNAVAILABLE when the tool is not offered",
}

_MARKER_RE = re.compile(r"\bSCN_[A-Z0-9_]+\b")


def find_marker(texts: Iterable[str]) -> str | None:
    """Return the last known scenario marker found in ``texts`` (in order), else None."""
    found = None
    for text in texts:
        for m in _MARKER_RE.finditer(text or ""):
            if m.group(0) in SCENARIOS:
                found = m.group(0)
    return found


# --------------------------------------------------------------------------------------------
# Error bodies
# --------------------------------------------------------------------------------------------


def _anthropic_error(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _openai_error(message: str, type_: str, code: str | None) -> dict:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


ANTHROPIC_ERRORS: dict[str, tuple[int, dict]] = {
    "SCN_E429": (
        429,
        _anthropic_error(
            "rate_limit_error",
            "This request would exceed the rate limit for your organization of 50 requests per minute "
            "(mock). Please try again later.",
        ),
    ),
    "SCN_QUOTA": (
        400,
        _anthropic_error(
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing "
            "to upgrade or purchase credits.",
        ),
    ),
    "SCN_E500": (500, _anthropic_error("api_error", "Internal server error")),
    "SCN_E401": (401, _anthropic_error("authentication_error", "invalid x-api-key")),
}

OPENAI_ERRORS: dict[str, tuple[int, dict]] = {
    "SCN_E429": (
        429,
        _openai_error(
            "Rate limit reached for gpt-mock in organization org-mock on tokens per min (TPM): "
            "Limit 1000, Used 1000, Requested 100. Please try again in 20s.",
            "tokens",
            "rate_limit_exceeded",
        ),
    ),
    "SCN_QUOTA": (
        429,
        _openai_error(
            "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
            "insufficient_quota",
        ),
    ),
    "SCN_E500": (
        500,
        _openai_error(
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
        ),
    ),
    "SCN_E401": (
        401,
        _openai_error(
            "Incorrect API key provided: sk-mock. You can obtain an API key from your account page.",
            "invalid_request_error",
            "invalid_api_key",
        ),
    ),
}


# --------------------------------------------------------------------------------------------
# Request record
# --------------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One HTTP request the mock received (a snapshot copy is handed out)."""

    seq: int
    time: float  # time.monotonic() on arrival
    method: str
    path: str  # without the query string
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: Any  # parsed JSON, or None
    api: str | None  # "anthropic", "openai" or None
    endpoint: str  # "messages", "responses", "models", "count_tokens", "other"
    stream: bool = False
    has_tools: bool = False
    model: str | None = None
    marker: str | None = None  # marker found in the conversation (even when not applied)
    scenario: str | None = None  # scenario applied (None for tool-less/side requests)
    tool_result_seen: bool = False  # a tool result follows the marker
    # the conversation as the mock read it: every user text, and every tool result's text
    # (Anthropic; the other APIs record "" per result), in order
    user_texts: list[str] = field(default_factory=list)
    tool_results: list[str] = field(default_factory=list)
    tool_names: list[str] = field(default_factory=list)  # the tools the request offers
    # user texts after the marker's (a steer injected into the running turn), the agent's
    # own additions (system reminders, suggestion-mode prompts) left out
    injected_texts: list[str] = field(default_factory=list)
    status: int | None = None
    response: str | None = None  # short label of what was answered ("text", "tool_use", ...)
    disconnected: bool = False  # the client went away while we were streaming
    done: bool = False  # handler finished

    def to_dict(self) -> dict:
        return asdict(self)


class _ClientGone(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    mock: MockModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Agents drop keep-alive connections when they exit: not worth a traceback.
        exc = sys.exc_info()[1]
        quiet = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, TimeoutError)
        if isinstance(exc, quiet):
            return
        super().handle_error(request, client_address)


class MockModelServer:
    """Loopback mock of the Anthropic Messages and OpenAI Responses APIs.

    ``start()`` binds 127.0.0.1:``port`` (0 = ephemeral) and serves in a daemon thread;
    ``stop()`` shuts down and ends running streams. Also a context manager.
    """

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        slow_interval: float = 0.2,
        slow_duration: float = 30.0,
        on_request: Callable[[RecordedRequest], None] | None = None,
    ) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the mock model only listens on loopback")
        self.host = host
        self._want_port = port
        self.slow_interval = slow_interval
        self.slow_duration = slow_duration
        self.on_request = on_request
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []
        self._once_counts: dict[str, int] = {}
        self._seq = 0
        self._id_seq = 0
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> MockModelServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _Server((self.host, self._want_port), _Handler)
        httpd.mock = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"mock-model-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> MockModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("mock model server not started")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """Base URL without a path, e.g. ``http://127.0.0.1:41234`` (ANTHROPIC_BASE_URL)."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Base URL for an OpenAI-style provider (``<url>/v1``)."""
        return self.url + "/v1"

    # ---- records --------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Snapshot (deep copies) of every request received, in arrival order."""
        with self._lock:
            return [copy.deepcopy(r) for r in self._records]

    def filtered(
        self,
        *,
        api: str | None = None,
        endpoint: str | None = None,
        path: str | None = None,
        scenario: str | None = None,
        marker: str | None = None,
        has_tools: bool | None = None,
        status: int | None = None,
    ) -> list[RecordedRequest]:
        out = []
        for r in self.requests:
            if api is not None and r.api != api:
                continue
            if endpoint is not None and r.endpoint != endpoint:
                continue
            if path is not None and r.path != path:
                continue
            if scenario is not None and r.scenario != scenario:
                continue
            if marker is not None and r.marker != marker:
                continue
            if has_tools is not None and r.has_tools != has_tools:
                continue
            if status is not None and r.status != status:
                continue
            out.append(r)
        return out

    def count(self, **filters: Any) -> int:
        """Number of recorded requests matching the filters of ``filtered()``."""
        return len(self.filtered(**filters))

    def wait_for(self, n: int = 1, timeout: float = 10.0, **filters: Any) -> bool:
        """Wait (bounded) until at least ``n`` matching requests were recorded."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(**filters) >= n:
                return True
            time.sleep(0.02)
        return self.count(**filters) >= n

    def clear(self) -> None:
        """Forget recorded requests and reset the ``SCN_E429_ONCE`` counters."""
        with self._lock:
            self._records.clear()
            self._once_counts.clear()

    def reset_counters(self) -> None:
        with self._lock:
            self._once_counts.clear()

    # ---- internals used by the handler ----------------------------------------------------

    def _record(self, rec: RecordedRequest) -> RecordedRequest:
        with self._lock:
            self._seq += 1
            rec.seq = self._seq
            self._records.append(rec)
        return rec

    def _update(self, rec: RecordedRequest, **fields: Any) -> None:
        with self._lock:
            for k, v in fields.items():
                setattr(rec, k, v)

    def _finish(self, rec: RecordedRequest) -> None:
        self._update(rec, done=True)
        cb = self.on_request
        if cb is not None:
            try:
                cb(copy.deepcopy(rec))
            except Exception:  # a callback must not break the server
                pass

    def _next_once(self, api: str) -> int:
        """Return how many SCN_E429_ONCE requests of this API came before, and count this one."""
        with self._lock:
            n = self._once_counts.get(api, 0)
            self._once_counts[api] = n + 1
            return n

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            self._id_seq += 1
            n = self._id_seq
        return f"{prefix}_mock{n:06d}"


# --------------------------------------------------------------------------------------------
# Conversation parsing
# --------------------------------------------------------------------------------------------


def _anthropic_events(body: dict) -> list[tuple[str, str]]:
    """Flatten an Anthropic conversation to [("user_text" | "tool_result" | "assistant_text",
    text)]."""
    events: list[tuple[str, str]] = []
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            continue
        kind = "user_text" if msg["role"] == "user" else "assistant_text"
        content = msg.get("content")
        if isinstance(content, str):
            events.append((kind, content))
            continue
        for block in content or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                events.append((kind, str(block.get("text") or "")))
            elif block.get("type") == "tool_result":
                events.append(("tool_result", _anthropic_tool_result_text(block)))
    return events


def _offered_tool_names(body: dict) -> list[str]:
    """Names of the tools an Anthropic, Responses or Chat Completions request offers."""
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if isinstance(name, str):
                names.append(name)
    return names


def _anthropic_tool_result_text(block: dict) -> str:
    """The text of a ``tool_result`` block (a string, or its text blocks joined)."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    parts = [
        str(part.get("text") or "")
        for part in content or []
        if isinstance(part, dict) and part.get("type") == "text"
    ]
    return "\n".join(parts)


def _openai_events(body: dict) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    inp = body.get("input")
    if isinstance(inp, str):
        return [("user_text", inp)]
    for item in inp or []:
        if not isinstance(item, dict):
            continue
        typ = item.get("type")
        if typ == "function_call_output" or typ == "custom_tool_call_output":
            events.append(("tool_result", ""))
        elif item.get("role") == "user" and typ in (None, "message"):
            content = item.get("content")
            if isinstance(content, str):
                events.append(("user_text", content))
                continue
            for part in content or []:
                if isinstance(part, dict) and part.get("type") in ("input_text", "text"):
                    events.append(("user_text", str(part.get("text") or "")))
    return events


def _marker_and_tool_state(events: list[tuple[str, str]]) -> tuple[str | None, bool]:
    """(last marker, whether a tool result follows the event that carried it)."""
    marker = None
    marker_pos = -1
    for i, (kind, text) in enumerate(events):
        if kind == "user_text":
            m = find_marker([text])
            if m is not None:
                marker, marker_pos = m, i
    tool_after = any(kind == "tool_result" for kind, _ in events[marker_pos + 1 :])
    return marker, tool_after


# User texts Claude Code adds on its own: context reminders, and the prompt-suggestion side
# request it sends after some turns (it carries the conversation, so the marker).
_AGENT_OWN_TEXT_PREFIXES = ("<system-reminder>", "[SUGGESTION MODE")


def _texts_after_marker(events: list[tuple[str, str]]) -> list[str]:
    """User texts after the last marker-bearing one, while the reply to it was cut short (never
    reached MOCK_TEXT): what a steer injected into the running turn. After a finished reply
    such texts are a later prompt, a turn of its own: none is returned."""
    marker_pos = -1
    for i, (kind, text) in enumerate(events):
        if kind == "user_text" and find_marker([text]) is not None:
            marker_pos = i
    after = events[marker_pos + 1 :]
    if any(kind == "assistant_text" and MOCK_TEXT in text for kind, text in after):
        return []
    return [
        text
        for kind, text in after
        if kind == "user_text" and not text.lstrip().startswith(_AGENT_OWN_TEXT_PREFIXES)
    ]


MOCK_TITLE = "Mock session title"


def _fill_schema(schema: Any, key: str = "", depth: int = 0) -> Any:
    """A small value satisfying a simple JSON schema (structured-output side requests)."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    typ = schema.get("type")
    if isinstance(typ, list):
        typ = next((t for t in typ if t != "null"), "null")
    if typ == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _fill_schema(v, k, depth + 1) for k, v in props.items()}
    if typ == "array":
        return []
    if typ == "string":
        return MOCK_TITLE if key == "title" else "mock"
    if typ == "boolean":
        return False
    if typ in ("integer", "number"):
        return 0
    return None


def _structured_text(schema: Any) -> str:
    return json.dumps(_fill_schema(schema))


def _anthropic_json_schema(body: dict) -> Any:
    fmt = (body.get("output_config") or {}).get("format") or body.get("output_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return fmt.get("schema") or {}
    return None


def _openai_json_schema(body: dict) -> Any:
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return fmt.get("schema") or {}
    return None


def _split_text(text: str, parts: int = 3) -> list[str]:
    words = text.split(" ")
    if len(words) <= 1:
        return [text]
    size = max(1, -(-len(words) // parts))
    chunks = []
    for i in range(0, len(words), size):
        piece = " ".join(words[i : i + size])
        if i + size < len(words):
            piece += " "
        chunks.append(piece)
    return chunks


# --------------------------------------------------------------------------------------------
# Gemini API (gemini-cli) and OpenAI Chat Completions (opencode)
# --------------------------------------------------------------------------------------------
# Kept apart from the Anthropic/Responses code above: a mixin of the handler, with its own
# conversation parsing. Shapes are those gemini-cli 0.61.0 and opencode 1.18.33 (through
# @ai-sdk/openai-compatible) read; see tests/fakes/REAL_AGENTS_NOTES.md.

GEMINI_MODEL = "gemini-mock"

_GEMINI_PATH_RE = re.compile(r"/models/([^/:]+):([A-Za-z]+)$")
_GEMINI_METHODS = {
    "streamGenerateContent": "stream_generate",
    "generateContent": "generate",
    "countTokens": "count_tokens",
    "embedContent": "embed",
}


def _gemini_endpoint(path: str) -> str | None:
    m = _GEMINI_PATH_RE.search(path)
    return _GEMINI_METHODS.get(m.group(2)) if m else None


def _gemini_model(path: str) -> str | None:
    m = _GEMINI_PATH_RE.search(path)
    return m.group(1) if m else None


def _gemini_status_error(code: int, message: str, status: str) -> dict:
    return {"error": {"code": code, "message": message, "status": status}}


GEMINI_ERRORS: dict[str, tuple[int, dict]] = {
    "SCN_E429": (
        429,
        _gemini_status_error(
            429,
            "Resource has been exhausted (e.g. check quota). (mock)",
            "RESOURCE_EXHAUSTED",
        ),
    ),
    "SCN_QUOTA": (
        429,
        _gemini_status_error(
            429,
            "You exceeded your current quota, please check your plan and billing details. (mock)",
            "RESOURCE_EXHAUSTED",
        ),
    ),
    "SCN_E500": (500, _gemini_status_error(500, "Internal error encountered.", "INTERNAL")),
    "SCN_E401": (
        401,
        _gemini_status_error(
            401, "API key not valid. Please pass a valid API key.", "UNAUTHENTICATED"
        ),
    ),
}

#: The OpenAI errors answered on /chat/completions are those of the Responses API above.
OPENAI_CHAT_ERRORS = OPENAI_ERRORS


def _gemini_events(body: dict) -> list[tuple[str, str]]:
    """Flatten Gemini ``contents`` to [("user_text", text) | ("tool_result", "")]."""
    events: list[tuple[str, str]] = []
    for content in body.get("contents") or []:
        if not isinstance(content, dict) or content.get("role", "user") != "user":
            continue
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                events.append(("user_text", part["text"]))
            elif "functionResponse" in part:
                events.append(("tool_result", ""))
    return events


def _gemini_tool_names(body: dict) -> list[str]:
    names: list[str] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        for decl in tool.get("functionDeclarations") or []:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                names.append(decl["name"])
    return names


def _lower_schema(schema: Any) -> Any:
    """Gemini's OpenAPI-style schemas spell types in capitals (``OBJECT``); _fill_schema wants
    JSON Schema spelling."""
    if isinstance(schema, dict):
        out = {k: _lower_schema(v) for k, v in schema.items()}
        if isinstance(out.get("type"), str):
            out["type"] = out["type"].lower()
        return out
    if isinstance(schema, list):
        return [_lower_schema(v) for v in schema]
    return schema


def _gemini_json_schema(body: dict) -> Any:
    cfg = body.get("generationConfig") or {}
    if not isinstance(cfg, dict):
        return None
    schema = cfg.get("responseJsonSchema") or cfg.get("responseSchema")
    if schema is None and cfg.get("responseMimeType") == "application/json":
        schema = {}
    return _lower_schema(schema) if schema is not None else None


def _chat_events(body: dict) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        if msg.get("role") == "tool":
            events.append(("tool_result", ""))
        elif msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                events.append(("user_text", content))
                continue
            for part in content or []:
                if isinstance(part, dict) and part.get("type") == "text":
                    events.append(("user_text", str(part.get("text") or "")))
    return events


def _chat_tool_names(body: dict) -> list[str]:
    names = []
    for t in body.get("tools") or []:
        if isinstance(t, dict):
            name = (t.get("function") or {}).get("name") or t.get("name")
            if isinstance(name, str):
                names.append(name)
    return names


def _chat_json_schema(body: dict) -> Any:
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema") or {}
    return None


class _GeminiAndChatMixin:
    """Handlers for the Gemini API and OpenAI Chat Completions; mixed into ``_Handler``."""

    mock: MockModelServer
    wfile: Any
    close_connection: bool

    # provided by _Handler
    _send_json: Callable[..., None]
    _start_sse: Callable[..., None]
    _end_sse: Callable[[], None]
    _stream: Callable[..., None]
    _slow_sleep: Callable[[], None]
    _choose: Callable[..., str]

    def _sse_data(self, data: dict | str) -> None:
        """One ``data:`` event without an ``event:`` line (Gemini and Chat Completions style)."""
        if self.mock._stopping.is_set():
            raise _ClientGone()
        text = data if isinstance(data, str) else json.dumps(data)
        payload = f"data: {text}\r\n\r\n".encode()
        try:
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError) as e:
            raise _ClientGone() from e

    def _text_pieces(self, effect: str) -> Iterable[str]:
        """The streamed text of a text-like effect (slow ticks as they are produced)."""
        if effect == "SCN_SLOW":
            n = max(1, int(self.mock.slow_duration / max(self.mock.slow_interval, 0.001)))
            for i in range(n):
                yield f"{MOCK_SLOW_PREFIX} {i + 1} "
                self._slow_sleep()
        text = MOCK_TOOL_DONE_TEXT if effect == "TOOL_DONE" else MOCK_TEXT
        yield from _split_text(text)

    # ---- Gemini ---------------------------------------------------------------------------

    def _gemini(self, rec: RecordedRequest, body: dict) -> None:
        if rec.endpoint == "count_tokens":
            self._send_json(rec, 200, {"totalTokens": 42}, "count_tokens")
            return
        if rec.endpoint == "embed":
            self._send_json(rec, 200, {"embedding": {"values": [0.0] * 8}}, "embed")
            return
        schema = _gemini_json_schema(body)
        effect = self._choose(rec, _gemini_events(body), schema)
        if effect in GEMINI_ERRORS:
            status, obj = GEMINI_ERRORS[effect]
            self._send_json(rec, status, obj, f"error_{status}")
            return
        usage = {"promptTokenCount": 12, "candidatesTokenCount": 9, "totalTokenCount": 21}
        model_version = rec.model or GEMINI_MODEL

        def chunk(parts: list[dict], finish: str | None) -> dict:
            cand: dict = {"content": {"role": "model", "parts": parts}, "index": 0}
            if finish is not None:
                cand["finishReason"] = finish
            out: dict = {"candidates": [cand], "modelVersion": model_version}
            out["responseId"] = "resp_mock"
            if finish is not None:
                out["usageMetadata"] = usage
            return out

        if effect == "STRUCTURED":
            parts, label = [{"text": _structured_text(schema)}], "structured"
        elif effect == "SCN_TOOL":
            parts, label = [{"functionCall": self._gemini_tool_call(body)}], "function_call"
        elif effect == "SCN_REFUSAL":
            parts, label = [], "refusal"
        else:
            parts, label = [], {"SCN_SLOW": "slow"}.get(effect, "text")

        if not rec.stream:
            if label in ("text", "slow"):
                parts = [{"text": MOCK_TOOL_DONE_TEXT if effect == "TOOL_DONE" else MOCK_TEXT}]
            finish = "SAFETY" if effect == "SCN_REFUSAL" else "STOP"
            self._send_json(rec, 200, chunk(parts, finish), label)
            return

        def body_fn() -> None:
            if effect == "SCN_REFUSAL":
                self._sse_data(chunk([], "SAFETY"))
            elif parts:
                self._sse_data(chunk(parts, "STOP"))
            else:
                pieces = list(self._text_pieces(effect)) if effect != "SCN_SLOW" else None
                if pieces is None:
                    for piece in self._text_pieces(effect):
                        self._sse_data(chunk([{"text": piece}], None))
                    self._sse_data(chunk([{"text": ""}], "STOP"))
                else:
                    for i, piece in enumerate(pieces):
                        last = i == len(pieces) - 1
                        self._sse_data(chunk([{"text": piece}], "STOP" if last else None))

        self._stream(rec, label, body_fn)

    def _gemini_tool_call(self, body: dict) -> dict:
        names = _gemini_tool_names(body)
        if "run_shell_command" in names or not names:
            return {
                "name": "run_shell_command",
                "args": {"command": MOCK_TOOL_COMMAND, "description": MOCK_TOOL_DESCRIPTION},
            }
        return {"name": names[0], "args": {}}

    # ---- OpenAI Chat Completions -----------------------------------------------------------

    def _openai_chat(self, rec: RecordedRequest, body: dict) -> None:
        schema = _chat_json_schema(body)
        effect = self._choose(rec, _chat_events(body), schema)
        if effect in OPENAI_CHAT_ERRORS:
            status, obj = OPENAI_CHAT_ERRORS[effect]
            self._send_json(rec, status, obj, f"error_{status}")
            return
        model = rec.model or OPENAI_MODEL
        chat_id = self.mock._new_id("chatcmpl")
        created = int(time.time())
        usage = {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}
        tool_call = self._chat_tool_call(body) if effect == "SCN_TOOL" else None
        label = "tool_calls" if tool_call else {"SCN_SLOW": "slow"}.get(effect, "text")
        if effect == "STRUCTURED":
            label = "structured"

        def full_text() -> str:
            if effect == "STRUCTURED":
                return _structured_text(schema)
            if effect == "SCN_REFUSAL":
                return MOCK_REFUSAL_TEXT
            return MOCK_TOOL_DONE_TEXT if effect == "TOOL_DONE" else MOCK_TEXT

        if not rec.stream:
            message: dict = {"role": "assistant", "content": None if tool_call else full_text()}
            if tool_call:
                message["tool_calls"] = [tool_call]
            obj = {
                "id": chat_id,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if tool_call else "stop",
                    }
                ],
                "usage": usage,
            }
            self._send_json(rec, 200, obj, label)
            return

        def chunk(delta: dict, finish: str | None) -> dict:
            return {
                "id": chat_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        def body_fn() -> None:
            self._sse_data(chunk({"role": "assistant", "content": ""}, None))
            if tool_call:
                self._sse_data(chunk({"tool_calls": [{"index": 0, **tool_call}]}, None))
                self._sse_data(chunk({}, "tool_calls"))
            else:
                if effect in ("STRUCTURED", "SCN_REFUSAL"):
                    pieces: Iterable[str] = [full_text()]
                else:
                    pieces = self._text_pieces(effect)
                for piece in pieces:
                    self._sse_data(chunk({"content": piece}, None))
                self._sse_data(chunk({}, "stop"))
            include_usage = (body.get("stream_options") or {}).get("include_usage")
            if include_usage:
                usage_chunk = chunk({}, None)
                usage_chunk["choices"] = []
                usage_chunk["usage"] = usage
                self._sse_data(usage_chunk)
            self._sse_data("[DONE]")

        self._stream(rec, label, body_fn)

    def _chat_tool_call(self, body: dict) -> dict:
        names = _chat_tool_names(body)
        # opencode and Copilot CLI call their shell tool `bash`, Qwen Code `run_shell_command`
        shell = next((n for n in ("bash", "run_shell_command") if n in names), None)
        if shell is not None or not names:
            name = shell or "bash"
            args = {"command": MOCK_TOOL_COMMAND, "description": MOCK_TOOL_DESCRIPTION}
        else:
            name, args = names[0], {}
        return {
            "id": self.mock._new_id("call"),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)},
        }


# --------------------------------------------------------------------------------------------
# Handler
# --------------------------------------------------------------------------------------------


class _Handler(_GeminiAndChatMixin, BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "SwitchboardMockModel/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        return

    # ---- plumbing -------------------------------------------------------------------------

    @property
    def mock(self) -> MockModelServer:
        return self.server.mock

    def _read_body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            data = bytearray()
            for _ in range(100000):  # bounded
                line = self.rfile.readline(65537)
                if not line:
                    break
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline(65537)  # trailer end
                    break
                data += self.rfile.read(size)
                self.rfile.readline(65537)
            raw = bytes(data)
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
        enc = (self.headers.get("Content-Encoding") or "").lower()
        try:
            if enc == "gzip":
                raw = gzip.decompress(raw)
            elif enc == "deflate":
                raw = zlib.decompress(raw)
        except Exception:
            pass
        return raw

    def _send_json(
        self,
        rec: RecordedRequest,
        status: int,
        obj: Any,
        label: str,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(obj).encode()
        self.mock._update(rec, status=status, response=label)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("request-id", "req_mock")
            self.send_header("x-request-id", "req_mock")
            for k, v in (extra_headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.mock._update(rec, disconnected=True)
            self.close_connection = True

    def _start_sse(self, rec: RecordedRequest, label: str) -> None:
        self.mock._update(rec, status=200, response=label)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", "req_mock")
        self.send_header("x-request-id", "req_mock")
        self.end_headers()

    def _sse(self, event: str, data: dict) -> None:
        if self.mock._stopping.is_set():
            raise _ClientGone()
        payload = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
        try:
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError) as e:
            raise _ClientGone() from e

    def _end_sse(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError) as e:
            raise _ClientGone() from e

    def _stream(self, rec: RecordedRequest, label: str, body: Callable[[], None]) -> None:
        try:
            self._start_sse(rec, label)
            body()
            self._end_sse()
        except _ClientGone:
            self.mock._update(rec, disconnected=True)
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.mock._update(rec, disconnected=True)
            self.close_connection = True

    def _slow_sleep(self) -> None:
        """Sleep one slow interval; raise _ClientGone when the server stops or the peer left."""
        if self.mock._stopping.wait(self.mock.slow_interval):
            raise _ClientGone()

    def _new_record(self, method: str) -> tuple[RecordedRequest, Any]:
        parts = urlsplit(self.path)
        path = parts.path.rstrip("/") or "/"
        raw = self._read_body() if method in ("POST", "PUT", "PATCH") else b""
        body = None
        if raw:
            try:
                body = json.loads(raw.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        api, endpoint = None, "other"
        gemini_endpoint = _gemini_endpoint(path)
        if gemini_endpoint is not None:
            api, endpoint = "gemini", gemini_endpoint
        elif path.endswith("/chat/completions"):
            api, endpoint = "openai", "chat_completions"
        elif path.endswith("/messages/count_tokens"):
            api, endpoint = "anthropic", "count_tokens"
        elif path.endswith("/messages"):
            api, endpoint = "anthropic", "messages"
        elif path.endswith("/responses"):
            api, endpoint = "openai", "responses"
        elif path.endswith("/models") or "/models/" in path:
            endpoint = "models"
            anthropic_like = "anthropic-version" in headers or "x-api-key" in headers
            api = "anthropic" if anthropic_like else "openai"
        rec = RecordedRequest(
            seq=0,
            time=time.monotonic(),
            method=method,
            path=path,
            query=parse_qs(parts.query),
            headers=headers,
            body=body,
            api=api,
            endpoint=endpoint,
        )
        if isinstance(body, dict):
            rec.stream = bool(body.get("stream"))
            rec.has_tools = bool(body.get("tools"))
            rec.tool_names = _offered_tool_names(body)
            rec.model = body.get("model") if isinstance(body.get("model"), str) else None
        if api == "gemini":
            rec.stream = endpoint == "stream_generate"
            rec.model = _gemini_model(path)
        return self.mock._record(rec), body

    # ---- verbs ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        rec, _ = self._new_record("GET")
        try:
            if rec.endpoint == "models":
                self._models(rec)
            else:
                self._not_found(rec)
        finally:
            self.mock._finish(rec)

    def do_POST(self) -> None:
        rec, body = self._new_record("POST")
        try:
            api_endpoints = ("messages", "responses", "count_tokens", "chat_completions")
            if not isinstance(body, dict) and rec.endpoint in api_endpoints:
                if rec.api == "anthropic":
                    self._send_json(
                        rec,
                        400,
                        _anthropic_error(
                            "invalid_request_error", "mock: request body is not a JSON object"
                        ),
                        "bad_json",
                    )
                else:
                    self._send_json(
                        rec,
                        400,
                        _openai_error(
                            "mock: request body is not a JSON object", "invalid_request_error", None
                        ),
                        "bad_json",
                    )
            elif rec.api == "gemini":
                self._gemini(rec, body if isinstance(body, dict) else {})
            elif rec.endpoint == "chat_completions":
                self._openai_chat(rec, body)
            elif rec.endpoint == "messages":
                self._anthropic_messages(rec, body)
            elif rec.endpoint == "count_tokens":
                self._send_json(rec, 200, {"input_tokens": 42}, "count_tokens")
            elif rec.endpoint == "responses":
                self._openai_responses(rec, body)
            else:
                self._not_found(rec)
        finally:
            self.mock._finish(rec)

    def _not_found(self, rec: RecordedRequest) -> None:
        if rec.api == "openai":
            obj = _openai_error(f"mock: unknown path {rec.path}", "invalid_request_error", None)
        else:
            obj = _anthropic_error("not_found_error", f"mock: unknown path {rec.path}")
        self._send_json(rec, 404, obj, "not_found")

    def _models(self, rec: RecordedRequest) -> None:
        if rec.api == "anthropic":
            models = [
                {
                    "type": "model",
                    "id": ANTHROPIC_MODEL,
                    "display_name": "Claude Mock",
                    "created_at": "2025-01-01T00:00:00Z",
                },
            ]
            obj: dict = {
                "data": models,
                "has_more": False,
                "first_id": models[0]["id"],
                "last_id": models[-1]["id"],
            }
        else:
            obj = {
                "object": "list",
                "data": [
                    {
                        "id": OPENAI_MODEL,
                        "object": "model",
                        "created": 1735689600,
                        "owned_by": "mock",
                    }
                ],
                "models": [],
            }
        self._send_json(rec, 200, obj, "models")

    # ---- scenario choice ------------------------------------------------------------------

    def _choose(self, rec: RecordedRequest, events: list[tuple[str, str]], schema: Any) -> str:
        """Effect to produce: a scenario marker, "TOOL_DONE" or "STRUCTURED".

        Side requests get no scenario: tool-less ones (titles, suggestions) get plain text, and any
        request asking for a JSON-schema output (titles, codex's approval reviewer) gets JSON.
        """
        marker, tool_after = _marker_and_tool_state(events)
        scenario = None
        if rec.has_tools and schema is None:
            scenario = marker or DEFAULT_SCENARIO
        if scenario == "SCN_E429_ONCE":
            effect = "SCN_TEXT" if self.mock._next_once(rec.api or "") > 0 else "SCN_E429"
        else:
            effect = scenario or "SCN_TEXT"
        self.mock._update(
            rec,
            marker=marker,
            scenario=scenario,
            tool_result_seen=tool_after,
            user_texts=[text for kind, text in events if kind == "user_text"],
            tool_results=[text for kind, text in events if kind == "tool_result"],
            injected_texts=_texts_after_marker(events) if marker is not None else [],
        )
        if schema is not None:
            return "STRUCTURED"
        if effect == "SCN_TOOL" and tool_after:
            return "TOOL_DONE"
        if effect == "SCN_ASK" and tool_after:
            return "ASK_DONE"
        if effect == "SCN_STEER" and _texts_after_marker(events):
            return "STEER_DONE"
        return effect

    # ---- Anthropic ------------------------------------------------------------------------

    def _anthropic_messages(self, rec: RecordedRequest, body: dict) -> None:
        schema = _anthropic_json_schema(body)
        effect = self._choose(rec, _anthropic_events(body), schema)
        if effect in ANTHROPIC_ERRORS:
            status, obj = ANTHROPIC_ERRORS[effect]
            self._send_json(rec, status, obj, f"error_{status}")
            return
        model = rec.model or ANTHROPIC_MODEL
        msg_id = self.mock._new_id("msg")
        if effect == "SCN_TOOL":
            tool_id = self.mock._new_id("toolu")
            tool_name = "Bash"
            names = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
            if "Bash" not in names and names:
                tool_name = str(names[0])
            tool_input = {"command": MOCK_TOOL_COMMAND, "description": MOCK_TOOL_DESCRIPTION}
            blocks: list[dict] = [
                {"type": "tool_use", "id": tool_id, "name": tool_name, "input": tool_input}
            ]
            stop, label = "tool_use", "tool_use"
        elif effect == "SCN_REFUSAL":
            blocks, stop, label = [], "refusal", "refusal"
        elif effect in ("SCN_SLOW", "SCN_STEER"):
            blocks, stop, label = [{"type": "text", "text": None}], "end_turn", "slow"
        elif effect == "STEER_DONE":
            seen = " | ".join(rec.injected_texts)
            blocks = [{"type": "text", "text": f"{MOCK_STEER_SEEN} {seen}"}]
            stop, label = "end_turn", "steer_seen"
        elif effect == "SCN_ASK":
            if MOCK_ASK_TOOL in rec.tool_names:
                tool_id = self.mock._new_id("toolu")
                blocks = [
                    {
                        "type": "tool_use",
                        "id": tool_id,
                        "name": MOCK_ASK_TOOL,
                        "input": MOCK_ASK_INPUT,
                    }
                ]
                stop, label = "tool_use", "ask"
            else:
                blocks = [{"type": "text", "text": MOCK_ASK_UNAVAILABLE}]
                stop, label = "end_turn", "ask_unavailable"
        elif effect == "ASK_DONE":
            answer = rec.tool_results[-1] if rec.tool_results else ""
            blocks = [{"type": "text", "text": f"{MOCK_ASK_ANSWERED} {answer}"}]
            stop, label = "end_turn", "ask_answered"
        elif effect == "TOOL_DONE":
            blocks = [{"type": "text", "text": MOCK_TOOL_DONE_TEXT}]
            stop, label = "end_turn", "text"
        elif effect == "STRUCTURED":
            blocks = [{"type": "text", "text": _structured_text(schema)}]
            stop, label = "end_turn", "structured"
        else:
            blocks, stop, label = [{"type": "text", "text": MOCK_TEXT}], "end_turn", "text"

        if not rec.stream:
            if effect in ("SCN_SLOW", "SCN_STEER"):  # no slowness without streaming
                blocks = [{"type": "text", "text": MOCK_TEXT}]
            obj = {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 12,
                    "output_tokens": 9,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            }
            self._send_json(rec, 200, obj, label)
            return

        def body_fn() -> None:
            self._sse(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {
                            "input_tokens": 12,
                            "output_tokens": 1,
                            "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 0,
                        },
                    },
                },
            )
            out_tokens = 1
            for idx, block in enumerate(blocks):
                if block["type"] == "text":
                    self._sse(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": idx,
                            "content_block": {"type": "text", "text": ""},
                        },
                    )
                    if block["text"] is None:  # slow
                        out_tokens += self._anthropic_slow_deltas(idx)
                    else:
                        for piece in _split_text(block["text"]):
                            self._sse(
                                "content_block_delta",
                                {
                                    "type": "content_block_delta",
                                    "index": idx,
                                    "delta": {"type": "text_delta", "text": piece},
                                },
                            )
                            out_tokens += 1
                    self._sse("content_block_stop", {"type": "content_block_stop", "index": idx})
                elif block["type"] == "tool_use":
                    self._sse(
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": idx,
                            "content_block": {
                                "type": "tool_use",
                                "id": block["id"],
                                "name": block["name"],
                                "input": {},
                            },
                        },
                    )
                    self._sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": idx,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": json.dumps(block["input"]),
                            },
                        },
                    )
                    self._sse("content_block_stop", {"type": "content_block_stop", "index": idx})
                    out_tokens += 5
            self._sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": out_tokens},
                },
            )
            self._sse("message_stop", {"type": "message_stop"})

        self._stream(rec, label, body_fn)

    def _anthropic_slow_deltas(self, idx: int) -> int:
        n = max(1, int(self.mock.slow_duration / max(self.mock.slow_interval, 0.001)))
        for i in range(n):
            self._sse(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": idx,
                    "delta": {"type": "text_delta", "text": f"{MOCK_SLOW_PREFIX} {i + 1} "},
                },
            )
            self._slow_sleep()
        self._sse(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": idx,
                "delta": {"type": "text_delta", "text": MOCK_TEXT},
            },
        )
        return n + 1

    # ---- OpenAI Responses -----------------------------------------------------------------

    def _openai_responses(self, rec: RecordedRequest, body: dict) -> None:
        schema = _openai_json_schema(body)
        effect = self._choose(rec, _openai_events(body), schema)
        if effect in OPENAI_ERRORS:
            status, obj = OPENAI_ERRORS[effect]
            self._send_json(rec, status, obj, f"error_{status}")
            return
        model = rec.model or OPENAI_MODEL
        resp_id = self.mock._new_id("resp")
        usage = {
            "input_tokens": 12,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 21,
        }

        def response_obj(status: str, output: list) -> dict:
            obj = {
                "id": resp_id,
                "object": "response",
                "created_at": int(time.time()),
                "status": status,
                "model": model,
                "output": output,
            }
            if status == "completed":
                obj["usage"] = usage
            return obj

        if effect == "SCN_TOOL":
            item = self._openai_tool_item(body)
            label = "function_call"
        else:
            item = None
            label = {"SCN_REFUSAL": "refusal", "SCN_SLOW": "slow"}.get(effect, "text")

        if effect == "TOOL_DONE":
            text = MOCK_TOOL_DONE_TEXT
        elif effect == "STRUCTURED":
            text = _structured_text(schema)
            label = "structured"
        else:
            text = MOCK_TEXT

        if not rec.stream:
            if item is not None:
                output = [item]
            elif effect == "SCN_REFUSAL":
                output = [self._openai_message(self.mock._new_id("msg"), None, refusal=True)]
            else:
                output = [self._openai_message(self.mock._new_id("msg"), text)]
            self._send_json(rec, 200, response_obj("completed", output), label)
            return

        seq = [0]

        def ev(event: str, data: dict) -> None:
            data = {"type": event, "sequence_number": seq[0], **data}
            seq[0] += 1
            self._sse(event, data)

        def body_fn() -> None:
            ev("response.created", {"response": response_obj("in_progress", [])})
            ev("response.in_progress", {"response": response_obj("in_progress", [])})
            if item is not None:
                ev("response.output_item.done", {"output_index": 0, "item": item})
                ev("response.completed", {"response": response_obj("completed", [item])})
                return
            msg_id = self.mock._new_id("msg")
            ev(
                "response.output_item.added",
                {
                    "output_index": 0,
                    "item": {
                        "type": "message",
                        "id": msg_id,
                        "role": "assistant",
                        "status": "in_progress",
                        "content": [],
                    },
                },
            )
            if effect == "SCN_REFUSAL":
                ev(
                    "response.content_part.added",
                    {
                        "item_id": msg_id,
                        "output_index": 0,
                        "content_index": 0,
                        "part": {"type": "refusal", "refusal": ""},
                    },
                )
                ev(
                    "response.refusal.delta",
                    {
                        "item_id": msg_id,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": MOCK_REFUSAL_TEXT,
                    },
                )
                ev(
                    "response.refusal.done",
                    {
                        "item_id": msg_id,
                        "output_index": 0,
                        "content_index": 0,
                        "refusal": MOCK_REFUSAL_TEXT,
                    },
                )
                done_item = self._openai_message(msg_id, None, refusal=True)
            else:
                ev(
                    "response.content_part.added",
                    {
                        "item_id": msg_id,
                        "output_index": 0,
                        "content_index": 0,
                        "part": {"type": "output_text", "text": "", "annotations": []},
                    },
                )
                full = ""
                if effect == "SCN_SLOW":
                    n = max(1, int(self.mock.slow_duration / max(self.mock.slow_interval, 0.001)))
                    for i in range(n):
                        piece = f"{MOCK_SLOW_PREFIX} {i + 1} "
                        full += piece
                        ev(
                            "response.output_text.delta",
                            {
                                "item_id": msg_id,
                                "output_index": 0,
                                "content_index": 0,
                                "delta": piece,
                            },
                        )
                        self._slow_sleep()
                pieces = _split_text(text)
                for piece in pieces:
                    full += piece
                    ev(
                        "response.output_text.delta",
                        {"item_id": msg_id, "output_index": 0, "content_index": 0, "delta": piece},
                    )
                ev(
                    "response.output_text.done",
                    {"item_id": msg_id, "output_index": 0, "content_index": 0, "text": full},
                )
                done_item = self._openai_message(msg_id, full)
            ev(
                "response.content_part.done",
                {
                    "item_id": msg_id,
                    "output_index": 0,
                    "content_index": 0,
                    "part": done_item["content"][0],
                },
            )
            ev("response.output_item.done", {"output_index": 0, "item": done_item})
            ev("response.completed", {"response": response_obj("completed", [done_item])})

        self._stream(rec, label, body_fn)

    @staticmethod
    def _openai_message(msg_id: str, text: str | None, refusal: bool = False) -> dict:
        if refusal:
            content = [{"type": "refusal", "refusal": MOCK_REFUSAL_TEXT}]
        else:
            content = [{"type": "output_text", "text": text or "", "annotations": []}]
        return {
            "type": "message",
            "id": msg_id,
            "role": "assistant",
            "status": "completed",
            "content": content,
        }

    def _openai_tool_item(self, body: dict) -> dict:
        names = []
        for t in body.get("tools") or []:
            if isinstance(t, dict):
                names.append(t.get("name") or (t.get("function") or {}).get("name"))
        escalate = {
            "sandbox_permissions": "require_escalated",
            "justification": MOCK_TOOL_JUSTIFICATION,
        }
        if "exec_command" in names or not names:
            name, args = "exec_command", {"cmd": MOCK_TOOL_COMMAND, **escalate}
        elif "shell_command" in names:
            name, args = "shell_command", {"command": MOCK_TOOL_COMMAND, **escalate}
        elif "shell" in names:
            name, args = "shell", {"command": ["bash", "-lc", MOCK_TOOL_COMMAND], **escalate}
        else:
            name, args = "exec_command", {"cmd": MOCK_TOOL_COMMAND, **escalate}
        return {
            "type": "function_call",
            "id": self.mock._new_id("fc"),
            "call_id": self.mock._new_id("call"),
            "name": name,
            "arguments": json.dumps(args),
            "status": "completed",
        }


# --------------------------------------------------------------------------------------------
# Script
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = ephemeral)")
    ap.add_argument("--slow-interval", type=float, default=0.2)
    ap.add_argument("--slow-duration", type=float, default=30.0)
    ap.add_argument("--log", action="store_true", help="one JSON line per request on stderr")
    args = ap.parse_args(argv)

    def log(rec: RecordedRequest) -> None:
        d = rec.to_dict()
        d.pop("body", None)
        d.pop("headers", None)
        print(json.dumps(d), file=sys.stderr, flush=True)

    server = MockModelServer(
        args.port,
        slow_interval=args.slow_interval,
        slow_duration=args.slow_duration,
        on_request=log if args.log else None,
    )
    server.start()
    print(server.port, flush=True)
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
