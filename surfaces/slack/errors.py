"""slack_sdk's exceptions -> the surface's (`surfaces.errors`), in one table, and the Socket Mode
log records that are only the SDK reconnecting.

A 429 (or `ratelimited`) -> RateLimited(Retry-After); network trouble and Slack's 5xx ->
SendFailed(transient=True); a message that is gone -> MessageGone; any other `ok: false` answer
(`channel_not_found`, `not_in_channel`, ...) -> `Refused`, a SendFailed(transient=False) that keeps
Slack's error code, because the adapter answers some codes itself: a rejected token is a setting
error, and some stream refusals mean "never stream again" or "this stream is over"."""

from __future__ import annotations

import logging
import re

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError

from surfaces.errors import MessageGone, RateLimited, SendFailed, SurfaceError
from surfaces.platform_errors import ErrorMap, retry_after

__all__ = [
    "BAD_TOKEN",
    "NETWORK_ERRORS",
    "NO_STREAMS",
    "WEB_API",
    "Refused",
    "api_error",
    "socket_connection_fault",
    "unreachable",
]

BAD_TOKEN = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired"}
_GONE = {"message_not_found", "cant_update_message", "edit_window_closed"}
_TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}
# chat.startStream answers that mean streams will never work for this app: stop trying them.
NO_STREAMS = {
    "unknown_method",
    "not_allowed_token_type",
    "missing_scope",
    "method_deprecated",
    "feature_not_enabled",
}
# What a request that never reached Slack (or got no answer) raises below slack_sdk.
NETWORK_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


class Refused(SendFailed):
    """Slack answered `ok: false` with `error`; this request will not work as it is."""

    def __init__(self, error: str) -> None:
        super().__init__(f"Slack refused the request: {error}", transient=False)
        self.error = error


def api_error(exc: SlackApiError) -> SurfaceError:
    """What an answer Slack gave (`ok: false`, or an HTTP error status) means for the bot."""
    status = getattr(exc.response, "status_code", 200)
    data = getattr(exc.response, "data", None)
    error = str(data.get("error", "")) if isinstance(data, dict) else ""
    if status == 429 or error == "ratelimited":
        return RateLimited(retry_after(getattr(exc.response, "headers", None)))
    if error in _GONE:
        return MessageGone(error)
    if status >= 500 or error in _TRANSIENT:
        return SendFailed(f"Slack is having trouble ({error or status})", transient=True)
    return Refused(error or f"HTTP {status}")


def _network_error(exc: Exception) -> SurfaceError:
    return SendFailed(f"cannot reach Slack: {exc!r}", transient=True)


WEB_API = ErrorMap(
    [
        (SlackApiError, api_error),  # before SlackClientError, its base
        (
            SlackClientError,
            lambda exc: SendFailed(f"Slack client error: {exc}", transient=False),
        ),
        (aiohttp.ClientError, _network_error),
        (TimeoutError, _network_error),
        (OSError, _network_error),
    ]
)


def unreachable(exc: Exception) -> str | None:
    """Why `auth.test` is worth another try (network trouble, a 429, Slack's 5xx), for
    `retry_start_up`; None for a refusal, which no retry changes."""
    if isinstance(exc, SlackApiError):
        error = api_error(exc)
        if isinstance(error, RateLimited) or (isinstance(error, SendFailed) and error.transient):
            return f"auth.test failed ({error})"
        return None
    if isinstance(exc, NETWORK_ERRORS):
        return f"cannot reach the Web API ({exc!r})"
    return None


# What slack_sdk's Socket Mode client logs from the loops that reconnect by themselves; some
# attempts as errors with a traceback.
_SOCKET_RETRIES = (
    "Failed to connect (error:",
    "Failed to receive or enqueue a message:",
    "Failed to check the current session",
    "Failed to close the old session",
)
_RE_CONNECTION_FAULT = re.compile(
    r"\b(?:Client\w*Error|Server\w*Error|WSServerHandshakeError|Connection\w*Error"
    r"|BrokenPipeError|TimeoutError|OSError)\b"
)


def socket_connection_fault(record: logging.LogRecord, fault: BaseException | None) -> bool:
    """A lost or refused Socket Mode connection, which the client retries; not a bug."""
    if not (isinstance(record.msg, str) and record.msg.startswith(_SOCKET_RETRIES)):
        return False
    if fault is not None:
        return isinstance(fault, OSError | aiohttp.ClientError | TimeoutError)
    return _RE_CONNECTION_FAULT.search(record.msg) is not None
