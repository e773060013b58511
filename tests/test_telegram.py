"""The Telegram surface end to end: the real python-telegram-bot, through our adapter, against the
fake Bot API (tests/fakes/telegram_api.py), with BotApp in process and the scripted fake agent as
a real subprocess. Plus the pure conversions (Markdown -> Telegram HTML, group gating)."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from bot.commands import command_menu
from config import Settings
from surfaces.base import ConversationKey, Inbound
from surfaces.errors import MessageGone, RateLimited, SendFailed
from surfaces.telegram.adapter import TelegramSurface
from surfaces.telegram.convert import (
    BotIdentity,
    GroupGate,
    received_from_update,
    strip_mention,
)
from surfaces.telegram.markup import html_to_plain, markdown_to_html
from tests.conftest import LISTS_COMPACT, FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import BOT_ID, BOT_USERNAME, FakeBotApi, People, parse_html, utf16_len
from tests.harness.process import free_port, run_env
from tests.harness.telegram import (
    FAST,
    ids,
    serving,
    switchboard_run,
    telegram_env,
    telegram_settings,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

GROUP = -1001234567890  # allowlisted, a forum
OTHER_GROUP = -1009876543210  # not allowlisted
PEOPLE = People()
ALICE, BOB, CAROL, MALLORY = PEOPLE.alice, PEOPLE.bob, PEOPLE.carol, PEOPLE.mallory
ME = BotIdentity(BOT_ID, BOT_USERNAME)


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team", forum=True)
        fake.add_group(OTHER_GROUP, "Elsewhere", forum=True)
        yield fake


def settings_for(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, *options: str, **telegram: Any
) -> Settings:
    """Alice and Bob may chat, Carol approves; only GROUP is allowlisted."""
    access = {
        "allowed_users": ids(ALICE, BOB),
        "approvers": ids(CAROL),
        "allowed_chats": [str(GROUP)],
    }
    return telegram_settings(tmp_path, fake_agent, api, *options, telegram=access | telegram)


def shows(api: FakeBotApi, chat: int, text: str) -> Any:
    return lambda: text in api.chat_text(chat)


# ---- private chats ------------------------------------------------------------------------------
async def test_a_dm_streams_as_drafts_and_ends_in_one_formatted_message(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    steps = script(
        {"chunk": "Hello "},
        {"sleep": 0.3},
        {"chunk": "**world**"},
        {"sleep": 0.3},
        {"chunk": ", see `x < y`."},
    )
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, steps)
        await wait_for(lambda: api.chat_messages(ALICE.id), "the reply", 15)
    calls = api.calls_to(chat_id=ALICE.id)
    methods = [call.method for call in calls]
    assert methods[0] == "sendChatAction"
    drafts = [call for call in calls if call.method == "sendMessageDraft"]
    assert len(drafts) >= 2  # the text grew while it streamed
    assert all("parse_mode" not in call.params for call in drafts)  # drafts are plain text
    assert drafts[-1].params["text"] == "Hello **world**, see `x < y`."
    assert len({call.params["draft_id"] for call in drafts}) == 1  # one animated bubble
    assert methods.count("sendMessage") == 1 and methods[-1] == "sendMessage"
    assert "editMessageText" not in methods
    (final,) = api.calls_to("sendMessage", chat_id=ALICE.id)
    assert final.params["parse_mode"] == "HTML"
    assert final.params["text"] == "Hello <b>world</b>, see <code>x &lt; y</code>."
    assert api.chat_text(ALICE.id) == "Hello world, see x < y."


async def test_a_stranger_gets_no_api_call_and_nothing_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    async with serving(settings_for(tmp_path, fake_agent, api)):
        for text in ("/start", "/help", "hello", "SCN_STREAM"):
            api.dm(MALLORY, text)
        api.post_message(GROUP, MALLORY, f"@{BOT_USERNAME} hello")
        api.dm(ALICE, "after the stranger")
        await wait_for(shows(api, ALICE.id, "Echo: after the stranger"), "alice's reply")
        await anyio.sleep(0.3)
    assert api.calls_to(chat_id=MALLORY.id, ok=False) == []
    assert api.chat_messages(GROUP) == []
    assert api.calls_to(chat_id=GROUP) == []
    assert fake_agent.prompt_texts() == ["after the stranger"]


async def test_two_chats_run_concurrently_and_one_chats_messages_stay_in_order(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    slow = script({"chunk": "slow "}, {"sleep": 1.5}, {"chunk": "done"})
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, slow)
        api.dm(ALICE, "second")
        api.dm(ALICE, "third")
        api.dm(BOB, "hi")
        await wait_for(shows(api, BOB.id, "Echo: hi"), "bob's reply")
        assert "slow done" not in api.chat_text(ALICE.id)  # bob did not wait for alice
        await wait_for(shows(api, ALICE.id, "Echo: second"), "alice's queued messages", 15)
    alice_prompts = [text for text in fake_agent.prompt_texts() if text != "hi"]
    assert alice_prompts == [slow, "second\n\nthird"]  # in order; the burst became one turn


# ---- groups and topics -----------------------------------------------------------------------------
async def test_in_a_group_topic_the_bot_answers_only_when_mentioned_or_replied_to(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    other_topic = api.add_topic(OTHER_GROUP, ALICE)
    steps = script(
        {"chunk": "one"}, {"sleep": 0.5}, {"chunk": " two"}, {"sleep": 0.5}, {"chunk": " *three*"}
    )
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, "just chatting with people", thread=topic)
        api.post_message(OTHER_GROUP, ALICE, f"@{BOT_USERNAME} not here", thread=other_topic)
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {steps}", thread=topic)
        await wait_for(shows(api, GROUP, "one two three"), "the streamed reply", 15)
        (answer,) = api.chat_messages(GROUP)
        api.post_message(GROUP, BOB, "and you, again?", thread=topic, reply_to=answer)
        await wait_for(shows(api, GROUP, "Echo: and you, again?"), "the answer to a reply")
    assert fake_agent.prompt_texts() == [steps, "and you, again?"]
    assert api.calls_to(chat_id=OTHER_GROUP) == []
    assert api.calls_to("sendMessageDraft", chat_id=GROUP) == []  # no drafts in groups
    posted = api.calls_to("sendMessage", "editMessageText", chat_id=GROUP)
    assert all(call.params.get("message_thread_id", topic) == topic for call in posted)
    assert all(message.thread == topic for message in api.chat_messages(GROUP))
    # streamed by editing one live message, which the final answer took over: no stale copy
    first_reply = [call for call in posted if call.params.get("message_id") == answer.message_id]
    assert len(first_reply) >= 2
    assert first_reply[-1].params["parse_mode"] == "HTML"
    assert first_reply[-1].params["text"] == "one two <i>three</i>"
    assert [message.text for message in api.chat_messages(GROUP)] == [
        "one two three",
        "Echo: and you, again?",
    ]


async def test_group_previews_are_spaced_out_and_one_held_back_is_still_shown(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    chunks: list[dict[str, Any]] = []
    for n in range(12):
        chunks += [{"chunk": f"w{n} "}, {"sleep": 0.1}]
    streamed = script(*chunks, {"sleep": 1.5}, {"chunk": "end"})
    async with serving(settings_for(tmp_path, fake_agent, api), group_preview_interval=0.5):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {streamed}", thread=topic)
        everything = " ".join(f"w{n}" for n in range(12))
        # the last chunks came faster than previews may go: shown in the pause all the same
        await wait_for(shows(api, GROUP, everything), "the held-back preview", 10)
        assert "end" not in api.chat_text(GROUP)
        await wait_for(shows(api, GROUP, "end"), "the final text", 10)
    live = api.calls_to("sendMessage", "editMessageText", chat_id=GROUP)
    previews = [call for call in live if "parse_mode" not in call.params]
    gaps = [b.at - a.at for a, b in itertools.pairwise(previews)]
    assert len(previews) >= 2 and min(gaps) >= 0.45
    assert len(api.chat_messages(GROUP)) == 1


async def test_a_dm_where_drafts_are_refused_streams_by_editing_one_message(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    api.fail_next("sendMessageDraft", 400, "Bad Request: TEXTDRAFT_PEER_INVALID")
    steps = script({"chunk": "first"}, {"sleep": 0.3}, {"chunk": " second"})
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, steps)
        await wait_for(shows(api, ALICE.id, "first second"), "the reply")
    assert [m.text for m in api.chat_messages(ALICE.id)] == ["first second"]
    assert api.calls_to("sendMessageDraft") == []  # refused once, then not tried again
    assert api.calls_to("editMessageText", chat_id=ALICE.id)


async def test_every_command_works_in_a_dm_and_with_the_bot_name_in_a_group(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    settings = settings_for(tmp_path, fake_agent, api, "--models", "small,large", *LISTS_COMPACT)
    async with serving(settings):
        for text in ("/help", "/status", "/model", "/model large", "/stop", "/new", "/compact"):
            api.dm(ALICE, text)
        await wait_for(shows(api, ALICE.id, "Echo: /compact"), "the /compact turn", 15)
        api.post_message(GROUP, BOB, f"/help@{BOT_USERNAME}", thread=topic)
        api.post_message(GROUP, BOB, "/status@some_other_bot", thread=topic)
        api.post_message(GROUP, BOB, "/stop", thread=topic)  # bare, but one of ours
        await wait_for(shows(api, GROUP, "Nothing is running."), "the group's answers")
    shown = [message.text for message in api.chat_messages(ALICE.id)]
    assert shown[0].startswith("Commands:") and "/model [ID]" in shown[0]
    assert shown[1].startswith("Agent: kiro") and "Turn: idle" in shown[1]
    assert shown[2].startswith("Models: small (current), large")
    assert shown[3:6] == [
        "Model set to large.",
        "Nothing is running.",
        "Started a fresh conversation; the agent will not see earlier messages.",
    ]
    assert shown[6] == "Echo: /compact"
    assert fake_agent.prompt_texts() == ["/compact"]  # everything else was ours
    in_group = [message.text for message in api.chat_messages(GROUP)]
    assert len(in_group) == 2
    assert in_group[0].startswith("Commands:")
    assert in_group[1] == "Nothing is running."
    # the menu is the engine's table
    assert [(c["command"], c["description"]) for c in api.commands] == command_menu()


# ---- approvals ---------------------------------------------------------------------------------
async def test_an_approval_is_refused_for_another_user_and_taken_from_the_requester(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} SCN_PERMISSION", thread=topic)

        def approval() -> Any:
            return next((m for m in api.chat_messages(GROUP) if m.reply_markup), None)

        await wait_for(approval, "the approval buttons", 15)
        message = approval()
        assert message.thread == topic and "Run echo hi" in message.text
        buttons = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        assert [b["text"] for b in buttons] == [
            "Yes",
            "Always",
            "No",
            "Trust this tool for this session",
        ]
        assert all(len(b["callback_data"].encode()) <= 64 for b in buttons)
        yes = buttons[0]["callback_data"]

        refused = api.press(BOB, message, yes)
        await wait_for(lambda: refused["callback_query"]["id"] in api.answers, "bob's answer")
        notice = api.answers[refused["callback_query"]["id"]]
        assert "Alice" in notice["text"] and notice["show_alert"] is True
        assert message.reply_markup  # still open
        taken = api.press(ALICE, message, yes)
        await wait_for(shows(api, GROUP, "permission:allow_once"), "the turn to go on", 15)
        await wait_for(lambda: message.reply_markup is None, "the buttons to go")
    assert "text" not in api.answers[taken["callback_query"]["id"]]  # answered, silently
    assert message.text.endswith("Answered: Yes")
    outcomes = [
        frame["result"]["outcome"]
        for frame in fake_agent.frames_in()
        if "method" not in frame and "outcome" in (frame.get("result") or {})
    ]
    assert outcomes == [{"outcome": "selected", "optionId": "allow_once"}]


# ---- delivery under pressure -----------------------------------------------------------------------
async def test_a_429_in_the_middle_of_streaming_pauses_the_chat_and_loses_nothing(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    steps = script(
        {"chunk": "part one. "},
        {"sleep": 0.5},
        {"chunk": "part two. "},
        {"sleep": 0.5},
        {"chunk": "part three."},
    )
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, steps)
        await wait_for(lambda: api.drafts, "the first draft")
        api.fail_next("sendMessageDraft", 429, retry_after=1)
        api.fail_next("sendMessage", 429, retry_after=1)
        await wait_for(shows(api, ALICE.id, "part three."), "the final text", 15)
    assert api.chat_text(ALICE.id) == "part one. part two. part three."
    calls = [c for c in api.calls_to(chat_id=ALICE.id, ok=False) if c.method != "sendChatAction"]
    limited = [index for index, call in enumerate(calls) if call.status == 429]
    assert len(limited) == 2
    for index in limited:  # the chat waited out retry_after before its next call
        assert calls[index + 1].at - calls[index].at >= 0.95
    assert [c.method for c in calls if c.ok][-1] == "sendMessage"


async def test_an_over_long_reply_is_split_within_4096_utf16_units_with_code_blocks_intact(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    prose = "\n\n".join(f"Paragraph {n} 🚀 with **bold** text. " * 12 for n in range(12))
    code = "\n".join(f"    value_{n} = compute({n}) < limit  # 🚀" for n in range(160))
    text = f"{prose}\n\n```python\n{code}\n```\n\nThe end."
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, script({"chunk": text}))
        await wait_for(shows(api, ALICE.id, "The end."), "every part", 20)
    sent = api.calls_to("sendMessage", chat_id=ALICE.id, ok=False)
    assert all(call.ok and call.params["parse_mode"] == "HTML" for call in sent)
    assert len(sent) >= 4
    for call in sent:
        visible = parse_html(call.params["text"])  # balanced tags, or the fake would refuse
        assert utf16_len(visible) <= 4096
        assert call.params["text"].count("<pre>") == call.params["text"].count("</pre>")
    with_code = [call.params["text"] for call in sent if "value_" in call.params["text"]]
    assert len(with_code) >= 2  # the block was split...
    for part in with_code:  # ...into parts that are each a whole code block
        assert '<pre><code class="language-python">' in part and part.count("</pre>") == 1
    shown_code = re.findall(r"value_(\d+) = compute", api.chat_text(ALICE.id))
    assert shown_code == [str(n) for n in range(160)]  # every line, in order, once


async def test_html_that_telegram_rejects_is_sent_again_as_plain_text(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.fail_next(
            "sendMessage",
            400,
            'Bad Request: can\'t parse entities: Unsupported start tag "x" at byte offset 0',
        )
        api.dm(ALICE, script({"chunk": "**Careful**: 1 < 2 & <tags>"}))
        await wait_for(lambda: api.chat_messages(ALICE.id), "the reply")
    rejected, plain = api.calls_to("sendMessage", chat_id=ALICE.id, ok=False)
    assert rejected.status == 400 and rejected.params["parse_mode"] == "HTML"
    assert rejected.params["text"] == "<b>Careful</b>: 1 &lt; 2 &amp; &lt;tags&gt;"
    assert plain.ok and "parse_mode" not in plain.params
    assert plain.params["text"] == "Careful: 1 < 2 & <tags>"


async def test_api_failures_become_the_surfaces_errors(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    settings = settings_for(tmp_path, fake_agent, api).telegram
    surface = TelegramSurface(settings, **(FAST | {"poll_timeout": 10.0}))
    for person in (ALICE, BOB, CAROL):
        api.private_chat(person)
    key = ConversationKey("telegram", str(ALICE.id))

    async def ignore(event: Any) -> None:
        return None

    async with anyio.create_task_group() as tg:
        await tg.start(surface.run, ignore)
        ref = await surface.send(key, "hello")
        await surface.edit(ref, "hello")  # not modified: fine
        with pytest.raises(MessageGone):
            await surface.edit(ref.__class__(key, "999999"), "gone")
        api.fail_next("sendMessage", 429, retry_after=3)
        with pytest.raises(RateLimited) as limited:
            await surface.send(key, "again")
        assert limited.value.retry_after == 3
        api.fail_next("sendMessage", 502, "Bad Gateway")
        with pytest.raises(SendFailed) as network:  # in another chat: alice's waits out the 429
            await surface.send(ConversationKey("telegram", str(CAROL.id)), "again")
        assert network.value.transient
        api.blocked.add(BOB.id)
        with pytest.raises(SendFailed) as blocked:
            await surface.send(ConversationKey("telegram", str(BOB.id)), "hi")
        assert not blocked.value.transient
        api.blocked.clear()
        stopping = anyio.current_time()
        tg.cancel_scope.cancel()
    assert anyio.current_time() - stopping < 4  # the 10 s long poll was cut, not waited out
    assert api.calls_to("getUpdates")[-1].params.get("timeout") == 0  # the offset confirmed
    await surface.send(ConversationKey("telegram", str(BOB.id)), "still works until close()")
    await surface.close()


# ---- webhook mode and restarts ---------------------------------------------------------------------
async def test_webhook_mode_rejects_a_wrong_secret_and_processes_the_right_one(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    port = free_port()
    settings = settings_for(
        tmp_path,
        fake_agent,
        api,
        webhook_url=f"http://127.0.0.1:{port}/telegram/hook",
        webhook_secret="right-secret_123",
        webhook_listen="127.0.0.1",
        webhook_port=port,
    )
    async with serving(settings):
        assert api.webhook == {
            "url": f"http://127.0.0.1:{port}/telegram/hook",
            "secret_token": "right-secret_123",
        }
        sneaky = api.take_update(api.dm(ALICE, "sneaky"))
        assert await api.post_webhook(sneaky, secret="wrong-secret") == 403
        assert await api.post_webhook(sneaky, secret=None) == 401
        real = api.take_update(api.dm(ALICE, "by webhook"))
        assert await api.post_webhook(real, secret="right-secret_123") == 200
        await wait_for(shows(api, ALICE.id, "Echo: by webhook"), "the reply")
    assert fake_agent.prompt_texts() == ["by webhook"]
    assert api.calls_to("getUpdates") == []


async def test_a_restarted_bot_resumes_the_conversation_with_session_load(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    settings = settings_for(tmp_path, fake_agent, api)
    async with serving(settings):
        api.dm(ALICE, "before the restart")
        await wait_for(shows(api, ALICE.id, "Echo: before the restart"), "the first reply")
    async with serving(settings):
        api.dm(ALICE, "after the restart")
        await wait_for(shows(api, ALICE.id, "Echo: after the restart"), "the second reply")
    (created,) = [
        r["frame"]["result"]["sessionId"]
        for r in fake_agent.records()
        if r.get("dir") == "out"
        and "sessionId" in ((r.get("frame") or {}).get("result") or {})
        and r["frame"]["result"]["sessionId"].startswith("sess-")
    ][:1]
    (loaded,) = fake_agent.frames_in("session/load")
    assert loaded["params"]["sessionId"] == created
    assert fake_agent.spawns() == 2
    assert "could not be restored" not in api.chat_text(ALICE.id)


async def test_a_reply_a_restart_cut_off_is_sent_before_the_new_bot_starts_receiving(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    settings = settings_for(tmp_path, fake_agent, api)
    api.private_chat(ALICE)
    api.blocked.add(ALICE.id)  # every send fails for good: the reply stays in the ledger
    async with serving(settings):
        api.dm(ALICE, "while blocked")
        await wait_for(lambda: api.calls_to("sendMessage", ok=False), "the failed reply")
    api.blocked.clear()
    async with serving(settings):
        await wait_for(shows(api, ALICE.id, "Echo: while blocked"), "the re-sent reply")
        resent = api.calls_to("sendMessage", chat_id=ALICE.id)[0]
        assert resent.at < api.calls_to("deleteWebhook")[-1].at  # before polling started
    assert fake_agent.prompt_texts() == ["while blocked"]  # re-sent, not asked again


async def test_switchboard_run_serves_telegram_and_stops_on_sigterm(
    tmp_path: Path,
    workspace: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,
    cli_env: dict[str, str],
) -> None:
    env = cli_env | run_env(fake_agent, workspace) | telegram_env(api, ALICE)
    async with switchboard_run(env, api, tmp_path):
        api.dm(ALICE, "hello from the CLI")
        await wait_for(shows(api, ALICE.id, "Echo: hello from the CLI"), "the reply")
    assert api.calls_to("getUpdates")[-1].params.get("timeout") == 0  # stopped polling cleanly


# ---- pure conversions ----------------------------------------------------------------------------
def test_markdown_becomes_balanced_telegram_html() -> None:
    source = (
        "# Title\n\nSome **bold**, *it*, ~~gone~~, `a<b` & [link](https://x.org/?a=1&b=2) "
        "[relative](notes.md) <script>\n\n- one\n- two\n  1. nested\n\n> quoted **q**\n\n"
        "```python\nif a < b:\n    pass\n```"
    )
    assert markdown_to_html(source) == (
        "<b>Title</b>\n\n"
        "Some <b>bold</b>, <i>it</i>, <s>gone</s>, <code>a&lt;b</code> &amp; "
        '<a href="https://x.org/?a=1&amp;b=2">link</a> relative &lt;script&gt;\n\n'
        "• one\n• two\n   1. nested\n\n"
        "<blockquote>quoted <b>q</b></blockquote>\n\n"
        '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>'
    )
    assert html_to_plain(markdown_to_html("**a** & `<b>`")) == "a & <b>"


def test_group_messages_count_only_when_addressed_to_the_bot() -> None:
    gate = GroupGate(frozenset({str(GROUP)}), frozenset({"help", "stop"}))
    group = {"id": GROUP, "type": "supergroup", "is_forum": True}
    root = {"message_id": 7, "from": {"id": 1}, "forum_topic_created": {"name": "t"}}
    bot_message = {"message_id": 9, "from": {"id": BOT_ID, "is_bot": True}}

    def update(text: str, **extra: Any) -> dict[str, Any]:
        message = {
            "message_id": 10,
            "chat": group,
            "from": {"id": ALICE.id, "first_name": "Alice", "is_bot": False},
            "text": text,
            "message_thread_id": 7,
            "is_topic_message": True,
            "reply_to_message": root,
            **extra,
        }
        return {"update_id": 5, "message": message}

    def inbound_from_update(data: dict[str, Any]) -> Inbound | None:
        received = received_from_update(data, ME, gate)
        return received.inbound() if received is not None and received.addressed else None

    def text_of(data: dict[str, Any]) -> str | None:
        inbound = inbound_from_update(data)
        return inbound.text if inbound else None

    assert text_of(update("hello all")) is None  # the topic's root is not "a reply to us"
    assert text_of(update(f"@{BOT_USERNAME}, look")) == "look"
    assert text_of(update("thanks", reply_to_message=bot_message)) == "thanks"
    # outside forums, a reply thread's id is its first message: a reply to the bot's own
    plain_group = {"id": GROUP, "type": "supergroup"}
    reply = update("and?", chat=plain_group, message_thread_id=9, reply_to_message=bot_message)
    del reply["message"]["is_topic_message"]
    assert text_of(reply) == "and?"
    assert text_of(update(f"/help@{BOT_USERNAME}")) == "/help"
    assert text_of(update("/help")) == "/help"
    assert text_of(update("/start")) is None  # bare, and not one of ours
    assert text_of(update("/help@other_bot")) is None
    inbound = inbound_from_update(update(f"@{BOT_USERNAME} go"))
    assert inbound is not None
    assert inbound.key == ConversationKey("telegram", str(GROUP), "7")
    assert (inbound.user.id, inbound.user.name, inbound.event_id) == (str(ALICE.id), "Alice", "5")
    elsewhere = update(f"@{BOT_USERNAME} go")
    elsewhere["message"]["chat"] = {"id": OTHER_GROUP, "type": "supergroup"}
    assert inbound_from_update(elsewhere) is None
    assert strip_mention(f"/model@{BOT_USERNAME} large", BOT_USERNAME) == "/model large"


# ---- text that cannot be encoded, and faults -------------------------------------------------------
# A lone surrogate, NUL, an escape sequence, an emoji and an astral noncharacter in one text.
HOSTILE = "a\ud800b\x00c \x1b[31m😀 \U0010ffff"
MADE_VALID = "a\ufffdbc [31m😀 \ufffd"


async def test_a_message_with_text_that_cannot_be_encoded_reaches_the_agent_valid(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, HOSTILE)
        await wait_for(shows(api, ALICE.id, f"Echo: {MADE_VALID}"), "alice's reply")
        api.dm(BOB, "still there?")
        await wait_for(shows(api, BOB.id, "Echo: still there?"), "bob's reply")
    assert fake_agent.prompt_texts() == [MADE_VALID, "still there?"]


async def test_an_agent_chunk_with_text_that_cannot_be_encoded_is_delivered_valid(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, script({"chunk": HOSTILE}, {"sleep": 0.2}, {"chunk": " end"}))
        await wait_for(shows(api, ALICE.id, f"{MADE_VALID} end"), "the reply")
        api.dm(BOB, "next")
        await wait_for(shows(api, BOB.id, "Echo: next"), "bob's reply")
    drafts = api.calls_to("sendMessageDraft", chat_id=ALICE.id)
    assert drafts and all("\ud800" not in call.params["text"] for call in drafts)


async def test_an_unexpected_exception_sending_to_one_chat_ends_its_turn_and_others_are_answered(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    api.garble_next("sendMessage", count=2, chat_id=ALICE.id)  # the final reply and its retry
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, "hello")
        await wait_for(shows(api, ALICE.id, "Something went wrong"), "the fault sentence")
        api.dm(BOB, "and me?")
        await wait_for(shows(api, BOB.id, "Echo: and me?"), "bob's reply")
        api.dm(ALICE, "again")
        await wait_for(shows(api, ALICE.id, "Echo: again"), "alice's next reply")
    (said, answered) = api.chat_messages(ALICE.id)
    assert said.text.startswith("Something went wrong on Switchboard's side while answering (")
    assert said.text.endswith("the details are in its log. Send your message again.")
    assert answered.text == "Echo: again"


async def test_a_group_reply_is_edited_live_under_a_stop_button_that_stops_it(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    steps = [{"chunk": "working"}, {"sleep": 30}, {"chunk": " never shown"}]
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {script(*steps)}", thread=topic)

        def live() -> Any:
            return next((m for m in api.chat_messages(GROUP, thread=topic) if m.reply_markup), None)

        await wait_for(live, "the live reply's Stop button", 15)
        message = live()
        assert message.text.startswith("working")
        (stop,) = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        assert stop["text"] == "Stop"
        api.press(ALICE, message, stop["callback_data"])
        await wait_for(lambda: message.reply_markup is None, "the final to take the button off")
        await wait_for(shows(api, GROUP, "The turn was stopped."), "the stop notice")
    assert "never shown" not in api.chat_text(GROUP)


async def test_an_unexpected_exception_in_a_group_preview_stops_only_that_preview(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    # previews in a group are 0.2 s apart at least: later ones are flushed by a scheduled task
    steps = [{"chunk": "one"}]
    for word in (" two", " three", " four", " five"):
        steps += [{"sleep": 0.05}, {"chunk": word}]
    api.garble_next("editMessageText", chat_id=GROUP)  # the first preview edit
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {script(*steps)}", thread=topic)
        await wait_for(shows(api, GROUP, "one two three four five"), "the whole reply", 15)
        api.dm(BOB, "and me?")
        await wait_for(shows(api, BOB.id, "Echo: and me?"), "bob's reply")
    garbled = [call for call in api.calls_to("editMessageText", ok=False) if call.status == 0]
    assert len(garbled) == 1
