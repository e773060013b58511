"""Issue 13 on Telegram: files in and out, buttons on messages, the agent's commands in each
chat's menu. The real python-telegram-bot, through our adapter, against the fake Bot API
(tests/fakes/telegram_api.py); the adapter runs alone here, handing what people do to a list."""

from __future__ import annotations

import base64
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bot.commands import command_menu
from config import Settings
from config.settings import TelegramSettings
from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    LivePart,
    MenuCommand,
    MessageRef,
    OutgoingFile,
)
from surfaces.errors import FileRefused, RateLimited
from surfaces.telegram.adapter import TelegramSurface
from surfaces.telegram.convert import BotIdentity, GroupGate, agent_menu, received_from_update
from surfaces.telegram.errors import BOT_API
from surfaces.telegram.files import MAX_PHOTO_BYTES, caption_text
from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import BOT_ID, BOT_USERNAME, FakeBotApi, People, utf16_len
from tests.harness.surface import Received, running_surface
from tests.harness.telegram import ids, telegram_access, telegram_settings
from tests.harness.telegram import serving as serving_telegram

pytestmark = pytest.mark.anyio

GROUP = -1001234567890  # allowlisted, a forum
PEOPLE = People()
ALICE, BOB = PEOPLE.alice, PEOPLE.bob
FAST: dict[str, Any] = {
    "min_edit_interval": 0.01,
    "group_preview_interval": 0.05,
    "poll_timeout": 2.0,
    "shutdown_timeout": 3.0,
    "album_quiet": 0.3,
    "album_limit": 2.0,
}
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
JPEG = b"\xff\xd8\xff\xe0" + b"\1" * 2000
MB = 1024 * 1024
ALICE_DM = ConversationKey("telegram", str(ALICE.id))


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team", forum=True)
        fake.private_chat(ALICE)
        fake.private_chat(BOB)
        yield fake


@asynccontextmanager
async def receiving(
    api: FakeBotApi, **options: Any
) -> AsyncIterator[tuple[TelegramSurface, Received]]:
    settings = TelegramSettings(**telegram_access(api, ALICE, BOB, allowed_chats=[str(GROUP)]))
    surface = TelegramSurface(settings, **(FAST | options))
    received = Received()
    async with running_surface(surface, received, command_menu()):
        yield surface, received


# ---- files in ----------------------------------------------------------------------------------
async def test_a_photo_without_a_caption_reaches_the_bot_as_its_largest_size(
    api: FakeBotApi,
) -> None:
    async with receiving(api) as (_, received):
        api.post_photo(ALICE.id, ALICE, JPEG)
        (message,) = await received.one()
        assert message.text == ""
        (photo,) = message.files
        assert (photo.kind, photo.mime, photo.size, photo.name) == ("image", "image/jpeg", 2004, "")
        assert await photo.fetch(10 * MB) == JPEG  # the full size, not the thumbnail
        (get_file,) = api.calls_to("getFile")
        assert api.files[get_file.params["file_id"]].data == JPEG
        assert len(api.downloads) == 1


async def test_a_caption_is_the_text_and_in_a_group_its_mention_addresses_the_bot(
    api: FakeBotApi,
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    async with receiving(api) as (_, received):
        api.post_photo(GROUP, BOB, JPEG, thread=topic)  # not for the bot: people share photos
        api.post_photo(GROUP, ALICE, PNG, f"@{BOT_USERNAME} what is this?", thread=topic)
        api.post_photo(ALICE.id, ALICE, JPEG, "and in a DM")
        messages = await received.one(2)
        await anyio.sleep(0.2)
    assert [(m.key.chat, m.key.thread, m.text) for m in received.messages] == [
        (str(GROUP), str(topic), "what is this?"),
        (str(ALICE.id), "", "and in a DM"),
    ]
    assert all(len(message.files) == 1 for message in messages)


async def test_documents_voice_notes_audio_and_video_carry_their_names_types_and_sizes(
    api: FakeBotApi,
) -> None:
    async with receiving(api) as (_, received):
        api.post_document(ALICE.id, ALICE, b"%PDF-1.7 ...", "report.pdf", "application/pdf", "see")
        api.post_voice(ALICE.id, ALICE, b"OggS voice")
        audio = api.store_file(
            b"ID3 song", file_name="song.mp3", mime_type="audio/mpeg", duration=1
        )
        api.post_media(ALICE.id, ALICE, {"audio": audio})
        video = api.store_file(
            b"\0\0\0\x18ftypmp42",
            file_name="clip.mp4",
            mime_type="video/mp4",
            width=64,
            height=64,
            duration=1,
        )
        api.post_media(ALICE.id, ALICE, {"video": video})
        api.post_media(
            ALICE.id, ALICE, {"video_note": api.store_file(b"note", length=240, duration=1)}
        )
        messages = await received.one(5)
        files = [message.files[0] for message in messages]
        assert await files[1].fetch(100) == b"OggS voice"
    assert [(f.kind, f.name, f.mime, f.size) for f in files] == [
        ("document", "report.pdf", "application/pdf", 12),
        ("voice", "", "audio/ogg", 10),
        ("audio", "song.mp3", "audio/mpeg", 8),
        ("video", "clip.mp4", "video/mp4", 12),
        ("video", "", "", 4),
    ]
    assert messages[0].text == "see"


async def test_a_download_never_runs_past_the_limit_asked_for(api: FakeBotApi) -> None:
    async with receiving(api) as (_, received):
        api.post_document(ALICE.id, ALICE, b"x" * 5000, "a.txt", "text/plain")
        api.post_document(ALICE.id, ALICE, b"y" * 5000, "b.txt", "text/plain", claimed_size=None)
        claimed, unclaimed = [message.files[0] for message in await received.one(2)]
        with pytest.raises(FileRefused) as refused:
            await claimed.fetch(1000)
        assert refused.value.limit == 1000
        assert api.calls_to("getFile") == []  # refused from the size Telegram gave
        with pytest.raises(FileRefused) as cut:
            await unclaimed.fetch(1000)  # no size known: the stream is cut past the limit
        assert cut.value.limit == 1000
        assert cut.value.reason.startswith("The file is larger than")
        assert await unclaimed.fetch(5000) == b"y" * 5000


async def test_a_file_over_20_mb_is_refused_with_a_sentence_as_telegram_refuses_it(
    api: FakeBotApi,
) -> None:
    big = b"z" * (20 * MB + 1)
    async with receiving(api) as (surface, received):
        assert surface.capabilities.max_download_bytes == 20 * MB
        api.post_document(ALICE.id, ALICE, big, "big.log", "text/plain")
        api.post_document(ALICE.id, ALICE, big, "big2.log", "text/plain", claimed_size=None)
        claimed, unclaimed = [message.files[0] for message in await received.one(2)]
        for file in (claimed, unclaimed):
            with pytest.raises(FileRefused) as refused:
                await file.fetch(100 * MB)
            assert refused.value.reason == "Telegram does not let bots download files over 20 MB."
        (get_file,) = api.calls_to("getFile", ok=False)  # only the one with no size asked
        assert get_file.description == "Bad Request: file is too big"
        assert api.downloads == []


async def test_stickers_locations_and_content_no_agent_takes_are_answered_not_dropped(
    api: FakeBotApi,
) -> None:
    async with receiving(api) as (_, received):
        shape = {"width": 512, "height": 512, "type": "regular"}
        sticker = api.store_file(b"RIFF....WEBPVP8 ", is_animated=False, is_video=False, **shape)
        api.post_media(ALICE.id, ALICE, {"sticker": sticker})
        moving = api.store_file(b"tgs", is_animated=True, is_video=False, **shape)
        api.post_media(ALICE.id, ALICE, {"sticker": moving})
        api.post_media(ALICE.id, ALICE, {"location": {"latitude": 52.5, "longitude": 13.4}})
        api.post_media(ALICE.id, ALICE, {"game": {"title": "g", "description": "d", "photo": []}})
        api.post_media(ALICE.id, ALICE, {"new_chat_title": "renamed"})  # a service message
        messages = await received.one(4)
        await anyio.sleep(0.2)
    assert len(received.messages) == 4
    still, animated, location, game = messages
    assert (still.files[0].kind, still.files[0].mime) == ("image", "image/webp")
    assert location.text == "[Location: 52.5, 13.4]" and location.files == ()
    for message, sentence in (
        (animated, "Animated stickers carry nothing an agent can read; send a picture or text."),
        (game, "An agent cannot play or read a Telegram game."),
    ):
        (file,) = message.files
        assert file.name in ("The animated sticker", "The game")
        with pytest.raises(FileRefused) as refused:
            await file.fetch(MB)
        assert refused.value.reason == sentence


def test_what_a_message_carries_is_read_defensively() -> None:
    gate = GroupGate(frozenset({str(GROUP)}))
    me = BotIdentity(BOT_ID, BOT_USERNAME)

    def received(**content: Any) -> Any:
        message = {
            "message_id": 3,
            "chat": {"id": ALICE.id, "type": "private"},
            "from": {"id": ALICE.id, "first_name": "Alice", "is_bot": False},
            **content,
        }
        return received_from_update({"update_id": 9, "message": message}, me, gate)

    sizes = [
        {"file_id": "small", "file_size": 10, "width": 90},
        {"file_id": "huge", "file_size": 30 * MB, "width": 9000},  # past what bots may fetch
        {"file_id": "best", "file_size": 900, "width": 1280},
        {"width": 2000},  # no file id
        "not a size",
    ]
    (photo,) = received(photo=sizes).files
    assert (photo.file_id, photo.size, photo.kind) == ("best", 900, "image")
    odd = received(photo="nope", document={"file_id": "d", "file_size": True, "file_name": 5})
    (document,) = odd.files
    assert (document.size, document.name) == (None, "5")  # a bool is no size
    traversal = received(document={"file_id": "t", "file_name": "../../etc/passwd"})
    assert traversal.files[0].name == "../../etc/passwd"  # the bot sanitises names
    assert received(new_chat_members=[{"id": 1}]) is None
    poll = received(poll={"question": "Lunch?", "options": [{"text": "yes"}, {"text": "no"}]})
    assert poll.text == "[Poll: Lunch? — yes; no]"
    assert received(dice={"emoji": "🎲", "value": 4}).text == "[Dice 🎲: 4]"


async def test_an_album_is_one_message_and_what_follows_it_stays_behind_it(
    api: FakeBotApi,
) -> None:
    async with receiving(api) as (_, received):
        api.post_album(ALICE.id, ALICE, [JPEG, PNG, b"\xff\xd8\xff third"], "three shots")
        api.dm(ALICE, "and a question")
        album, question = await received.one(2)
        assert [await file.fetch(MB) for file in album.files] == [JPEG, PNG, b"\xff\xd8\xff third"]
    assert album.text == "three shots"
    assert question.text == "and a question"


async def test_a_group_album_counts_when_any_part_is_addressed(api: FakeBotApi) -> None:
    topic = api.add_topic(GROUP, ALICE)
    async with receiving(api) as (_, received):
        api.post_album(GROUP, BOB, [JPEG, PNG], "holiday", thread=topic)  # not for the bot
        parts = api.post_album(GROUP, ALICE, [JPEG, PNG], thread=topic)
        assert len(parts) == 2
        api.post_media(
            GROUP,
            ALICE,
            {"photo": api.photo_sizes(b"\xff\xd8\xff last")},
            f"@{BOT_USERNAME} compare these",
            thread=topic,
            media_group=parts[0]["message"]["media_group_id"],
        )
        (album,) = await received.one()
        await anyio.sleep(0.5)
    assert len(received.messages) == 1
    assert album.text == "compare these" and len(album.files) == 3


# ---- files out ---------------------------------------------------------------------------------
async def test_send_file_sends_pictures_as_photos_and_the_rest_as_documents(
    api: FakeBotApi,
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    in_topic = ConversationKey("telegram", str(GROUP), str(topic))
    async with receiving(api) as (surface, _):
        assert (MAX_PHOTO_BYTES, surface.capabilities.max_upload_bytes) == (10 * MB, 50 * MB)
        await surface.send_file(in_topic, OutgoingFile("shot.png", PNG, "image/png", "the chart"))
        await surface.send_file(ALICE_DM, OutgoingFile("notes.md", b"# hi", "text/markdown"))
        big_png = b"\x89PNG" + b"\0" * (10 * MB)
        await surface.send_file(ALICE_DM, OutgoingFile("big.png", big_png, "image/png"))
        await surface.send_file(ALICE_DM, OutgoingFile("logo.svg", b"<svg/>", "image/svg+xml"))
        ref = await surface.send_file(
            ALICE_DM, OutgoingFile("a.txt", b"a", "text/plain", "é" * 2000)
        )
    assert [(u.method, u.chat_id, u.thread, u.name) for u in api.uploads] == [
        ("photo", GROUP, topic, "shot.png"),
        ("document", ALICE.id, None, "notes.md"),
        ("document", ALICE.id, None, "big.png"),
        ("document", ALICE.id, None, "logo.svg"),
        ("document", ALICE.id, None, "a.txt"),
    ]
    assert api.uploads[0].data == PNG and api.uploads[0].caption == "the chart"
    assert utf16_len(api.uploads[-1].caption) == 1024 and api.uploads[-1].caption.endswith("…")
    assert isinstance(ref, MessageRef) and (ALICE.id, int(ref.id)) in api.messages


async def test_uploads_go_through_the_error_table_and_a_refused_photo_goes_as_a_document(
    api: FakeBotApi,
) -> None:
    async with receiving(api) as (surface, _):
        api.fail_next("sendPhoto", 429, retry_after=2)
        with pytest.raises(RateLimited) as limited:
            await surface.send_file(ALICE_DM, OutgoingFile("a.png", PNG, "image/png"))
        assert limited.value.retry_after == 2
        api.fail_next("sendPhoto", 400, "Bad Request: PHOTO_INVALID_DIMENSIONS")
        await surface.send_file(BOB_DM, OutgoingFile("tall.png", PNG, "image/png"))
        with pytest.raises(FileRefused) as refused:
            await surface.send_file(BOB_DM, OutgoingFile("huge.bin", b"\0" * (50 * MB + 1)))
        assert refused.value.reason == "huge.bin is larger than Telegram's 50 MB for bots."
    assert [(u.method, u.name) for u in api.uploads] == [("document", "tall.png")]
    too_large = BOT_API.translate(_network_error("Request Entity Too Large"))
    assert isinstance(too_large, FileRefused)
    assert too_large.reason == "Telegram does not let bots upload files over 50 MB."


BOB_DM = ConversationKey("telegram", str(BOB.id))


def _network_error(message: str) -> Exception:
    from telegram.error import NetworkError

    return NetworkError(message)


def test_a_caption_is_cut_to_1024_utf16_units() -> None:
    assert caption_text("  ") is None
    assert caption_text("short") == "short"
    cut = caption_text("😀" * 600)
    assert cut is not None and utf16_len(cut) <= 1024 and cut.endswith("…")


# ---- buttons on messages -----------------------------------------------------------------------
async def test_buttons_on_send_and_edit_come_back_as_choice_answers_and_go_with_an_edit(
    api: FakeBotApi,
) -> None:
    long_token = "stop:" + "t" * 80  # past the 64 bytes of callback_data: sent as an alias
    async with receiving(api) as (surface, received):
        assert surface.capabilities.message_buttons
        ref = await surface.send(ALICE_DM, "working…", buttons=[Choice(long_token, "Stop")])
        message = api.messages[(ALICE.id, int(ref.id))]
        assert message.reply_markup is not None
        ((button,),) = message.reply_markup["inline_keyboard"]
        assert button["text"] == "Stop" and len(button["callback_data"]) <= 64
        await surface.edit(ref, "still working…", buttons=[Choice(long_token, "Stop")])
        assert message.reply_markup["inline_keyboard"][0][0] == button
        api.press(ALICE, message, button["callback_data"])
        await wait_for(lambda: received.events, "the press")
        (press,) = received.events
        assert isinstance(press, ChoiceAnswer) and press.token == long_token
        await surface.edit(ref, "done")  # no buttons: they go
        assert message.reply_markup is None and message.text == "done"


async def test_a_group_reply_is_finished_in_its_live_message_which_alone_carries_buttons(
    api: FakeBotApi,
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    key = ConversationKey("telegram", str(GROUP), str(topic))
    stop = [Choice("tok-1", "Stop")]
    async with receiving(api) as (surface, _):
        live = surface.open_live(key)
        assert await live.show([LivePart("thinking")], buttons=stop)
        (message,) = api.chat_messages(GROUP)
        assert message.reply_markup == {
            "inline_keyboard": [[{"text": "Stop", "callback_data": "tok-1"}]]
        }
        assert await live.show([LivePart("thinking")], buttons=stop)  # no change: no call
        await live.finish(["answer"])
    (message,) = api.chat_messages(GROUP)
    assert message.text == "answer" and message.reply_markup is None
    assert len(api.calls_to("sendMessage")) == 1 and len(api.calls_to("editMessageText")) == 1


# ---- the agent's commands in the menu -----------------------------------------------------------
AGENT_COMMANDS = [
    MenuCommand("status", "Show the agent's status"),
    MenuCommand("foo-bar", "Does foo", "target"),
    MenuCommand("Foo_Bar", "A duplicate once mapped"),
    MenuCommand("x" * 40, ""),
    MenuCommand("!!!", "nothing left of its name"),
]


def test_agent_commands_are_mapped_to_telegrams_rules_and_a_clash_is_renamed() -> None:
    ours = command_menu()
    menu = agent_menu(ours, AGENT_COMMANDS)
    names = [name for name, _ in menu.entries]
    assert names[: len(ours)] == [name for name, _ in ours]
    agents = dict(menu.entries[len(ours) :])
    assert list(agents) == ["agent_status", "foo_bar", "x" * 32]
    assert agents["agent_status"] == "The agent's /status: Show the agent's status"
    assert agents["foo_bar"] == "Does foo (target)"
    assert agents["x" * 32] == f"The agent's /{'x' * 40}"
    assert menu.targets == {
        "agent_status": "//status",
        "foo_bar": "/foo-bar",
        "x" * 32: "/" + "x" * 40,
    }
    many = agent_menu(ours, [MenuCommand(f"c{n}", "d") for n in range(200)])
    assert len(many.entries) == 100


async def test_the_bot_wide_menu_waits_out_a_429_for_as_long_as_telegram_asks(
    api: FakeBotApi,
) -> None:
    api.fail_next("setMyCommands", 429, retry_after=1, count=2)
    async with receiving(api):
        await wait_for(lambda: "default" in api.scoped_commands, "our menu", 15)
    calls = api.calls_to("setMyCommands", ok=False)
    assert [call.status for call in calls] == [429, 429, 200]
    assert all(later.at - earlier.at >= 0.9 for earlier, later in itertools.pairwise(calls))


async def test_the_agents_commands_reach_the_chats_menu_once_and_come_back_in_its_spelling(
    api: FakeBotApi,
) -> None:
    async with receiving(api) as (surface, received):
        assert surface.capabilities.agent_menus
        await wait_for(lambda: "default" in api.scoped_commands, "our menu")
        api.fail_next("setMyCommands", 429, retry_after=1)  # waited out, never fatal
        await surface.agent_command_menu(ALICE_DM, AGENT_COMMANDS)
        await wait_for(lambda: f"chat:{ALICE.id}" in api.scoped_commands, "the chat's menu")
        await surface.agent_command_menu(ALICE_DM, list(AGENT_COMMANDS))  # unchanged: no call
        menu = [c["command"] for c in api.scoped_commands[f"chat:{ALICE.id}"]]
        assert menu[-3:] == ["agent_status", "foo_bar", "x" * 32] and "status" in menu
        api.dm(ALICE, "/agent_status now")
        api.dm(ALICE, "/foo_bar some target")
        api.dm(ALICE, "/status")  # ours stays ours
        messages = await received.one(3)
    assert [message.text for message in messages] == [
        "//status now",
        "/foo-bar some target",
        "/status",
    ]
    chat_calls = [
        call
        for call in api.calls_to("setMyCommands", ok=False)
        if (call.params.get("scope") or {}).get("type") == "chat"
    ]
    assert [call.status for call in chat_calls] == [429, 200]


async def test_menu_changes_in_a_burst_are_one_call_per_chat_and_a_429_is_waited_out(
    api: FakeBotApi,
) -> None:
    async with receiving(api) as (surface, _):
        await wait_for(lambda: "default" in api.scoped_commands, "our menu")
        api.fail_next("setMyCommands", 429, retry_after=1)
        for count in range(1, 6):  # a session reporting its commands as it learns them
            commands = [MenuCommand(f"cmd{n}", "d") for n in range(count)]
            await surface.agent_command_menu(ALICE_DM, commands)
            await surface.agent_command_menu(BOB_DM, commands)
        await wait_for(
            lambda: len(api.scoped_commands.get(f"chat:{BOB.id}", [])) > 5, "both menus", 15
        )
        await wait_for(lambda: len(api.scoped_commands.get(f"chat:{ALICE.id}", [])) > 5, "alice")
    chat_calls = [
        call
        for call in api.calls_to("setMyCommands", ok=False)
        if (call.params.get("scope") or {}).get("type") == "chat"
    ]
    assert [call.status for call in chat_calls] == [429, 200, 200]  # one each, the 429 waited out
    for person in (ALICE, BOB):
        menu = [c["command"] for c in api.scoped_commands[f"chat:{person.id}"]]
        assert menu[-5:] == [f"cmd{n}" for n in range(5)]


async def test_in_a_group_an_agent_command_with_the_bot_name_is_handed_over_in_its_spelling(
    api: FakeBotApi,
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    key = ConversationKey("telegram", str(GROUP), str(topic))
    async with receiving(api) as (surface, received):
        await surface.agent_command_menu(key, AGENT_COMMANDS)
        api.post_message(GROUP, ALICE, f"/foo_bar@{BOT_USERNAME} here", thread=topic)
        api.post_message(GROUP, ALICE, "/agent_status", thread=topic)
        messages = await received.one(2)
    assert [message.text for message in messages] == ["/foo-bar here", "//status"]
    assert f"chat:{GROUP}" in api.scoped_commands


# ---- end to end: BotApp, this adapter, the fake Bot API and the scripted fake agent --------------
IMAGES = ("--prompt-capabilities", '{"image": true}')
ELF = b"\x7fELF\x02\x01\x01" + b"\0" * 40


def app_settings(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, *options: str, **more: Any
) -> Settings:
    access = {"allowed_users": ids(ALICE, BOB), "allowed_chats": [str(GROUP)]}
    return telegram_settings(tmp_path, fake_agent, api, *options, telegram=access, **more)


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[TelegramSurface]:
    async with serving_telegram(settings, **FAST) as surface:
        yield surface


def prompts(fake_agent: FakeAgent) -> list[list[dict[str, Any]]]:
    return [frame["params"]["prompt"] for frame in fake_agent.frames_in("session/prompt")]


def said(api: FakeBotApi, chat: int, text: str) -> Any:
    return lambda: text in api.chat_text(chat)


@pytest.mark.usefixtures("clean_env")
async def test_a_photo_with_and_without_a_caption_reaches_the_agent_as_an_image_block(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    async with serving(app_settings(tmp_path, fake_agent, api, *IMAGES)):
        api.post_photo(ALICE.id, ALICE, PNG, "what is this?")
        await wait_for(said(api, ALICE.id, "[received: image image/png"), "the first reply", 15)
        api.post_photo(ALICE.id, ALICE, JPEG)
        await wait_for(said(api, ALICE.id, "[received: image image/jpeg"), "the second reply", 15)
    captioned, bare = prompts(fake_agent)
    assert captioned == [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
    ]
    assert bare[0]["type"] == "text" and bare[0]["text"]  # the bot words a bare photo
    assert bare[1] == {
        "type": "image",
        "data": base64.b64encode(JPEG).decode(),
        "mimeType": "image/jpeg",
    }
    assert not (tmp_path / ".switchboard").exists()


@pytest.mark.usefixtures("clean_env")
async def test_without_the_image_capability_a_photo_and_a_document_are_saved_and_linked(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    async with serving(app_settings(tmp_path, fake_agent, api)):
        api.post_photo(GROUP, ALICE, PNG, f"@{BOT_USERNAME} and this?", thread=topic)
        await wait_for(said(api, GROUP, "[received: resource_link"), "the photo's reply", 15)
        api.post_document(
            ALICE.id, ALICE, b"line one\nline two\n", "notes.txt", "text/plain", "read"
        )
        await wait_for(said(api, ALICE.id, "[received: resource_link notes.txt"), "the reply", 15)
    photo, document = prompts(fake_agent)
    assert photo[0] == {"type": "text", "text": "and this?"}
    assert photo[1]["type"] == "resource_link" and photo[1]["mimeType"] == "image/png"
    (saved,) = (tmp_path / ".switchboard" / "inbox").glob("*/*.png")
    assert saved.read_bytes() == PNG and photo[1]["uri"] == saved.as_uri()
    assert document[1]["type"] == "resource_link" and document[1]["name"] == "notes.txt"


@pytest.mark.usefixtures("clean_env")
async def test_an_oversized_and_a_forbidden_file_are_refused_with_a_sentence(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    settings = app_settings(tmp_path, fake_agent, api, max_file_bytes=1000)
    async with serving(settings):
        api.post_document(ALICE.id, ALICE, b"x" * 5000, "big.log", "text/plain", "look")
        await wait_for(said(api, ALICE.id, "big.log was not sent to the agent"), "a refusal", 15)
        api.post_document(ALICE.id, ALICE, ELF, "tool.pdf", "application/pdf", "run it")
        await wait_for(said(api, ALICE.id, "tool.pdf was not sent to the agent"), "a refusal", 15)
        api.post_document(ALICE.id, ALICE, b"z" * (20 * MB + 1), "huge.bin", "", claimed_size=None)
        await wait_for(said(api, ALICE.id, "over 20 MB"), "telegram's refusal", 15)
    text = api.chat_text(ALICE.id)
    assert "big.log was not sent to the agent: it is 5 KB, over the limit of 1000 bytes" in text
    assert "tool.pdf was not sent to the agent: it is a program" in text
    assert "huge.bin was not sent to the agent: Telegram does not let bots download files" in text
    assert len(api.downloads) == 1  # the program, to read its bytes; the others were refused first
    assert all(block["type"] == "text" for blocks in prompts(fake_agent) for block in blocks)


@pytest.mark.usefixtures("clean_env")
async def test_an_album_is_one_prompt_and_a_game_is_answered_with_a_sentence(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    async with serving(app_settings(tmp_path, fake_agent, api, *IMAGES)):
        api.post_album(ALICE.id, ALICE, [PNG, JPEG], "compare")
        await wait_for(said(api, ALICE.id, "[received: image image/png"), "the album's reply", 15)
        api.post_media(ALICE.id, ALICE, {"game": {"title": "g", "description": "d", "photo": []}})
        await wait_for(said(api, ALICE.id, "The game was not sent"), "the game's answer", 15)
    (album,) = prompts(fake_agent)  # the game reached no agent
    assert [block["type"] for block in album] == ["text", "image", "image"]
    assert album[0]["text"] == "compare"
    assert "The game was not sent to the agent: An agent cannot play or read a Telegram game" in (
        api.chat_text(ALICE.id)
    )


def _agent_block(content: dict[str, Any]) -> dict[str, Any]:
    return {"update": {"sessionUpdate": "agent_message_chunk", "content": content}}


@pytest.mark.usefixtures("clean_env")
async def test_an_image_and_a_file_from_the_agent_are_uploaded_as_photo_and_document(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    (tmp_path / "report.csv").write_text("a,b\n1,2\n")
    image = {"type": "image", "mimeType": "image/png", "data": base64.b64encode(PNG).decode()}
    link = {
        "type": "resource_link",
        "uri": (tmp_path / "report.csv").as_uri(),
        "name": "report.csv",
    }
    steps = script({"chunk": "Here you go."}, _agent_block(image), _agent_block(link))
    async with serving(app_settings(tmp_path, fake_agent, api)):
        api.dm(ALICE, steps)
        await wait_for(lambda: len(api.uploads) == 2, "two uploads", 15)
        await wait_for(said(api, ALICE.id, "Here you go."), "the reply", 15)
    photo, document = api.uploads
    assert (photo.method, photo.chat_id, photo.data) == ("photo", ALICE.id, PNG)
    assert (document.method, document.name, document.data) == (
        "document",
        "report.csv",
        b"a,b\n1,2\n",
    )


PLAN = {
    "sessionUpdate": "plan",
    "entries": [
        {"content": "Read the parser", "status": "completed", "priority": "high"},
        {"content": "Fix the off-by-one", "status": "in_progress", "priority": "high"},
        {"content": "Run the tests", "status": "pending", "priority": "medium"},
    ],
}


def _tool(call_id: str, title: str, kind: str, **raw: str) -> dict[str, Any]:
    update = {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title, "kind": kind}
    return {"update": update | {"status": "in_progress", "rawInput": raw}}


def _done(call_id: str) -> dict[str, Any]:
    update = {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed"}
    return {"update": update}


@pytest.mark.usefixtures("clean_env")
async def test_in_a_group_the_plan_and_tools_show_in_the_live_message_and_the_footer_at_the_end(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
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
    async with serving(app_settings(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {steps}", thread=topic)
        await wait_for(said(api, GROUP, "Context 42%"), "the final reply", 20)
    shown = [
        call.params["text"]
        for call in api.calls_to("sendMessage", "editMessageText", chat_id=GROUP)
    ]
    assert any(
        "Plan (1/3):\n✓ Read the parser\n▸ Fix the off-by-one\n○ Run the tests" in text
        and "Read file (src/a.py)" in text
        for text in shown
    ), shown
    (final,) = api.chat_messages(GROUP)  # the live message became the answer: one message
    assert final.text.startswith("On it. Done.")
    assert "Tools: 1 read" in final.text and final.text.endswith("Context 42%")
    assert "Plan (" not in final.text


@pytest.mark.usefixtures("clean_env")
async def test_the_agents_commands_reach_the_chats_menu_and_work_from_it(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    listed = [
        {"name": "status", "description": "The agent's status"},
        {"name": "foo-bar", "description": "Does foo", "input": {"hint": "what"}},
    ]
    commands = {
        "update": {"sessionUpdate": "available_commands_update", "availableCommands": listed}
    }
    async with serving(app_settings(tmp_path, fake_agent, api)):
        api.dm(ALICE, script(commands, {"chunk": "ready"}))
        await wait_for(lambda: f"chat:{ALICE.id}" in api.scoped_commands, "the chat's menu", 15)
        menu = {c["command"]: c["description"] for c in api.scoped_commands[f"chat:{ALICE.id}"]}
        assert menu["agent_status"] == "The agent's /status: The agent's status"
        assert menu["foo_bar"] == "Does foo (what)" and "status" in menu and "new" in menu
        api.dm(ALICE, "/foo_bar the thing")
        await wait_for(said(api, ALICE.id, "Echo: /foo-bar the thing"), "the agent's answer", 15)
        api.dm(ALICE, "/agent_status")
        await wait_for(lambda: "/status" in fake_agent.prompt_texts(), "the agent's /status", 15)
    assert "default" in api.scoped_commands  # ours stay the bot-wide menu


@pytest.mark.usefixtures("clean_env")
async def test_a_groups_live_message_carries_a_stop_button_that_stops_the_turn(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    topic = api.add_topic(GROUP, ALICE)
    hanging = script({"chunk": "working on it"}, {"hang": True})
    async with serving(app_settings(tmp_path, fake_agent, api)):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} {hanging}", thread=topic)
        await wait_for(said(api, GROUP, "working on it"), "the live message", 15)
        (live,) = api.chat_messages(GROUP)
        assert live.reply_markup is not None
        ((button,),) = live.reply_markup["inline_keyboard"]
        assert button["text"] == "Stop"
        api.press(ALICE, live, button["callback_data"])
        await wait_for(lambda: fake_agent.frames_in("session/cancel"), "the cancel", 15)
        await wait_for(said(api, GROUP, "The turn was stopped."), "the stopped reply", 15)
    assert all(message.reply_markup is None for message in api.chat_messages(GROUP))


@pytest.mark.usefixtures("clean_env")
async def test_a_private_chats_draft_has_no_stop_button_and_stop_stops_the_turn(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi
) -> None:
    # A draft bubble takes no keyboard: in private chats /stop is the way to stop a turn.
    hanging = script({"chunk": "working on it"}, {"hang": True})
    async with serving(app_settings(tmp_path, fake_agent, api)):
        api.dm(ALICE, hanging)
        await wait_for(lambda: api.calls_to("sendMessageDraft"), "the draft", 15)
        api.dm(ALICE, "/stop")
        await wait_for(lambda: fake_agent.frames_in("session/cancel"), "the cancel", 15)
    assert all(message.reply_markup is None for message in api.chat_messages(ALICE.id))
