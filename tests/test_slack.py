"""The Slack surface end to end: the real slack-bolt and slack_sdk, through our adapter, against the
fake Slack of tests/fakes/slack_api.py, with the real BotApp in process and the scripted fake agent
as a subprocess. Most behaviour is checked in both modes, Socket Mode (envelopes on the fake's
websocket) and HTTP mode (signed requests posted to the adapter's server)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from config import ConfigError
from surfaces.base import ConversationKey
from surfaces.slack import create_surface
from surfaces.slack.adapter import SlackSurface
from surfaces.slack.convert import message_from_event, press_from_payload
from surfaces.slack.markup import render
from tests.conftest import LISTS_COMPACT, FakeAgent, script
from tests.engine_helpers import engine_settings, running_app, wait_for
from tests.fakes.slack_api import (
    BOT_TOKEN,
    BOT_USER_ID,
    SIGNING_SECRET,
    TEAM_ID,
    FakeSlack,
    Message,
    button_press,
    channel_message,
    dm,
    envelope,
    mention,
)
from tests.harness.slack import SlackDelivery, credentials, delivering, slack_settings

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

ALICE, BOB, CAROL, MALLORY = "UALICE", "UBOB", "UCAROL", "UMALLORY"
DMS = {ALICE: "DALICE", BOB: "DBOB", MALLORY: "DMALLORY"}
CHANNEL = "CGENERAL"
BOT = f"<@{BOT_USER_ID}>"
FENCE = re.compile(r" {0,3}```")


@pytest.fixture(params=["socket", "http"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def prompt_sessions(fake: FakeAgent) -> list[str]:
    return [frame["params"]["sessionId"] for frame in fake.frames_in("session/prompt")]


@dataclass
class SlackEnv(SlackDelivery):
    surface: SlackSurface
    mode: str

    async def dm(self, user: str, text: str) -> str:
        ts = self.fake.next_ts()
        await self.deliver(envelope(dm(DMS[user], user, typed(text), ts=ts)))
        return ts

    async def mention(self, user: str, text: str, *, channel: str = CHANNEL) -> str:
        """A top-level mention; returns its ts, which is the thread the bot answers in."""
        ts = self.fake.next_ts()
        await self.deliver(envelope(mention(channel, user, f"{BOT} {typed(text)}", ts=ts)))
        return ts

    async def answered(
        self, channel: str, thread: str, containing: str, timeout: float = 15.0
    ) -> str:
        """Wait until the thread shows `containing` and no stream in it is still open."""

        def done() -> bool:
            open_streams = [m for m in self.fake.streaming_now() if m.channel == channel]
            return containing in self.fake.thread_text(channel, thread) and not open_streams

        await wait_for(done, f"{containing!r} in {channel}/{thread}", timeout)
        return self.fake.thread_text(channel, thread)


def typed(text: str) -> str:
    """What Slack sends when someone types `text`: `&`, `<` and `>` escaped."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def surface_for(fake: FakeSlack, mode: str, **options: Any) -> SlackSurface:
    values: dict[str, Any] = {"min_edit_interval": 0.05, "stream_idle": 0.3, **options}
    access: dict[str, Any] = {"allowed_users": [ALICE, BOB], "approvers": [CAROL]}  # slack_bot's
    return SlackSurface(slack_settings(fake, mode, **access), **values)


@asynccontextmanager
async def slack_bot(
    tmp_path: Path,
    fake_agent: FakeAgent,
    mode: str,
    *agent_options: str,
    fake: dict[str, Any] | None = None,
    surface: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
) -> AsyncIterator[SlackEnv]:
    slack = credentials(mode) | {"allowed_users": [ALICE, BOB], "approvers": [CAROL]}
    app_settings = engine_settings(
        tmp_path, fake_agent, *agent_options, slack=slack, **(settings or {})
    )
    async with FakeSlack(**(fake or {})) as api:
        adapter = surface_for(api, mode, **(surface or {}))
        async with running_app(app_settings, adapter), delivering(api, adapter, mode) as wire:
            yield SlackEnv(api, wire.poster, adapter, mode)


def chat_calls(fake: FakeSlack) -> list[str]:
    return [call.method for call in fake.calls if call.method.startswith("chat.")]


def balanced(text: str) -> bool:
    return sum(1 for line in text.split("\n") if FENCE.match(line)) % 2 == 0


def content(text: str) -> str:
    kept = [line for line in text.split("\n") if not FENCE.match(line)]
    return "".join("".join(kept).split())


# ---- conversations ------------------------------------------------------------------------------
async def test_a_dm_is_answered_at_the_top_level_of_the_dm(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        await env.dm(ALICE, "hello there")
        text = await env.answered(DMS[ALICE], "", "Echo: hello there")
    assert text == "Echo: hello there"
    assert fake_agent.prompt_texts() == ["hello there"]
    assert all(not m.thread_ts for m in env.fake.messages.values())


async def test_a_channel_mention_is_answered_in_its_thread_which_is_one_conversation(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    slow = script({"chunk": "thinking "}, {"sleep": 0.4}, {"chunk": "about it"})
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        thread = await env.mention(ALICE, slow)
        await env.answered(CHANNEL, thread, "thinking about it")
        # inside the thread no mention is needed; outside it the bot keeps quiet
        ts = env.fake.next_ts()
        await env.deliver(
            envelope(channel_message(CHANNEL, ALICE, "and more", ts=ts, thread_ts=thread))
        )
        await env.deliver(
            envelope(channel_message(CHANNEL, ALICE, "not for the bot", ts=env.fake.next_ts()))
        )
        await env.answered(CHANNEL, thread, "Echo: and more")
        other = await env.mention(BOB, "a new topic")
        await env.answered(CHANNEL, other, "Echo: a new topic")
    assert fake_agent.prompt_texts() == [slow, "and more", "a new topic"]
    first, follow_up, new_topic = prompt_sessions(fake_agent)
    assert first == follow_up != new_topic
    assert env.fake.in_thread(CHANNEL, "") == []  # nothing at the channel's top level
    # the slow reply was streamed natively, to the person who asked
    start = env.fake.calls_to("chat.startStream")[0]
    assert (start.params["thread_ts"], start.params["recipient_user_id"]) == (thread, ALICE)
    assert start.params["recipient_team_id"] == TEAM_ID


async def test_bang_compact_and_typed_slash_compact_reach_the_agent_as_slash_compact(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode, *LISTS_COMPACT) as env:
        await env.dm(ALICE, "!compact")
        await env.answered(DMS[ALICE], "", "Echo: /compact")
        thread = await env.mention(BOB, "/compact")
        await env.answered(CHANNEL, thread, "Echo: /compact")
    assert fake_agent.prompt_texts() == ["/compact", "/compact"]


async def test_bang_help_lists_the_commands_with_a_bang(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        thread = await env.mention(ALICE, "!help")
        text = await env.answered(CHANNEL, thread, "Commands:")
    for command in ("!new", "!compact", "!stop", "!status", "!model", "!help"):
        assert command in text
    assert fake_agent.prompt_texts() == []


async def test_a_retried_event_and_the_twin_of_a_mention_reach_the_agent_once(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        ts = env.fake.next_ts()
        text = f"{BOT} just once"
        as_mention = envelope(mention(CHANNEL, ALICE, text, ts=ts))
        as_message = envelope(channel_message(CHANNEL, ALICE, text, ts=ts))
        await env.deliver(as_message)  # the message.channels twin, with its own event_id
        await env.deliver(as_mention)
        await env.deliver(as_mention, retry=1)  # Slack did not see the ack in time
        await env.deliver(as_mention, retry=2)
        await env.answered(CHANNEL, ts, "Echo: just once")
        # and a DM retried
        dm_ts = env.fake.next_ts()
        body = envelope(dm(DMS[BOB], BOB, "once in a DM", ts=dm_ts))
        await env.deliver(body)
        await env.deliver(body, retry=1)
        await env.answered(DMS[BOB], "", "Echo: once in a DM")
    assert fake_agent.prompt_texts() == ["just once", "once in a DM"]
    assert len(env.fake.replies(CHANNEL, ts)) == 1
    assert len(env.fake.replies(DMS[BOB])) == 1


async def test_a_stranger_gets_no_api_call_and_nothing_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bot.access")
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        await env.dm(MALLORY, "hello")
        await env.dm(MALLORY, "!help")
        await env.mention(MALLORY, "SCN_STREAM")
        await wait_for(
            lambda: any("stranger" in r.getMessage() for r in caplog.records), "the stranger"
        )
        # Someone allowed is answered meanwhile (by the bot, not the agent): the bot has long
        # since dropped the stranger's messages, which came first.
        await env.dm(ALICE, "!help")
        await env.answered(DMS[ALICE], "", "help")
    assert {call.channel for call in env.fake.calls if call.method.startswith("chat.")} == {
        DMS[ALICE]
    }
    assert fake_agent.prompt_texts() == []  # (!help lists the agent's commands: it may start)


async def test_an_approval_is_answered_by_the_requester_and_refused_to_another_user(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        thread = await env.mention(ALICE, "SCN_PERMISSION")

        def prompt_message() -> Message | None:
            shown = [m for m in env.fake.in_thread(CHANNEL, thread) if m.buttons]
            return shown[0] if shown else None

        await wait_for(lambda: prompt_message() is not None, "the approval buttons")
        asked = prompt_message()
        assert asked is not None
        labels = {b["text"]["text"]: b["value"] for b in asked.buttons}
        assert set(labels) == {"Yes", "Always", "No", "Trust this tool for this session"}
        assert "Run echo hi" in asked.text
        await env.press(button_press(CHANNEL, BOB, asked, labels["Yes"]))
        await wait_for(lambda: env.fake.ephemerals, "the notice to bob")
        await env.press(button_press(CHANNEL, ALICE, asked, labels["Yes"]))
        await env.answered(CHANNEL, thread, "permission:allow_once")
        await wait_for(lambda: not asked.buttons, "the buttons to be withdrawn")
    (notice,) = env.fake.ephemerals
    assert (notice.user, notice.channel, notice.thread_ts) == (BOB, CHANNEL, thread)
    assert "Only Alice or an approver can answer this." in notice.text
    assert "Answered: Yes" in json.dumps(asked.blocks)
    outcomes = [
        frame["result"]["outcome"]
        for frame in fake_agent.frames_in()
        if isinstance(frame.get("result"), dict) and "outcome" in frame["result"]
    ]
    assert outcomes == [{"outcome": "selected", "optionId": "allow_once"}]


async def test_a_429_mid_stream_is_waited_out_and_nothing_is_lost(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    words = ["alpha ", "beta ", "gamma ", "delta"]
    steps: list[dict[str, Any]] = []
    for word in words:
        steps += [{"chunk": word}, {"sleep": 0.3}]
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        env.fake.fail_next("chat.appendStream", retry_after=1)
        env.fake.fail_next("chat.update", retry_after=1)
        thread = await env.mention(ALICE, script(*steps))
        streamed = await env.answered(CHANNEL, thread, "delta")
        await env.dm(BOB, script(*steps))
        edited = await env.answered(DMS[BOB], "", "delta")
    assert streamed == edited == "alpha beta gamma delta"
    limited = [c.method for c in env.fake.calls if c.status == 429]
    assert limited == ["chat.appendStream", "chat.update"]
    assert len(env.fake.replies(CHANNEL, thread)) == len(env.fake.replies(DMS[BOB])) == 1


def long_markdown() -> str:
    prose = " ".join(f"word{n}" for n in range(400))
    code = "\n".join(f"    line {n} of the listing, padded with text" for n in range(150))
    tail = " ".join(f"tail{n}" for n in range(300))
    return f"{prose}\n\n```python\n{code}\n```\n\n{tail}"


async def test_a_long_reply_arrives_in_several_messages_with_fences_intact(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    text = long_markdown()
    pieces = [text[i : i + 1500] for i in range(0, len(text), 1500)]
    steps: list[dict[str, Any]] = []
    for piece in pieces:
        steps += [{"chunk": piece}, {"sleep": 0.1}]
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        thread = await env.mention(ALICE, script(*steps))
        await env.answered(CHANNEL, thread, "tail299", timeout=30)
        replies = env.fake.replies(CHANNEL, thread)
    assert len(replies) >= 3
    for reply in replies:
        assert len(reply.visible) <= 3900
        assert balanced(reply.visible), reply.visible[-200:]
    assert content("\n".join(r.visible for r in replies)) == content(text)


async def test_mentions_in_agent_text_arrive_neutralised(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    risky = script(
        {"chunk": "Heads up <!channel> and <!here>, ping <@UALICE> & <#CGENERAL> "},
        {"sleep": 0.3},
        {"chunk": "**done** <!everyone>"},
    )
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        thread = await env.mention(ALICE, risky)  # streamed: Markdown
        await env.answered(CHANNEL, thread, "done")
        await env.dm(BOB, risky)  # posted and edited: mrkdwn
        await env.answered(DMS[BOB], "", "done")
    sent = [
        str(value)
        for call in env.fake.calls
        if call.method.startswith("chat.")
        for value in call.params.values()
    ]
    for token in ("<!channel>", "<!here>", "<!everyone>", "<@UALICE>", "<#CGENERAL>"):
        assert not any(token in value for value in sent), token
    (dm_reply,) = env.fake.replies(DMS[BOB])
    assert "&lt;!channel&gt;" in dm_reply.text and "*done*" in dm_reply.text
    (streamed,) = env.fake.replies(CHANNEL, thread)
    assert "Heads up <!channel>" in streamed.visible  # shown as typed, notifying nobody


# ---- HTTP mode ----------------------------------------------------------------------------------
async def test_a_badly_signed_or_stale_request_is_rejected_and_not_processed(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with slack_bot(tmp_path, fake_agent, "http") as env:
        assert env.poster is not None
        forged = envelope(dm(DMS[ALICE], ALICE, "forged", ts=env.fake.next_ts()))
        for signature in ("bad", "stale", "none"):
            assert await env.poster.event(forged, signature=signature) == 401
        press = {"type": "block_actions", "user": {"id": ALICE}, "actions": []}
        assert await env.poster.action(press, signature="bad") == 401
        await env.dm(ALICE, "genuine")
        await env.answered(DMS[ALICE], "", "Echo: genuine")
    assert fake_agent.prompt_texts() == ["genuine"]


# ---- Socket Mode --------------------------------------------------------------------------------
async def test_socket_mode_reconnects_when_slack_asks_and_goes_on_answering(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        await env.dm(ALICE, "before")
        await env.answered(DMS[ALICE], "", "Echo: before")
        await env.fake.disconnect()
        await env.fake.wait_connected(2)
        await env.dm(ALICE, "after")
        await env.answered(DMS[ALICE], "", "Echo: after")
    assert fake_agent.prompt_texts() == ["before", "after"]
    assert len(env.fake.calls_to("apps.connections.open")) == 2


async def test_without_native_streams_replies_are_posted_and_updated(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    slow = script(
        {"chunk": "one "}, {"sleep": 0.3}, {"chunk": "two "}, {"sleep": 0.3}, {"chunk": "three"}
    )
    async with slack_bot(tmp_path, fake_agent, "socket", fake={"streaming": False}) as env:
        first = await env.mention(ALICE, slow)
        await env.answered(CHANNEL, first, "one two three")
        second = await env.mention(ALICE, slow)
        await env.answered(CHANNEL, second, "one two three")
    assert len(env.fake.calls_to("chat.startStream")) == 1  # tried once, then never again
    assert len(env.fake.calls_to("chat.update")) >= 2
    assert env.fake.thread_text(CHANNEL, first) == "one two three"


async def test_a_stream_slack_ended_early_goes_on_with_updates_and_loses_nothing(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    steps: list[dict[str, Any]] = []
    for word in ("one ", "two ", "three ", "four ", "five"):
        steps += [{"chunk": word}, {"sleep": 0.25}]
    async with slack_bot(
        tmp_path,
        fake_agent,
        "socket",
        fake={"stream_lifetime": 0.4},
        surface={"stream_idle": 10.0},
    ) as env:
        thread = await env.mention(ALICE, script(*steps))
        text = await env.answered(CHANNEL, thread, "five")
    assert text == "one two three four five"
    ended = [c for c in env.fake.calls if c.error == "message_not_in_streaming_state"]
    assert ended and len(env.fake.replies(CHANNEL, thread)) == 1


async def test_a_quiet_stream_is_stopped_before_slack_would_end_it(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    steps = [
        {"chunk": "start "},
        {"sleep": 0.2},
        {"chunk": "then "},
        {"sleep": 1.0},
        {"chunk": "end"},
    ]
    async with slack_bot(tmp_path, fake_agent, "socket", surface={"stream_max_age": 0.6}) as env:
        thread = await env.mention(ALICE, script(*steps))
        text = await env.answered(CHANNEL, thread, "end")
    assert text == "start then end"
    methods = chat_calls(env.fake)
    assert methods.index("chat.stopStream") < methods.index("chat.update")
    assert not any(c.error for c in env.fake.calls)


# ---- the fake and the setup ---------------------------------------------------------------------
async def test_the_fake_takes_stream_text_in_both_wire_formats() -> None:
    async with FakeSlack() as fake:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_url)
        parent = fake.next_ts()
        started = await client.chat_startStream(
            channel="DALICE", thread_ts=parent, chunks=[{"type": "markdown_text", "text": "one "}]
        )
        await client.chat_appendStream(channel="DALICE", ts=started["ts"], markdown_text="two ")
        await client.chat_stopStream(
            channel="DALICE",
            ts=started["ts"],
            chunks=[{"type": "markdown_text", "text": "three"}],
        )
    (message,) = fake.messages.values()
    assert (message.text, message.thread_ts, message.streaming) == ("one two three", parent, False)


async def test_create_surface_reads_the_slack_settings_and_a_rejected_token_is_a_setting_error(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with FakeSlack() as fake:
        settings = engine_settings(
            tmp_path,
            fake_agent,
            slack={
                "bot_token": "xoxb-1000000001-revokedtoken",
                "signing_secret": SIGNING_SECRET,
                "api_url": fake.api_url,
                "port": 3999,
            },
        )
        surface = create_surface(settings)
        assert surface.capabilities.command_prefixes == ("!", "/")
        assert surface.capabilities.max_chars == 3900 and surface.capabilities.can_edit
        assert not surface.socket_mode

        async def on_event(event: Any) -> None:
            raise AssertionError("nothing should arrive")

        with pytest.raises(ConfigError, match="SWITCHBOARD_SLACK__BOT_TOKEN"):
            await surface.run(on_event)
        await surface.close()


# ---- pure conversions ---------------------------------------------------------------------------
def test_markdown_becomes_mrkdwn_with_escapes_and_no_mentions() -> None:
    shown = render(
        "# Title\n\n**bold**, *it*, ~~gone~~, `a<b`, [site](https://e.com/?a=1&b=2) "
        "<!channel> <@U1> a & b\n\n- one\n- two\n\n> quoted\n\n```py\nx = 1 < 2\n```"
    )
    assert shown == (
        "*Title*\n\n*bold*, _it_, ~gone~, `a&lt;b`, <https://e.com/?a=1&amp;b=2|site> "
        "&lt;!channel&gt; &lt;@U1&gt; a &amp; b\n\n• one\n• two\n\n> quoted\n\n"
        "```\nx = 1 &lt; 2\n```"
    )


def test_events_not_for_the_bot_are_skipped() -> None:
    def take(event: dict[str, Any]) -> Any:
        return message_from_event(
            event, bot_user_id=BOT_USER_ID, in_known_thread=lambda c, t: t == "1.0"
        )

    ts = "2.0"
    assert take(channel_message(CHANNEL, ALICE, "chatter", ts=ts)) is None
    assert take(channel_message(CHANNEL, ALICE, "not ours", ts=ts, thread_ts="9.0")) is None
    assert take(channel_message(CHANNEL, ALICE, "ours", ts=ts, thread_ts="1.0")) is not None
    started = channel_message(
        CHANNEL, ALICE, "bot's", ts=ts, thread_ts="9.0", parent_user_id=BOT_USER_ID
    )
    assert take(started) is not None
    own = dm("DALICE", BOT_USER_ID, "echo", ts=ts)
    assert take(own) is None
    edited = dict(dm("DALICE", ALICE, "x", ts=ts), subtype="message_changed")
    assert take(edited) is None
    from_bot = dict(dm("DALICE", ALICE, "x", ts=ts), bot_id="B0OTHER")
    assert take(from_bot) is None
    message = take(
        mention(CHANNEL, ALICE, f"{BOT}  !compact <https://a.b|a link> &amp; more", ts=ts)
    )
    assert message is not None
    assert (message.channel, message.thread, message.text) == (
        CHANNEL,
        ts,
        "!compact a link (https://a.b) & more",
    )
    assert message.event_id == f"{CHANNEL}:{ts}"
    assert ConversationKey("slack", message.channel, message.thread).thread == ts


def test_a_press_on_someone_elses_buttons_is_not_ours() -> None:
    assert (
        press_from_payload(
            {"type": "block_actions", "actions": [{"block_id": "other", "value": "x"}]}
        )
        is None
    )


# ---- text that cannot be encoded ------------------------------------------------------------------
# A lone surrogate, NUL, an escape sequence, an emoji and an astral noncharacter in one text.
HOSTILE = "a\ud800b\x00c \x1b[31m😀 \U0010ffff"
MADE_VALID = "a\ufffdbc [31m😀 \ufffd"


async def test_a_message_with_text_that_cannot_be_encoded_reaches_the_agent_valid(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        await env.dm(ALICE, HOSTILE)
        assert await env.answered(DMS[ALICE], "", MADE_VALID) == f"Echo: {MADE_VALID}"
        await env.dm(BOB, "still there?")
        await env.answered(DMS[BOB], "", "Echo: still there?")
    assert fake_agent.prompt_texts() == [MADE_VALID, "still there?"]


async def test_an_agent_chunk_with_text_that_cannot_be_encoded_is_delivered_valid(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    steps = script({"chunk": HOSTILE}, {"sleep": 0.2}, {"chunk": " end"})
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        thread = await env.mention(ALICE, steps)  # a thread reply: streamed natively
        assert await env.answered(CHANNEL, thread, " end") == f"{MADE_VALID} end"
        await env.dm(BOB, "next")
        await env.answered(DMS[BOB], "", "Echo: next")


# ---- issue 13: the agent's commands ---------------------------------------------------------------
AGENT_COMMANDS = {
    "update": {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [
            {"name": "review", "description": "Review the diff", "input": {"hint": "PATH"}},
            {"name": "status", "description": "The agent's own status"},
        ],
    }
}


async def test_bang_help_lists_the_agents_commands_in_slacks_spelling(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        await env.dm(ALICE, script(AGENT_COMMANDS, {"chunk": "listed"}))
        await env.answered(DMS[ALICE], "", "listed")
        await env.dm(ALICE, "!help")
        text = await env.answered(DMS[ALICE], "", "Commands:")
    # typed `/review` would be Slack's own slash command: the agent's are listed as `!review`,
    # and one named like ours doubled
    assert "The agent also understands: !review, !!status" in text
