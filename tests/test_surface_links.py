"""Link buttons (`Choice.url`) on every surface, each adapter against its fake platform: a link
appears as the platform's own link button with its url (Telegram's inline `url` button, a Slack
button with `url`, a Discord link-style button, the dashboard's link entry, the terminal's
"label: url"), its token is never handed back, and a url that is not http(s) (`javascript:`,
`data:`) never reaches the platform at all, while the pressable buttons beside it still work."""

from __future__ import annotations

import io
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from bot.commands import command_menu
from config.settings import TelegramSettings
from surfaces.base import Choice, ChoiceAnswer, ConversationKey, Inbound
from surfaces.console.adapter import CONSOLE_KEY, ConsoleSurface
from surfaces.links import is_web_url, renderable
from surfaces.telegram.adapter import TelegramSurface
from tests.engine_helpers import wait_for
from tests.fakes.slack_api import button_press
from tests.fakes.telegram_api import FakeBotApi, People
from tests.harness.surface import Received, running_surface
from tests.harness.telegram import telegram_access
from tests.test_ask_text import Turns, pipe
from tests.test_dashboard import dashboard, page, served
from tests.test_discord_files import discord_surface
from tests.test_slack_files import ALICE as SLACK_ALICE
from tests.test_slack_files import DM as SLACK_DM
from tests.test_slack_files import slack

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

SIGN_IN = "https://auth.example.com/sign-in?state=abc&code=1"
LINK = Choice("link-token", "Open the sign-in page", url=SIGN_IN)
DONE = Choice("done-token", "Done", "primary")
EVIL = Choice("evil-token", "Evil", url="javascript:alert(document.cookie)")
DATA = Choice("data-token", "Data", url="data:text/html,<script>alert(1)</script>")
CHOICES = [LINK, DONE, EVIL, DATA]
PEOPLE = People()


def never_shows_bad_urls(sent: object) -> None:
    """Nothing of the dropped links reached the platform: neither url nor token nor label."""
    text = json.dumps(sent, default=str)
    for word in ("javascript", "data:text", "evil-token", "data-token", "Evil"):
        assert word not in text, f"{word!r} reached the platform: {text}"


# ---- the kit -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "web"),
    [
        (SIGN_IN, True),
        ("http://127.0.0.1:8080/callback", True),
        ("HTTPS://EXAMPLE.COM/", True),
        ("javascript:alert(1)", False),
        ("JavaScript://example.com/%0Aalert(1)", False),
        ("data:text/html,hi", False),
        ("file:///etc/passwd", False),
        ("tg://user?id=1", False),
        ("https://", False),
        ("https:///path-only", False),
        ("//example.com/no-scheme", False),
        (" https://example.com", False),
        ("https://exa mple.com", False),
        ("https://example.com/\nSet-Cookie", False),
        ("https://[::1", False),
        ("", False),
    ],
)
def test_only_absolute_http_and_https_urls_with_a_host_are_web_urls(url: str, web: bool) -> None:
    assert is_web_url(url) is web


def test_renderable_keeps_the_order_drops_bad_links_and_honours_a_length_limit() -> None:
    assert renderable(CHOICES, surface="test") == [LINK, DONE]
    long = Choice("", "Long", url="https://example.com/" + "a" * 600)
    assert renderable([long, DONE], surface="test", max_url=512) == [DONE]
    assert renderable([long], surface="test") == [long]


# ---- Telegram ----------------------------------------------------------------------------------
@asynccontextmanager
async def telegram() -> AsyncIterator[tuple[FakeBotApi, TelegramSurface]]:
    async with FakeBotApi() as api:
        api.private_chat(PEOPLE.alice)
        settings = TelegramSettings(**telegram_access(api, PEOPLE.alice))
        surface = TelegramSurface(settings, min_edit_interval=0.01, poll_timeout=2.0)
        async with running_surface(surface, Received(), command_menu()):
            yield api, surface


async def test_telegram_shows_a_link_as_an_inline_url_button_and_drops_the_others() -> None:
    key = ConversationKey("telegram", str(PEOPLE.alice.id))
    async with telegram() as (api, surface):
        sent = await surface.send(key, "Sign in, then press Done.", buttons=CHOICES)
        asked = await surface.ask_choice(key, "Sign in?", CHOICES, allowed_users=["1"])
        for ref in (sent, asked):
            markup = api.messages[(PEOPLE.alice.id, int(ref.id))].reply_markup
            assert markup is not None
            buttons = [button for row in markup["inline_keyboard"] for button in row]
            assert buttons == [
                {"text": LINK.label, "url": SIGN_IN},  # no callback_data: never pressed back
                {"text": DONE.label, "callback_data": DONE.token},
            ]
        await surface.edit(sent, "Only a bad link left.", buttons=[EVIL])
        assert api.messages[(PEOPLE.alice.id, int(sent.id))].reply_markup is None
        never_shows_bad_urls([call.params for call in api.calls])


async def test_the_fake_bot_api_refuses_a_url_button_telegram_would_refuse() -> None:
    """The fake checks what the test above relies on, as the Bot API does."""
    async with telegram() as (_, surface):
        bot = await surface._bot()
        markup = {"inline_keyboard": [[{"text": "x", "url": "javascript:alert(1)"}]]}
        with pytest.raises(Exception, match=r"(?i)button_url_invalid"):
            await bot.send_message(PEOPLE.alice.id, "x", reply_markup=markup)  # type: ignore[arg-type]
        both = {"inline_keyboard": [[{"text": "x", "url": SIGN_IN, "callback_data": "t"}]]}
        with pytest.raises(Exception, match=r"(?i)text buttons are unallowed"):
            await bot.send_message(PEOPLE.alice.id, "x", reply_markup=both)  # type: ignore[arg-type]


# ---- Slack -------------------------------------------------------------------------------------
async def test_slack_shows_a_link_as_a_url_button_whose_click_is_never_a_press() -> None:
    async with slack("socket") as env:
        key = ConversationKey("slack", SLACK_DM)
        sent = await env.surface.send(key, "Sign in, then press Done.", buttons=CHOICES)
        asked = await env.surface.ask_choice(key, "Sign in?", CHOICES, allowed_users=[])
        for ref in (sent, asked):
            buttons = env.fake.messages[ref.id].buttons
            assert [(b.get("url"), b.get("value")) for b in buttons] == [
                (SIGN_IN, None),
                (None, DONE.token),
            ]
        message = env.fake.messages[asked.id]
        # Slack tells the app about a click on a link button too; it is acknowledged, no press
        await env.press(button_press(SLACK_DM, SLACK_ALICE, message, url=SIGN_IN))
        await env.press(button_press(SLACK_DM, SLACK_ALICE, message, DONE.token))
        await wait_for(lambda: env.events, "the press on Done")
        assert [e.token for e in env.events if isinstance(e, ChoiceAnswer)] == [DONE.token]
        await env.surface.edit(sent, "Only a bad link left.", buttons=[EVIL])
        assert env.fake.messages[sent.id].blocks == []
        never_shows_bad_urls([call.params for call in env.fake.calls])


# ---- Discord -----------------------------------------------------------------------------------
async def test_discord_shows_a_link_as_a_link_style_button_without_a_custom_id() -> None:
    too_long = Choice("", "Too long for Discord", url="https://example.com/" + "a" * 600)
    async with discord_surface() as bot:
        key = bot.dm_key()
        sent = await bot.surface.send(key, "Sign in, then press Done.", buttons=CHOICES)
        asked = await bot.surface.ask_choice(
            key, "Sign in?", [*CHOICES, too_long], allowed_users=[bot.alice.id]
        )
        for ref in (sent, asked):
            buttons = bot.fake.messages[ref.id].buttons()
            assert [(b["style"], b.get("url"), b.get("custom_id")) for b in buttons] == [
                (5, SIGN_IN, None),  # link style: Discord opens it and tells no one
                (1, None, DONE.token),
            ]
        await bot.surface.edit(sent, "Only a bad link left.", buttons=[EVIL])
        assert bot.fake.messages[sent.id].buttons() == []
        calls = [call.body for call in bot.fake.calls]
        never_shows_bad_urls(calls)
        assert "a" * 600 not in json.dumps(calls, default=str)


# ---- the dashboard -----------------------------------------------------------------------------
async def test_the_dashboard_sends_a_link_without_a_token_and_a_press_on_it_is_refused() -> None:
    surface = dashboard()
    received = Received()
    async with (
        running_surface(surface, received),
        served(surface) as client,
        page(client, "alice") as alice,
    ):
        tab = alice.tabs()[0]
        key = ConversationKey("dashboard", "alice", tab)
        sent = await surface.send(key, "Sign in, then press Done.", buttons=CHOICES)
        frame = await alice.until(lambda f: f.get("id") == sent.id, "the message")
        assert frame["buttons"] == [
            {"label": LINK.label, "style": "default", "url": SIGN_IN},
            {"token": DONE.token, "label": DONE.label, "style": "primary"},
        ]
        never_shows_bad_urls(alice.frames)
        # a page that sends the link's token anyway (it never has it) is told it is stale
        await alice.socket.send_json({"type": "press", "tab": tab, "token": LINK.token})
        await alice.until(lambda f: "no longer active" in f.get("html", ""), "the refusal")
        await alice.socket.send_json({"type": "press", "tab": tab, "token": DONE.token})
        await wait_for(lambda: received.events, "the press on Done")
    assert [e.token for e in received.events if isinstance(e, ChoiceAnswer)] == [DONE.token]


async def test_the_dashboard_page_makes_a_link_an_anchor_that_opens_a_new_tab_safely() -> None:
    async with served(dashboard()) as client:
        index = await (await client.get("/")).text()
        script = await (await client.get("/static/app.js")).text()
    template = index.split('id="tpl-link">', 1)[1].split("</template>", 1)[0]
    assert template.startswith("<a ") and 'target="_blank"' in template
    assert 'rel="noopener noreferrer"' in template
    # the page opens only http(s) links, whatever a frame says
    assert 'url.protocol !== "https:" && url.protocol !== "http:"' in script


# ---- the terminal ------------------------------------------------------------------------------
async def test_the_terminal_prints_a_link_as_label_and_url_and_numbers_only_the_options() -> None:
    out = io.StringIO()
    answers: list[ChoiceAnswer] = []
    turns = Turns()

    async def on_event(event: Inbound | ChoiceAnswer) -> None:
        if isinstance(event, ChoiceAnswer):
            answers.append(event)
        else:
            await turns(event)

    with pipe() as (read, write):
        console = ConsoleSurface(input_fd=read, output=out, interactive=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(console.run, on_event)
            os.write(write, b"go\n1\n")
            await wait_for(lambda: turns.messages, "the message")
            await console.ask_choice(CONSOLE_KEY, "Sign in?", CHOICES, allowed_users=[])
            await wait_for(lambda: answers, "the answer")
            turns.finish()
            os.close(write)
    assert [answer.token for answer in answers] == [DONE.token]
    shown = out.getvalue()
    assert f"Sign in?\n  {LINK.label}: {SIGN_IN}\n  1) Done\nType a number to answer." in shown
    never_shows_bad_urls(shown)
