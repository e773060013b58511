"""The Slack harness: the fake Slack (tests/fakes/slack_api.py: Web API, Socket Mode, files) and the
real slack_sdk through our adapter, in either of its receiving modes.

Socket Mode: the fake pushes an envelope over the socket and the app acks it. HTTP mode: the app
listens on a free port and `SignedPoster` posts to it signed as Slack signs. `SlackDelivery` hands
the app an event or a press the same way in both, so one test body covers the two modes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from config.settings import SlackSettings
from tests.engine_helpers import wait_for
from tests.fakes.slack_api import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET, FakeSlack, SignedPoster

Mode = Literal["socket", "http"]
EVENTS_PATH = "/slack/events"


def credentials(mode: str) -> dict[str, str]:
    """The bot token and what `mode` receives with: the app token, or the signing secret."""
    if mode == "socket":
        return {"bot_token": BOT_TOKEN, "app_token": APP_TOKEN}
    return {"bot_token": BOT_TOKEN, "signing_secret": SIGNING_SECRET}


def slack_settings(fake: FakeSlack, mode: str, **access: Any) -> SlackSettings:
    """The adapter's settings on `fake` in `mode`; HTTP mode listens on 127.0.0.1 at any free
    port (port 0, which the settings refuse to a person)."""
    if mode == "socket":
        return SlackSettings(api_url=fake.api_url, **credentials(mode), **access)
    settings = SlackSettings(
        api_url=fake.api_url, listen="127.0.0.1", **credentials(mode), **access
    )
    return settings.model_copy(update={"port": 0})


@dataclass
class SlackDelivery:
    """Slack's side of the wire: an Events API body or an interactivity payload handed to the
    app and acknowledged, by socket envelope (`poster` None) or signed POST."""

    fake: FakeSlack
    poster: SignedPoster | None

    async def deliver(self, body: dict[str, Any], *, retry: int = 0) -> None:
        """Hand Slack's body for one event to the app (a redelivery with `retry`), acked."""
        if self.poster is None:
            envelope_id = await self.fake.push(
                "events_api", body, retry_attempt=retry, retry_reason="timeout" if retry else ""
            )
            await wait_for(lambda: self.fake.acked(envelope_id), "the envelope to be acked")
        else:
            assert await self.poster.event(body, retry_num=retry or None) == 200

    async def press(self, payload: dict[str, Any]) -> None:
        if self.poster is None:
            envelope_id = await self.fake.push("interactive", payload)
            await wait_for(lambda: self.fake.acked(envelope_id), "the press to be acked")
        else:
            assert await self.poster.action(payload) == 200


@asynccontextmanager
async def delivering(fake: FakeSlack, surface: Any, mode: str) -> AsyncIterator[SlackDelivery]:
    """A `SlackDelivery` to a running `surface` (its HTTP port is bound once it runs)."""
    poster = None
    if mode == "http":
        poster = SignedPoster(f"http://127.0.0.1:{surface.bound_port}{EVENTS_PATH}")
    try:
        yield SlackDelivery(fake, poster)
    finally:
        if poster is not None:
            with anyio.CancelScope(shield=True):
                await poster.aclose()


def slack_env(fake: FakeSlack, mode: str, *allowed: str, port: int | None = None) -> dict[str, str]:
    """Slack on `fake` in `mode` for `switchboard run`; `allowed` may chat. HTTP mode listens on
    127.0.0.1, at `port` when given (several replicas set theirs)."""
    env = {
        "SWITCHBOARD_SLACK__BOT_TOKEN": BOT_TOKEN,
        "SWITCHBOARD_SLACK__API_URL": fake.api_url,
        "SWITCHBOARD_SLACK__ALLOWED_USERS": ",".join(allowed),
    }
    if mode == "socket":
        return env | {"SWITCHBOARD_SLACK__APP_TOKEN": APP_TOKEN}
    env |= {
        "SWITCHBOARD_SLACK__SIGNING_SECRET": SIGNING_SECRET,
        "SWITCHBOARD_SLACK__LISTEN": "127.0.0.1",
    }
    if port is not None:
        env["SWITCHBOARD_SLACK__PORT"] = str(port)
    return env
