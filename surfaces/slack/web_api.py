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
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from surfaces.downloads import read_within
from surfaces.errors import FileRefused
from surfaces.live import did_not_answer, one_call
from surfaces.pacing import Pacing
from surfaces.slack.errors import WEB_API

__all__ = ["DEFAULT_API_URL", "FILE_HOST", "WebApi"]

DEFAULT_API_URL = "https://slack.com/api/"
FILE_HOST = "files.slack.com"  # where Slack serves `url_private_download`
_CHUNK = 64 * 1024


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

    async def shielded(
        self,
        channel: str,
        method: Callable[..., Awaitable[AsyncSlackResponse]],
        /,
        **kwargs: Any,
    ) -> AsyncSlackResponse:
        """As `call`, for a live reply's calls: the wait for the pacer may be cancelled, the call
        itself is shielded and bounded (`surfaces.live.one_call`), so that the reply knows what
        the message shows after a cancelled turn; one that did not answer in time is a transient
        SendFailed."""
        response: AsyncSlackResponse | None = None
        async with self._pacing.call(channel):
            with one_call() as call, WEB_API.translated():
                response = await method(**kwargs)
            if call.cancelled_caught or response is None:
                raise did_not_answer()
        return response

    async def unpaced(
        self, method: Callable[..., Awaitable[AsyncSlackResponse]], /, **kwargs: Any
    ) -> AsyncSlackResponse:
        """`method(**kwargs)` translated, outside every channel's pacer: a read (`files.info`)
        that Slack limits by method, not by the channel's posting budget."""
        with WEB_API.translated():
            return await method(**kwargs)

    @property
    def file_origins(self) -> set[tuple[str, str]]:
        """(scheme, host) pairs Slack's private file URLs may have: files.slack.com over HTTPS,
        or for another API base (GovSlack, a test fake) its own host and its `files.` host."""
        if self._api_url == DEFAULT_API_URL:
            return {("https", FILE_HOST)}
        parts = urlsplit(self._api_url)
        return {(parts.scheme, parts.netloc), (parts.scheme, f"files.{parts.netloc}")}

    async def download(self, url: str, limit: int) -> bytes:
        """GET a private file URL with the bot token, at most `limit` bytes. Only a URL on Slack's
        file host is fetched, and no redirect is followed (the token would go with it)."""
        parts = urlsplit(url)
        if (parts.scheme, parts.netloc) not in self.file_origins:
            raise FileRefused("Slack gave a download address that is not its own file host.")
        self.web  # noqa: B018 - makes the session
        assert self._session is not None
        headers = {"Authorization": f"Bearer {self._token}"}
        with WEB_API.translated():
            async with self._session.get(url, headers=headers, allow_redirects=False) as response:
                if response.status != 200:
                    raise FileRefused(
                        f"Slack would not hand over the file (HTTP {response.status}).",
                    )
                if (response.content_length or 0) > limit:
                    raise FileRefused(_too_large(limit), limit=limit)
                chunks = response.content.iter_chunked(_CHUNK)
                return await read_within(chunks, limit, _too_large(limit))

    async def close(self) -> None:
        session, self._session, self._client = self._session, None, None
        if session is not None:
            await session.close()


def _too_large(limit: int) -> str:
    return f"The file is larger than the {limit / 1_000_000:g} MB the bot takes."
