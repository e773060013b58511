"""A malformed platform update from someone holding the secret (issue 21, "faults that still
tell"): Telegram's webhook and Slack's HTTP mode, each the real adapter under a serving BotApp on
its fake platform, answer 400 with exactly one WARNING line (no traceback, nothing at ERROR) for
each body that is not an update, and go on serving the next good one. The same bodies unsigned
are refused without a word in the log."""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from surfaces.slack.request_shape import problem
from surfaces.telegram.webhook import SECRET_HEADER
from tests.conftest import FakeAgent
from tests.engine_helpers import wait_for
from tests.fakes.slack_api import dm, envelope
from tests.fakes.telegram_api import FakeBotApi, People
from tests.harness.process import free_port
from tests.harness.telegram import ids, serving, telegram_settings
from tests.test_slack import ALICE as SLACK_ALICE
from tests.test_slack import DMS, slack_bot

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

WEBHOOK_SECRET = "the-right-secret_42"
ALICE = People().alice


def warnings_and_worse(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.WARNING]


def assert_one_warning(caplog: pytest.LogCaptureFixture, says: str) -> None:
    records = warnings_and_worse(caplog)
    assert [record.levelname for record in records] == ["WARNING"], [
        record.getMessage() for record in records
    ]
    assert says in records[0].getMessage()
    assert records[0].exc_info is None and "Traceback" not in caplog.text


# ---- Telegram's webhook -------------------------------------------------------------------------


@asynccontextmanager
async def telegram_webhook(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> AsyncIterator[str]:
    """A serving bot in webhook mode; yields the URL Telegram would post to."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram/hook"
    webhook = {
        "allowed_users": ids(ALICE),
        "webhook_url": url,
        "webhook_secret": WEBHOOK_SECRET,
        "webhook_listen": "127.0.0.1",
        "webhook_port": port,
    }
    settings = telegram_settings(tmp_path, fake_agent, api, telegram=webhook)
    async with serving(settings):
        await wait_for(lambda: api.webhook, "the webhook to be set", 20)
        yield url


async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as client, client.post(url, data=body, headers=headers) as r:
        return r.status


TELEGRAM_JUNK = [
    (b"{not json", "it is not JSON"),
    (b"\xff\xfe{}", "it is not JSON"),
    (b"[" * 100_000, "it is not JSON"),
    (b"[1, 2]", "not an object with an update_id"),
    (b'"an update"', "not an object with an update_id"),
    (b'{"message": {}}', "not an object with an update_id"),
    (b'{"update_id": 7, "message": "hello"}', "python-telegram-bot cannot read it"),
    (b'{"update_id": 8, "message": {"chat": 5}}', "python-telegram-bot cannot read it"),
    (b'{"update_id": 9, "callback_query": {"id": 1}}', "python-telegram-bot cannot read it"),
]


async def test_a_malformed_telegram_update_with_the_right_secret_is_a_400_and_one_warning(
    tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeBotApi() as api, telegram_webhook(tmp_path, fake_agent, api) as url:
        caplog.set_level(logging.WARNING)
        signed = {"Content-Type": "application/json", SECRET_HEADER: WEBHOOK_SECRET}
        for body, says in TELEGRAM_JUNK:
            caplog.clear()
            assert await post(url, body, signed) == 400, body[:40]
            assert_one_warning(caplog, says)
            caplog.clear()
            assert await post(url, body, {"Content-Type": "application/json"}) == 401
            assert not warnings_and_worse(caplog)  # without the secret: refused unread
        good = api.take_update(api.dm(ALICE, "still here"))
        assert await post(url, json.dumps(good).encode(), signed) == 200
        await wait_for(lambda: "Echo: still here" in api.chat_text(ALICE.id), "the reply")
    assert fake_agent.prompt_texts() == ["still here"]


# ---- Slack's HTTP mode --------------------------------------------------------------------------


def form(payload: object) -> bytes:
    return b"payload=" + urllib.parse.quote(json.dumps(payload)).encode()


JSON, FORM = "application/json", "application/x-www-form-urlencoded"
EVENT = {"type": "event_callback", "team_id": "T1"}
SLACK_JUNK: list[tuple[bytes, str, str]] = [
    (b"{not json", JSON, "cannot be read as JSON or form data"),
    (b"\xff\xfe", JSON, "cannot be read as JSON or form data"),
    (b"[" * 100_000, JSON, "cannot be read as JSON or form data"),
    (b"payload=notjson", FORM, "cannot be read as JSON or form data"),
    (b"[1, 2]", JSON, "the body is not an object"),
    (form([1]), FORM, "the body is not an object"),
    (json.dumps({**EVENT, "event": []}).encode(), JSON, "event is not an object"),
    (json.dumps({**EVENT, "event": {"type": 5}}).encode(), JSON, "event.type is not a string"),
    (json.dumps({**EVENT, "authorizations": "x"}).encode(), JSON, "authorizations is not a list"),
    (form({"type": "block_actions", "actions": [5]}), FORM, "actions is not a list of objects"),
    (form({"type": "view_submission", "view": "x"}), FORM, "view is not an object"),
]


async def test_a_malformed_slack_request_correctly_signed_is_a_400_and_one_warning(
    tmp_path: Path, fake_agent: FakeAgent, caplog: pytest.LogCaptureFixture
) -> None:
    async with slack_bot(tmp_path, fake_agent, "http") as env:
        assert env.poster is not None
        caplog.set_level(logging.WARNING)
        for body, content_type, says in SLACK_JUNK:
            caplog.clear()
            assert await env.poster.post(body, content_type) == 400, body[:40]
            assert_one_warning(caplog, says)
            caplog.clear()
            assert await env.poster.post(body, content_type, signature="bad") == 401
            assert await env.poster.post(body, content_type, signature="none") == 401
            assert not warnings_and_worse(caplog)  # unsigned: refused unread, and unlogged
        await env.dm(SLACK_ALICE, "still here")
        await env.answered(DMS[SLACK_ALICE], "", "Echo: still here")
    assert fake_agent.prompt_texts() == ["still here"]


def test_what_slack_sends_has_the_shape_the_check_wants() -> None:
    body: dict[str, Any] = envelope(dm(DMS[SLACK_ALICE], SLACK_ALICE, "hi", ts="1.000100"))
    assert problem(body) == ""
    created = {**EVENT, "event": {"type": "channel_created", "channel": {"id": "C1"}}}
    assert problem(created) == ""  # an object where a message has a string
    assert problem({**EVENT, "enterprise": None, "event": {"type": "message", "ts": None}}) == ""
