"""The Slack Web API client and the one way to call it: paced per channel, failures translated.

Every call for a channel, whoever makes it (a reply, a stopped stream, an approval prompt, an
ephemeral notice), passes the channel's pacer (`surfaces.pacing`), which starts it at least
`min_edit_interval` after the previous one was answered (Slack counts calls as they arrive, so a
slow request must not squeeze the next one closer) and holds them all back after a 429 for its
`Retry-After`; Slack limits posting per channel. The pacer records the 429 itself, so nothing
here penalizes the channel again.

The SDK's own retries are off: a retried `chat.postMessage` could post twice, and the bot
retries what is safe to retry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from surfaces.pacing import Pacing
from surfaces.slack.errors import WEB_API

__all__ = ["DEFAULT_API_URL", "WebApi"]

DEFAULT_API_URL = "https://slack.com/api/"


class WebApi:
    """One bot token's `AsyncWebClient`, made on first use: the bot may send before the surface
    runs (it re-delivers replies a restart cut off) and after it (partial output at shutdown);
    `close` closes it, and the next use makes a new one."""

    def __init__(self, token: str, api_url: str, *, timeout: float, pacing: Pacing) -> None:
        self._token = token
        self._api_url = api_url or DEFAULT_API_URL
        self._timeout = timeout
        self._pacing = pacing
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None

    @property
    def web(self) -> AsyncWebClient:
        if self._client is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout)
            )
            self._client = AsyncWebClient(
                token=self._token,
                base_url=self._api_url,
                session=self._session,
                timeout=int(self._timeout),
                retry_handlers=[],  # never an SDK retry: a re-posted message would show twice
            )
        return self._client

    async def call(
        self,
        channel: str,
        method: Callable[..., Awaitable[AsyncSlackResponse]],
        /,
        **kwargs: Any,
    ) -> AsyncSlackResponse:
        """`method(**kwargs)` (a method of `web`), through `channel`'s pacer, translated."""
        async with self._pacing.call(channel):  # which records a 429 for the channel
            with WEB_API.translated():
                return await method(**kwargs)

    async def close(self) -> None:
        session, self._session, self._client = self._session, None, None
        if session is not None:
            await session.close()
