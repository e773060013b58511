"""Issue 13 on Slack: files in (fetched only through `files.info` and the bot token, on Slack's
file host, cut off past the limit), files out (upload v2 into the thread), buttons on messages,
the agent's commands (`!name`) and App Home. The adapter runs the real slack-bolt and slack_sdk
against the fake Slack, in both Socket Mode and HTTP mode where the path differs."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    LivePart,
    MenuCommand,
    OutgoingFile,
)
from surfaces.errors import FileRefused
from surfaces.slack.adapter import SlackSurface
from surfaces.slack.convert import files_of
from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.slack_api import (
    BOT_TOKEN,
    BOT_USER_ID,
    FakeSlack,
    Message,
    button_press,
    channel_message,
    dm,
    envelope,
    file_share,
    home_opened,
    mention,
)
from tests.harness.slack import SlackDelivery, delivering, slack_settings
from tests.harness.surface import Received, running_surface
from tests.test_slack import BOB, DMS, SlackEnv, slack_bot

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

ALICE, STRANGER = "UALICE", "USTRANGER"
DM = "DALICE"
CHANNEL = "CGENERAL"
BOT = f"<@{BOT_USER_ID}>"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 200


@pytest.fixture(params=["socket", "http"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Env:
    def __init__(self, fake: FakeSlack, surface: SlackSurface, wire: SlackDelivery, got: Received):
        self.fake = fake
        self.surface = surface
        self.wire = wire
        self.events = got.events

    async def deliver(self, event: dict[str, Any]) -> None:
        await self.wire.deliver(envelope(event))

    async def press(self, payload: dict[str, Any]) -> None:
        await self.wire.press(payload)

    async def next_inbound(self, count: int = 1) -> Inbound:
        await wait_for(lambda: len(self.inbounds) >= count, "a message to reach the bot")
        return self.inbounds[count - 1]

    @property
    def inbounds(self) -> list[Inbound]:
        return [event for event in self.events if isinstance(event, Inbound)]

    async def share(self, text: str, *files: dict[str, Any], count: int = 1) -> Inbound:
        """Alice shares `files` in her DM with the bot; what reached the bot."""
        ts = self.fake.next_ts()
        await self.deliver(file_share(DM, ALICE, text, list(files), ts=ts))
        return await self.next_inbound(count)


@asynccontextmanager
async def slack(mode: str, **fake_options: Any) -> AsyncIterator[Env]:
    async with FakeSlack(**fake_options) as fake:
        settings = slack_settings(fake, mode, allowed_users=[ALICE])
        surface = SlackSurface(settings, min_edit_interval=0.01, stream_idle=0.3)
        got = Received()
        menu = [("new", "start afresh"), ("help", "this list")]
        async with (
            running_surface(surface, got, menu),
            delivering(fake, surface, mode) as wire,
        ):
            yield Env(fake, surface, wire, got)


# ---- files in ------------------------------------------------------------------------------------
async def test_a_file_share_reaches_the_bot_with_its_files_fetched_through_files_info(
    mode: str,
) -> None:
    async with slack(mode) as env:
        shot = env.fake.add_file("shot.png", "image/png", PNG)
        notes = env.fake.add_file("notes.txt", "text/plain", b"hello notes")
        inbound = await env.share(f"{BOT} what is this?", shot, notes)
        assert inbound.text == "what is this?"  # the caption, mention stripped
        image, document = inbound.files
        assert (image.name, image.mime, image.size, image.kind) == (
            "shot.png",
            "image/png",
            len(PNG),
            "image",
        )
        assert (document.name, document.kind) == ("notes.txt", "document")
        assert await image.fetch(1_000_000) == PNG
        assert await document.fetch(1_000_000) == b"hello notes"
    infos = [call.params["file"] for call in env.fake.calls_to("files.info")]
    assert infos == [shot["id"], notes["id"]]
    assert env.fake.downloads == [(shot["id"], BOT_TOKEN), (notes["id"], BOT_TOKEN)]


async def test_a_file_without_words_still_reaches_the_bot_and_kinds_follow_the_mime_type(
    mode: str,
) -> None:
    async with slack(mode) as env:
        voice = env.fake.add_file("memo.m4a", "audio/mp4", b"....")
        clip = env.fake.add_file("clip.mp4", "video/mp4", b"....")
        inbound = await env.share("", voice, clip)
    assert inbound.text == ""
    assert [file.kind for file in inbound.files] == ["audio", "video"]
    assert env.fake.calls_to("files.info") == []  # nothing is fetched until the bot asks


async def test_the_url_in_the_event_is_never_used_and_one_on_another_host_is_refused() -> None:
    async with slack("socket") as env:
        honest = env.fake.add_file("a.png", "image/png", PNG)
        honest["url_private_download"] = "http://attacker.example/steal"  # in the event only
        inbound = await env.share("look", honest)
        assert await inbound.files[0].fetch(10_000) == PNG  # from files.info's URL
        elsewhere = env.fake.add_file("b.png", "image/png", PNG, url="http://attacker.example/b")
        other = await env.share("and this", elsewhere, count=2)
        with pytest.raises(FileRefused) as refused:
            await other.files[0].fetch(10_000)
    assert "not its own file host" in refused.value.reason
    assert [file_id for file_id, _ in env.fake.downloads] == [honest["id"]]


async def test_a_file_past_the_limit_is_cut_off_even_when_slack_claims_it_is_small() -> None:
    async with slack("socket") as env:
        big = env.fake.add_file("big.log", "text/plain", b"x" * 5000)
        liar = env.fake.add_file("liar.log", "text/plain", b"y" * 5000, size=10, chunked=True)
        inbound = await env.share("logs", big, liar)
        with pytest.raises(FileRefused) as claimed:
            await inbound.files[0].fetch(1000)
        with pytest.raises(FileRefused) as streamed:
            await inbound.files[1].fetch(1000)
    assert claimed.value.limit == streamed.value.limit == 1000
    assert claimed.value.reason[0].isupper() and claimed.value.reason.endswith(".")
    # the one Slack claimed was small was downloaded, and cut off past the limit
    assert [file_id for file_id, _ in env.fake.downloads] == [liar["id"]]


async def test_a_file_slack_hides_or_deleted_is_refused_with_a_sentence() -> None:
    async with slack("socket") as env:
        hidden = env.fake.add_file("old.pdf", "application/pdf", b"%PDF", mode="hidden_by_limit")
        later = env.fake.add_file("gone.pdf", "application/pdf", b"%PDF")
        inbound = await env.share("these", hidden, later)
        env.fake.files[later["id"]].mode = "tombstone"  # deleted after it was shared
        reasons = []
        for file in inbound.files:
            with pytest.raises(FileRefused) as refused:
                await file.fetch(10_000)
            reasons.append(refused.value.reason)
    assert "storage limit" in reasons[0] and "deleted" in reasons[1]
    assert env.fake.downloads == []


# ---- files out -----------------------------------------------------------------------------------
async def test_send_file_uploads_into_the_conversations_thread_with_upload_v2() -> None:
    async with slack("socket") as env:
        key = ConversationKey("slack", CHANNEL, "1700000000.000001")
        await env.surface.send_file(key, OutgoingFile("chart.png", PNG, "image/png", "the chart"))
        (upload,) = env.fake.uploads
        assert (upload.channel, upload.thread_ts, upload.name, upload.data) == (
            CHANNEL,
            key.thread,
            "chart.png",
            PNG,
        )
        assert upload.comment == "the chart"
        assert env.surface.capabilities.max_upload_bytes == 1_000_000_000
    methods = [call.method for call in env.fake.calls if call.method.startswith("files.")]
    assert methods == ["files.getUploadURLExternal", "files.completeUploadExternal"]


async def test_a_file_past_slacks_upload_limit_is_refused_with_a_sentence() -> None:
    async with slack("socket", upload_limit=100) as env:
        with pytest.raises(FileRefused) as refused:
            await env.surface.send_file(
                ConversationKey("slack", DM), OutgoingFile("big.bin", b"z" * 101)
            )
    assert refused.value.reason == "Slack refused the file as too large."
    assert env.fake.uploads == []


# ---- buttons on messages -------------------------------------------------------------------------
STOP = Choice("stop-token-1", "Stop", "danger")


async def test_buttons_on_a_message_are_pressed_as_a_choice_and_an_edit_without_them_drops_them(
    mode: str,
) -> None:
    async with slack(mode) as env:
        key = ConversationKey("slack", DM)  # the top of a DM: posted and updated
        ref = await env.surface.send(key, "working <on it>", buttons=[STOP])
        message = env.fake.messages[ref.id]
        assert [button["value"] for button in message.buttons] == [STOP.token]
        assert message.visible == "working &lt;on it&gt;"  # the fallback text, escaped
        assert message.blocks[0]["text"] == {"type": "mrkdwn", "text": "working &lt;on it&gt;"}
        await env.surface.edit(ref, "working more", buttons=[STOP])
        assert len(message.buttons) == 1 and "working more" in str(message.blocks)
        await env.press(button_press(DM, ALICE, message, STOP.token))
        await wait_for(lambda: any(isinstance(e, ChoiceAnswer) for e in env.events), "a press")
        await env.surface.edit(ref, "*done*", formatted=True)
        assert message.blocks == [] and message.text == "*done*"
    answer = next(event for event in env.events if isinstance(event, ChoiceAnswer))
    assert (answer.token, answer.key, answer.user.id) == (STOP.token, key, ALICE)


async def test_a_streamed_reply_gets_its_buttons_when_its_stream_goes_quiet() -> None:
    async with slack("socket") as env:
        thread = env.fake.next_ts()
        await env.deliver(mention(CHANNEL, ALICE, f"{BOT} go", ts=thread))
        await env.next_inbound()
        key = ConversationKey("slack", CHANNEL, thread)
        live = env.surface.open_live(key)
        await live.show([LivePart("streamed")], buttons=[STOP])
        (message,) = env.fake.streaming_now()
        assert message.buttons == []  # a stream cannot carry them
        await live.show([LivePart("streamed and more")], buttons=[STOP])
        assert message.text == "streamed and more"  # appended to the stream
        # the agent works without writing: the quiet stream is stopped, with the button
        await wait_for(lambda: not message.streaming, "the quiet stream to stop")
        assert [b["value"] for b in message.buttons] == [STOP.token]
        stop = env.fake.calls_to("chat.stopStream")[-1]
        assert stop.params["blocks"][0]["block_id"] == "switchboard-choice-live"
        await live.show([LivePart("streamed and more")], "still working", buttons=[STOP])
        assert "still working" in str(message.blocks) and len(message.buttons) == 1
        await live.finish([env.surface.render("streamed and more, done")])
    assert message.blocks == [] and message.text == "streamed and more, done"


async def test_a_live_reply_makes_no_call_that_changes_nothing_and_changes_buttons_alone() -> None:
    async with slack("socket") as env:
        key = ConversationKey("slack", DM)  # the top of a DM: posted and updated, not streamed
        live = env.surface.open_live(key)

        def writes() -> int:
            return len([call for call in env.fake.calls if call.method.startswith("chat.")])

        await live.show([LivePart("working")], "reading a file", buttons=[STOP])
        (message,) = env.fake.replies(DM)
        assert writes() == 1 and [b["value"] for b in message.buttons] == [STOP.token]
        await live.show([LivePart("working")], "reading a file", buttons=[STOP])
        assert writes() == 1  # the same again: no call
        await live.show([LivePart("working")], "reading a file")
        assert writes() == 2 and message.buttons == []  # the same text, the button gone
        assert message.text == "working\n\n⋯ reading a file"
        await live.finish([env.surface.render("working")])
        await live.finish([env.surface.render("working")])  # finished already: nothing left
        assert writes() == 3 and message.text == "working"


# ---- the agent's commands and App Home -----------------------------------------------------------
async def test_bang_name_of_an_agent_command_reaches_the_bot_as_the_slash_command(
    mode: str,
) -> None:
    async with slack(mode) as env:
        key = ConversationKey("slack", DM)
        commands = [MenuCommand("context", "show context", "[detail]"), MenuCommand("new", "x")]
        await env.surface.agent_command_menu(key, commands)
        for text in ("!context full", "!help", "!!new", "!unknown"):
            await env.deliver(dm(DM, ALICE, text, ts=env.fake.next_ts()))
        await env.next_inbound(4)
    # ours (`!help`, and `!new`: the agent's twin is `!!new`) and unknown names stay as typed
    assert [inbound.text for inbound in env.inbounds] == [
        "/context full",
        "!help",
        "!!new",
        "!unknown",
    ]


async def test_app_home_shows_the_commands_and_recent_conversations_and_a_stranger_no_access(
    mode: str,
) -> None:
    async with slack(mode) as env:
        await env.deliver(dm(DM, ALICE, "please refactor the parser", ts=env.fake.next_ts()))
        await env.deliver(dm("DSTRANGER", STRANGER, "let me in", ts=env.fake.next_ts()))
        await env.next_inbound(2)
        await env.surface.agent_command_menu(
            ConversationKey("slack", DM), [MenuCommand("review", "review a diff", "[PR]")]
        )
        await env.deliver(home_opened(ALICE))
        await env.deliver(home_opened(STRANGER))
        await wait_for(lambda: len(env.fake.views) == 2, "both Home views")
    home = str(env.fake.views[ALICE])
    for shown in ("`!new`", "`!help`", "`!review`", "[PR]", "please refactor the parser"):
        assert shown in home
    stranger = str(env.fake.views[STRANGER])
    assert "do not have access" in stranger and "let me in" not in stranger


async def test_home_keeps_a_bounded_number_of_conversations_per_person() -> None:
    async with slack("socket") as env:
        for n in range(15):
            ts = env.fake.next_ts()
            await env.deliver(channel_message(CHANNEL, ALICE, f"{BOT} topic {n}", ts=ts))
        await env.next_inbound(15)
        await env.deliver(home_opened(ALICE))
        await wait_for(lambda: ALICE in env.fake.views, "the Home view")
    home = str(env.fake.views[ALICE])
    assert "topic 14" in home and "topic 5" in home and "topic 4" not in home


def test_a_shared_file_without_an_id_is_kept_to_be_answered_not_dropped() -> None:
    files = files_of({"files": [{"name": "x.png", "mimetype": "image/png"}, "junk"]})
    assert [(f.name, f.kind, f.unavailable) for f in files] == [
        ("x.png", "image", "Slack did not say which file this is.")
    ]
    assert files_of({"files": "not a list"}) == ()


# ---- end to end: the real BotApp and the scripted fake agent -------------------------------------
IMAGES = ("--prompt-capabilities", '{"image": true}')
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 40


def prompt_blocks(fake: FakeAgent) -> list[list[dict[str, Any]]]:
    return [frame["params"]["prompt"] for frame in fake.frames_in("session/prompt")]


async def share_in_dm(env: SlackEnv, user: str, text: str, *files: dict[str, Any]) -> None:
    ts = env.fake.next_ts()
    await env.deliver(envelope(file_share(DMS[user], user, text, list(files), ts=ts)))


async def test_an_image_share_reaches_an_agent_that_takes_images_as_an_image_block(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode, *IMAGES) as env:
        shot = env.fake.add_file("shot.png", "image/png", PNG)
        await share_in_dm(env, ALICE, "what is this?", shot)
        said = await env.answered(DMS[ALICE], "", "[received:")
    (blocks,) = prompt_blocks(fake_agent)
    assert blocks == [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
    ]
    assert f"[received: image image/png {len(PNG)}B]" in said
    assert env.fake.downloads == [(shot["id"], BOT_TOKEN)]


async def test_an_image_without_words_to_an_agent_without_images_is_saved_and_linked(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        await share_in_dm(env, ALICE, "", env.fake.add_file("cat.png", "image/png", PNG))
        await env.answered(DMS[ALICE], "", "[received:")
    (blocks,) = prompt_blocks(fake_agent)
    text, link = blocks
    assert text["type"] == "text" and text["text"].startswith("I am sending you this file")
    assert (link["type"], link["name"], link["size"]) == ("resource_link", "cat.png", len(PNG))
    (saved,) = (tmp_path / ".switchboard" / "inbox").glob("*/cat.png")
    assert saved.read_bytes() == PNG and link["uri"] == saved.as_uri()


async def test_a_document_shared_in_a_channel_thread_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        notes = env.fake.add_file("notes.md", "text/markdown", b"# Notes\nall fine\n")
        ts = env.fake.next_ts()
        event = file_share(
            CHANNEL, ALICE, f"{BOT} summarise", [notes], ts=ts, channel_type="channel"
        )
        await env.deliver(envelope(event))
        said = await env.answered(CHANNEL, ts, "[received:")
    assert "resource_link notes.md" in said
    (blocks,) = prompt_blocks(fake_agent)
    assert blocks[0] == {"type": "text", "text": "summarise"}


async def test_an_oversized_and_a_forbidden_file_are_refused_with_a_sentence(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    async with slack_bot(
        tmp_path, fake_agent, mode, *IMAGES, settings={"max_file_bytes": 1000}
    ) as env:
        big = env.fake.add_file("huge.pdf", "application/pdf", b"%PDF-" + b"0" * 2000)
        program = env.fake.add_file("totally-a-photo.png", "image/png", ELF)
        fine = env.fake.add_file("fine.png", "image/png", PNG)
        await share_in_dm(env, ALICE, "look", big, program, fine)
        said = await env.answered(DMS[ALICE], "", "[received:")
    assert "huge.pdf was not sent to the agent: it is 2 KB, over the limit" in said
    assert "totally-a-photo.png was not sent to the agent: it is a program" in said
    assert f"[received: image image/png {len(PNG)}B]" in said
    assert big["id"] not in [file_id for file_id, _ in env.fake.downloads]  # never fetched


async def test_a_file_slack_hides_is_answered_with_slacks_reason(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        hidden = env.fake.add_file("old.pdf", "application/pdf", b"%PDF", mode="hidden_by_limit")
        await share_in_dm(env, ALICE, "this one", hidden)
        said = await env.answered(DMS[ALICE], "", "storage limit")
    assert "old.pdf" in said and "storage limit" in said


# ---- end to end: the agent's files, progress, Stop, the footer, the agent's commands -------------
def _agent_block(content: dict[str, Any]) -> dict[str, Any]:
    return {"update": {"sessionUpdate": "agent_message_chunk", "content": content}}


PLAN = {
    "sessionUpdate": "plan",
    "entries": [
        {"content": "Read the parser", "status": "completed", "priority": "high"},
        {"content": "Fix the off-by-one", "status": "in_progress", "priority": "high"},
        {"content": "Run the tests", "status": "pending", "priority": "medium"},
    ],
}
PLAN_SHOWN = "Plan (1/3):\n✓ Read the parser\n▸ Fix the off-by-one\n○ Run the tests"


def _tool(call_id: str, title: str, kind: str, **raw: str) -> dict[str, Any]:
    update = {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title, "kind": kind}
    return {"update": update | {"status": "in_progress", "rawInput": raw}}


def _done(call_id: str) -> dict[str, Any]:
    return {
        "update": {
            "sessionUpdate": "tool_call_update",
            "toolCallId": call_id,
            "status": "completed",
        }
    }


def shown_texts(env: SlackEnv, channel: str) -> list[str]:
    """Every text the bot posted or updated in `channel` (streams are Markdown, not shown here)."""
    return [
        str(call.params.get("text") or "")
        for call in env.fake.calls
        if call.method in ("chat.postMessage", "chat.update") and call.channel == channel
    ]


async def test_an_image_and_a_file_from_the_agent_are_uploaded_in_the_thread(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    (tmp_path / "report.csv").write_text("a,b\n1,2\n")
    image = {"type": "image", "mimeType": "image/png", "data": base64.b64encode(PNG).decode()}
    link = {
        "type": "resource_link",
        "uri": (tmp_path / "report.csv").as_uri(),
        "name": "report.csv",
    }
    steps = script({"chunk": "Here you go."}, _agent_block(image), _agent_block(link))
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        thread = await env.mention(ALICE, steps)
        await wait_for(lambda: len(env.fake.uploads) == 2, "two uploads", 15)
        await env.answered(CHANNEL, thread, "Here you go.")
    picture, document = env.fake.uploads
    assert (picture.channel, picture.thread_ts, picture.data) == (CHANNEL, thread, PNG)
    assert picture.name.endswith(".png")
    assert (document.thread_ts, document.name, document.data) == (
        thread,
        "report.csv",
        b"a,b\n1,2\n",
    )


async def test_the_plan_and_tools_show_in_the_live_message_and_the_footer_at_the_end(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    usage = {"update": {"sessionUpdate": "usage_update", "used": 42, "size": 100}}
    steps = script(
        {"chunk": "On it."},
        {"update": PLAN},
        _tool("t1", "Read file", "read", path="src/a.py"),
        {"sleep": 0.6},
        _done("t1"),
        {"sleep": 0.6},
        usage,
        {"chunk": " Done."},
    )
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        await env.dm(ALICE, steps)  # the top of a DM: posted and updated
        await env.answered(DMS[ALICE], "", "Context 42%")
    assert any(
        PLAN_SHOWN in text and "Read file (src/a.py)" in text
        for text in shown_texts(env, DMS[ALICE])
    )
    (final,) = env.fake.replies(DMS[ALICE])
    assert final.visible.startswith("On it. Done.") and final.visible.endswith("Context 42%")
    assert "Tools: 1 read" in final.visible and "Plan (" not in final.visible
    assert final.blocks == []  # the Stop button went with the turn


async def test_a_streamed_reply_shows_progress_and_stop_once_the_agent_works_quietly(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    steps = script(
        {"chunk": "Looking."},
        {"update": PLAN},
        _tool("t1", "Search", "search", pattern="off-by-one"),
        {"sleep": 1.5},  # longer than the stream's idle time: the stream is stopped
        _done("t1"),
        {"chunk": " All green."},
    )
    async with slack_bot(tmp_path, fake_agent, "socket") as env:
        thread = await env.mention(ALICE, steps)
        text = await env.answered(CHANNEL, thread, "Tools: 1 search")
    assert env.fake.calls_to("chat.startStream")  # the words were streamed natively
    streamed = "".join(
        str(call.params.get("markdown_text") or call.params.get("chunks") or "")
        for call in env.fake.calls_to("chat.appendStream") + env.fake.calls_to("chat.startStream")
    )
    assert "Plan (" not in streamed  # the progress is never streamed: it cannot be taken back
    stops = env.fake.calls_to("chat.stopStream")
    assert any(call.params.get("blocks") for call in stops)  # Stop, when the stream went quiet
    progress = [s for s in shown_texts(env, CHANNEL) if PLAN_SHOWN in s and "Search" in s]
    assert progress and "All green." not in progress[0]  # shown while the agent was quiet
    assert text.startswith("Looking. All green.") and "Tools: 1 search" in text


async def test_the_stop_button_on_the_live_message_stops_the_turn(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    hanging = script({"chunk": "working on it"}, {"hang": True})
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        await env.dm(ALICE, hanging)

        def live() -> Message | None:
            return next((m for m in env.fake.replies(DMS[ALICE]) if m.buttons), None)

        await wait_for(live, "the live message with its Stop button", 15)
        message = live()
        assert message is not None and "working on it" in message.visible
        (button,) = message.buttons
        assert button["text"]["text"] == "Stop"
        await env.press(button_press(DMS[ALICE], BOB, message, button["value"]))  # not his
        await env.press(button_press(DMS[ALICE], ALICE, message, button["value"]))
        await wait_for(lambda: fake_agent.frames_in("session/cancel"), "the cancel", 15)
        await env.answered(DMS[ALICE], "", "The turn was stopped.")
    assert all(not m.buttons for m in env.fake.replies(DMS[ALICE]))
    assert len(fake_agent.frames_in("session/cancel")) == 1


async def test_the_agents_commands_work_as_bang_name_and_show_in_app_home(
    tmp_path: Path, fake_agent: FakeAgent, mode: str
) -> None:
    listed = [
        {"name": "review", "description": "Review the diff", "input": {"hint": "PATH"}},
        {"name": "status", "description": "The agent's status"},
    ]
    commands = {
        "update": {"sessionUpdate": "available_commands_update", "availableCommands": listed}
    }
    async with slack_bot(tmp_path, fake_agent, mode) as env:
        await env.dm(ALICE, script(commands, {"chunk": "ready"}))
        await env.answered(DMS[ALICE], "", "ready")
        await wait_for(
            lambda: env.surface._home.agent_names(ConversationKey("slack", DMS[ALICE])),
            "the agent's commands to reach the surface",
        )
        await env.dm(ALICE, "!review src/a.py")
        await env.answered(DMS[ALICE], "", "Echo: /review src/a.py")
        await env.dm(ALICE, "!!status")
        await wait_for(lambda: "/status" in fake_agent.prompt_texts(), "the agent's /status")
        await env.deliver(envelope(home_opened(ALICE)))
        await wait_for(lambda: ALICE in env.fake.views, "the Home view")
    home = str(env.fake.views[ALICE])
    assert "`!review`" in home and "PATH" in home and "`!status`" in home  # ours, and the agent's
    assert "!!status" in home  # the first words of her last message
