"""Logging: one JSON object per line on stderr, with credentials redacted from every record.

Redaction is a filter on Switchboard's handler, so it covers every record that reaches it,
whoever logged it (httpx, python-telegram-bot, slack_sdk, aiohttp, discord.py, websockets all
print request URLs and headers at info/debug): the message after its args are merged, the
exception text and the stack. Removed are the configured secret values themselves (and their
long parts, e.g. the half of a Telegram token after the colon; the password of a URL setting such
as a Redis `SWITCHBOARD_STATE`; the dashboard's token digests), token-shaped patterns,
`Authorization`-style header values, and what `acp.redact` knows (URL passwords of any scheme,
hex digests and `sha256=` signatures). A record's `extra` attributes are never written out, so
nothing can leak through them."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO
from urllib.parse import unquote, urlsplit

import stamina
from pydantic import BaseModel, SecretStr

from acp import redact

REDACTED = "[redacted]"

# Which settings are credentials (the agent gets none of them: its environment is an allowlist).
_RE_SECRET_SETTING = re.compile(r"token|secret|key|password", re.IGNORECASE)
# A part of a secret value long enough to be secret by itself; shorter parts (a Telegram bot's
# numeric id) are public and appear in every update.
_MIN_SECRET_PART = 12
_RE_SECRET_SEPARATORS = re.compile(r"[:.]")
_MIN_URL_PASSWORD = 6

_RE_TOKEN_SHAPED = re.compile(
    r"(?<=bot)\d+:[A-Za-z0-9_\-]{20,}"  # Telegram, as in a Bot API URL: /bot<id>:<secret>/getMe
    r"|\b\d{5,}:[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-])"  # a bare Telegram token
    r"|\bxox[a-z]-[A-Za-z0-9\-]+|\bxapp-[A-Za-z0-9\-]+"  # Slack bot/user/app tokens
    # Discord: three base64url parts (user id, timestamp, HMAC)
    r"|\b[A-Za-z0-9_\-]{20,}\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,}"
)
# The value of an Authorization header, in a raw header line or a printed dict of headers.
_RE_AUTH_HEADER = re.compile(
    r"(?i)(\b(?:proxy-)?authorization['\"]?\s*[:=,]\s*['\"]?)(?:(?:bot|bearer|basic|token)\s+)?"
    r"[^\s'\",}\]]+"
)
_RE_AUTH_SCHEME = re.compile(r"\b(Bot|Bearer|bearer)\s+[A-Za-z0-9_\-.=+/]{16,}")


def secret_values(settings: BaseModel) -> list[str]:
    """Every non-empty credential in the settings: any field (at any depth) whose name says
    token, secret, key or password (a string, or the values of a mapping such as the dashboard's
    token digests), and the password of any URL setting (`SWITCHBOARD_STATE=redis://:pw@host`)."""
    return sorted(set(_secret_values(settings)))


def _secret_values(model: BaseModel) -> Iterator[str]:
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, BaseModel):
            yield from _secret_values(value)
        elif isinstance(value, str):
            if value and _RE_SECRET_SETTING.search(name):
                yield value
            yield from _url_password(value)
        elif isinstance(value, dict) and _RE_SECRET_SETTING.search(name):
            yield from (item for item in value.values() if isinstance(item, str) and item)


def _url_password(value: str) -> Iterator[str]:
    """A URL's password as written and decoded. A short one is left to `redact`'s URL rule:
    as a bare word it would take every ordinary word it happens to spell out of the log."""
    if "://" not in value or "@" not in value:
        return
    try:
        password = urlsplit(value).password
    except ValueError:
        return
    if password and len(password) >= _MIN_URL_PASSWORD:
        yield password
        yield unquote(password)


class Redactor:
    """Removes credentials from text: the known values first, then anything shaped like one."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        literals: set[str] = set()
        for secret in secrets:
            if not secret:
                continue
            literals.add(secret)
            literals.update(
                part
                for part in _RE_SECRET_SEPARATORS.split(secret)
                if len(part) >= _MIN_SECRET_PART
            )
        # Longest first, so a whole token is replaced before one of its parts could be.
        ordered = sorted(literals, key=len, reverse=True)
        self._known = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __call__(self, text: str) -> str:
        if self._known is not None:
            text = self._known.sub(REDACTED, text)
        text = _RE_TOKEN_SHAPED.sub(REDACTED, text)
        text = _RE_AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
        text = _RE_AUTH_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
        return redact(text)


class RedactingFilter(logging.Filter):
    """Rewrites each record in place before any formatter sees it: the merged message, the
    exception text and the stack are redacted, and the raw args and exc_info are dropped, so no
    later formatting can bring the originals back."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redact = redactor
        self._formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a third party's bad format string must not lose the record
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = self._redact(message)
        record.args = None
        if record.exc_info:
            record.exc_text = self._formatter.formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = self._redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self._redact(record.stack_info)
        return True


class _JsonLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_text:
            event["exc"] = record.exc_text
        if record.stack_info:
            event["stack"] = record.stack_info
        return json.dumps(event, ensure_ascii=False)


def configure_logging(
    level: str,
    stream: TextIO | None = None,
    secrets: Iterable[str] = (),
    *,
    conversation: bool = False,
) -> None:
    """JSON lines on `stream` (stderr) at `level`, every record redacted of `secrets` and of
    anything token-shaped. With `conversation` (`switchboard chat`, whose terminal is the
    conversation) nothing below `level` is written, not even the audit channel's info lines
    (they are still kept in the state store, for `switchboard audit`)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if conversation:
        handler.setLevel(level.upper())
    handler.addFilter(RedactingFilter(Redactor(secrets)))
    handler.setFormatter(_JsonLineFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    quiet_retry_library()


def quiet_retry_library() -> None:
    """Each of our retries logs its own sentence (and /metrics counts them): stamina's default
    hooks would add a line per retry and a counter in prometheus-client's global registry."""
    stamina.instrumentation.set_on_retry_hooks([])


# ---- the asyncio loop boundary ---------------------------------------------------------------
_CONNECTION_RESETS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
_loop_log = logging.getLogger("switchboard.loop")


def _from_transport_callback(context: dict[str, Any]) -> bool:
    """The loop reported a fault of a transport's own callback (closing, reading), not of a
    task: the Windows Proactor's `_call_connection_lost`, a selector transport's, an SSL
    transport's fatal error. Nobody awaits these; the connection is already going away."""
    if context.get("task") is not None or context.get("future") is not None:
        return False
    if context.get("transport") is not None or context.get("protocol") is not None:
        return True
    handle = context.get("handle")
    where = f"{context.get('message', '')} {handle!r}"
    return "connection_lost" in where or "Transport" in where


def loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """What the loop could not hand to any task. A peer's reset seen by a transport callback is
    routine (one WARNING line); anything else is a bug or a lost task: an ERROR with what is
    known about where it happened and the traceback."""
    exc = context.get("exception")
    message = context.get("message") or "unhandled exception in the event loop"
    if isinstance(exc, _CONNECTION_RESETS) and _from_transport_callback(context):
        _loop_log.warning(
            "a connection was reset while its transport closed (%s: %s)",
            type(exc).__name__,
            exc,
        )
        return
    crumbs = [message]
    for key in ("task", "future", "handle", "transport", "protocol"):
        if context.get(key) is not None:
            crumbs.append(f"{key}={context[key]!r}")
    if exc is not None:
        crumbs.append(f"{type(exc).__name__}: {exc}")
    _loop_log.error("asyncio: %s", "; ".join(crumbs), exc_info=exc)


def install_loop_exception_handler() -> None:
    """Call at the start of each command's anyio-run main, inside the running loop."""
    asyncio.get_running_loop().set_exception_handler(loop_exception_handler)
