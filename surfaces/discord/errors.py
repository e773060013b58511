"""discord.py's exceptions -> the surface's (`surfaces.errors`), in two tables, and the start-up
failures that are a setting's fault.

A REST call (`REST`): 429 -> RateLimited (discord.py itself waits out and retries the short 429s
that carry `Via`; what reaches us is a long one, or Cloudflare's without `Via`), a 403 or any
other 4xx -> SendFailed(transient=False), a 5xx or network trouble -> SendFailed(transient=True).
An edit (`EDITS`) differs in one row: a 404 means the message is gone (MessageGone); an upload
(`FILES`) in another: a 413 ("Request entity too large") means the file is (FileRefused).

Start-up (`login_refused`, `gateway_refused`): a rejected token or a missing Message Content
intent is a ConfigError naming the token's setting; a gateway that closes for another reason is a
SendFailed."""

from __future__ import annotations

import aiohttp

from config import ConfigError
from surfaces.discord.sdk import discord
from surfaces.errors import FileRefused, MessageGone, RateLimited, SendFailed, SurfaceError
from surfaces.platform_errors import ErrorMap, retry_after

__all__ = [
    "EDITS",
    "FILES",
    "NETWORK_ERRORS",
    "REST",
    "SDK_FAILURES",
    "TOKEN_SETTING",
    "gateway_refused",
    "login_refused",
    "unreachable",
]

TOKEN_SETTING = "SWITCHBOARD_DISCORD__TOKEN"
# Network trouble on the way to Discord (TimeoutError is an OSError; named for the reader).
NETWORK_ERRORS: tuple[type[Exception], ...] = (aiohttp.ClientError, OSError, TimeoutError)
# Whatever a call to Discord may fail with, for calls whose failure is only logged.
SDK_FAILURES: tuple[type[Exception], ...] = (discord.DiscordException, *NETWORK_ERRORS)
REJECTED_TOKEN = "Discord rejected the token"
GATEWAY_REJECTED_TOKEN = 4004  # the gateway's close code for a token it does not accept


def _http_error(exc: discord.HTTPException) -> SurfaceError:
    if exc.status == 429:  # not retried by discord.py (no `Via`: a Cloudflare limit)
        return RateLimited(retry_after(getattr(exc.response, "headers", None)))
    transient = exc.status >= 500
    return SendFailed(f"Discord {exc.status}: {exc.text or exc}", transient=transient)


def unreachable(exc: Exception) -> SendFailed:
    """Network trouble on the way to Discord: worth another try."""
    return SendFailed(f"cannot reach Discord: {exc!r}", transient=True)


REST = ErrorMap(
    [
        (discord.RateLimited, lambda exc: RateLimited(retry_after(exc.retry_after))),
        (discord.NotFound, lambda exc: SendFailed(f"Discord: {exc.text or exc}", transient=False)),
        (discord.HTTPException, _http_error),
        *((network, unreachable) for network in NETWORK_ERRORS),
    ]
)

EDITS = ErrorMap(
    [(discord.NotFound, lambda exc: MessageGone(f"Discord: {exc.text or exc}")), *REST.rows]
)

PAYLOAD_TOO_LARGE = 413


def _upload_error(exc: discord.HTTPException) -> SurfaceError:
    if exc.status == PAYLOAD_TOO_LARGE:
        return FileRefused("Discord refused the file as too large.")
    return _http_error(exc)


# An upload differs from a message in one row: Discord's 413 means the file is too large.
FILES = ErrorMap(
    [
        row if row[0] is not discord.HTTPException else (discord.HTTPException, _upload_error)
        for row in REST.rows
    ]
)


def login_refused(exc: Exception) -> Exception | None:
    """What a failed log-in becomes: a ConfigError for the token, SendFailed for trouble on the
    way; None for anything else (a bug, raised as it is)."""
    if isinstance(exc, discord.LoginFailure):
        return ConfigError(TOKEN_SETTING, REJECTED_TOKEN)
    if isinstance(exc, (discord.HTTPException, *NETWORK_ERRORS)):
        return SendFailed(f"cannot log in to Discord: {exc!r}", transient=True)
    return None


def gateway_refused(exc: Exception) -> Exception | None:
    """What the end of the gateway connection becomes (discord.py reconnects by itself from
    everything else): None for a failure that is not the gateway's."""
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        return ConfigError(
            TOKEN_SETTING,
            "this bot may not read message content: enable the Message Content intent in "
            "the Discord Developer Portal (Bot, Privileged Gateway Intents)",
        )
    if isinstance(exc, discord.ConnectionClosed):
        if exc.code == GATEWAY_REJECTED_TOKEN:
            return ConfigError(TOKEN_SETTING, REJECTED_TOKEN)
        return SendFailed(
            f"the Discord gateway closed the connection ({exc.code}: {exc.reason})",
            transient=False,
        )
    return None
