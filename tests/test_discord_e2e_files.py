"""Issue 13 on Discord, end to end: attachments posted on the fake Discord (tests/fakes/discord_api.py)
go through the real discord.py, our adapter and `BotApp` to the scripted fake agent (a real
subprocess that logs the prompt frame and says what reached it)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.app import BotApp
from surfaces.base import ConversationKey
from tests.conftest import FakeAgent
from tests.engine_helpers import engine_settings, wait_for
from tests.fakes.discord_api import FakeDiscord, FakeFile, User
from tests.harness.discord import discord_access, serving

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 40
IMAGES = ("--prompt-capabilities", '{"image": true}')
CONTEXT = ("--prompt-capabilities", '{"embeddedContext": true}')


@dataclass
class Chat:
    fake: FakeDiscord
    app: BotApp
    alice: User
    bob: User
    mallory: User  # on no list
    general: str  # a guild channel
    workspace: Path

    @property
    def dm(self) -> str:
        return self.fake.dm_channel(self.alice).id

    def shown(self, channel: str | None = None) -> list[str]:
        """What the bot's messages show now, leaving out blanked leftovers."""
        messages = self.fake.bot_messages(channel or self.dm)
        return [m.content for m in messages if m.content != "…"]

    def said(self, channel: str | None = None) -> str:
        return "\n".join(self.shown(channel))

    def idle(self, channel: str | None = None) -> bool:
        key = ConversationKey("discord", channel or self.dm)
        return key in self.app.runners and not self.app.runners[key].running


@asynccontextmanager
async def discord_chat(
    tmp_path: Path, fake_agent: FakeAgent, *agent_opts: str, **overrides: Any
) -> AsyncIterator[Chat]:
    async with FakeDiscord() as fake:
        guild = fake.add_guild(channels=("general",))
        alice, bob, mallory = (fake.user(name) for name in ("Alice", "Bob", "Mallory"))
        fake.join(guild, alice, bob, mallory)
        access = discord_access(fake, alice, bob)
        settings = engine_settings(tmp_path, fake_agent, *agent_opts, discord=access, **overrides)
        async with serving(settings, min_edit_interval=0.05) as (app, _):
            general = guild.channel("general").id
            yield Chat(fake, app, alice, bob, mallory, general, tmp_path)


def prompt_blocks(fake_agent: FakeAgent) -> list[list[dict[str, Any]]]:
    return [frame["params"]["prompt"] for frame in fake_agent.frames_in("session/prompt")]


def inbox(workspace: Path, name: str) -> Path:
    (saved,) = (workspace / ".switchboard" / "inbox").glob(f"*/{name}")
    return saved


# ---- files in -----------------------------------------------------------------------------------
async def test_an_image_attachment_reaches_an_agent_that_takes_images_as_an_image_block(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with discord_chat(tmp_path, fake_agent, *IMAGES) as chat:
        photo = FakeFile("screenshot.png", PNG, "image/png")
        chat.fake.dm(chat.alice, "what is this?", files=(photo,))
        await wait_for(lambda: "[received:" in chat.said(), "the agent's answer")
        await wait_for(chat.idle, "the end of the turn")
        assert chat.fake.downloads == [photo.id], "downloaded once, through Discord's CDN"
    (blocks,) = prompt_blocks(fake_agent)
    assert blocks == [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
    ]
    assert f"[received: image image/png {len(PNG)}B]" in chat.said()
    assert not (tmp_path / ".switchboard").exists(), "an image block is not also saved"


async def test_an_agent_without_the_image_capability_gets_the_attachment_saved_and_linked(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with discord_chat(tmp_path, fake_agent) as chat:
        chat.fake.dm(chat.alice, "and this?", files=(FakeFile("cat.png", PNG, "image/png"),))
        await wait_for(lambda: "[received:" in chat.said(), "the agent's answer")
        await wait_for(chat.idle, "the end of the turn")
    (blocks,) = prompt_blocks(fake_agent)
    text, link = blocks
    assert text == {"type": "text", "text": "and this?"}
    saved = inbox(tmp_path, "cat.png")
    assert saved.read_bytes() == PNG
    assert link == {
        "type": "resource_link",
        "uri": saved.as_uri(),
        "name": "cat.png",
        "mimeType": "image/png",
        "size": len(PNG),
    }
    assert f"[received: resource_link cat.png image/png {len(PNG)}B]" in chat.said()


async def test_a_text_document_is_saved_and_embedded_when_the_agent_takes_embedded_context(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    log = b"error: it broke\nat line 3\n"
    async with discord_chat(tmp_path, fake_agent, *CONTEXT) as chat:
        chat.fake.dm(chat.alice, "why?", files=(FakeFile("build.log", log, "text/plain"),))
        await wait_for(lambda: "[received:" in chat.said(), "the agent's answer")
        await wait_for(chat.idle, "the end of the turn")
    (blocks,) = prompt_blocks(fake_agent)
    assert [b["type"] for b in blocks] == ["text", "resource_link", "resource"]
    saved = inbox(tmp_path, "build.log")
    assert saved.read_bytes() == log
    assert blocks[1]["name"] == "build.log" and blocks[1]["uri"] == saved.as_uri()
    assert blocks[2]["resource"] == {
        "uri": saved.as_uri(),
        "text": log.decode(),
        "mimeType": "text/plain",
    }


async def test_oversized_and_forbidden_attachments_are_refused_with_one_sentence_each(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    big = FakeFile("huge.pdf", b"%PDF-" + b"0" * 2000, "application/pdf")
    program = FakeFile("totally-a-photo.png", ELF, "image/png")  # the name and type lie
    photo = FakeFile("fine.png", PNG, "image/png")
    async with discord_chat(tmp_path, fake_agent, *IMAGES, max_file_bytes=1000) as chat:
        chat.fake.dm(chat.alice, "look", files=(big, program, photo))
        await wait_for(lambda: "[received:" in chat.said(), "the agent's answer")
        await wait_for(chat.idle, "the end of the turn")
        said = chat.said()
        assert big.id not in chat.fake.downloads, "refused from its size before downloading"
    assert (
        "huge.pdf was not sent to the agent: it is 2 KB, over the limit of 1000 bytes per file."
        in said
    )
    assert (
        "totally-a-photo.png was not sent to the agent: it is a program, and Switchboard never "
        "accepts programs." in said
    )
    assert "Traceback" not in said
    (blocks,) = prompt_blocks(fake_agent)
    assert [b["type"] for b in blocks] == ["text", "image"], "the rest goes on"
    assert not (tmp_path / ".switchboard").exists(), "nothing refused is saved"


async def test_a_message_of_only_a_forbidden_file_is_answered_and_never_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with discord_chat(tmp_path, fake_agent) as chat:
        chat.fake.dm(chat.alice, "", files=(FakeFile("run-me", ELF),))
        await wait_for(lambda: "run-me was not sent" in chat.said(), "the refusal")
        await wait_for(chat.idle, "the end of the handling")
    assert prompt_blocks(fake_agent) == []


async def test_an_attachment_without_text_still_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with discord_chat(tmp_path, fake_agent, *IMAGES) as chat:
        chat.fake.dm(chat.alice, "", files=(FakeFile("diagram.png", PNG, "image/png"),))
        await wait_for(lambda: "[received:" in chat.said(), "the agent's answer")
        await wait_for(chat.idle, "the end of the turn")
    (blocks,) = prompt_blocks(fake_agent)
    assert blocks[0] == {"type": "text", "text": "I am sending you this file: diagram.png."}
    assert blocks[1]["type"] == "image"
    assert chat.said().startswith("Echo: I am sending you this file: diagram.png.")


async def test_a_voice_message_reaches_an_agent_that_takes_audio_as_an_audio_block(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    ogg = b"OggS" + bytes(range(30))
    note = FakeFile("voice-message.ogg", ogg, "audio/ogg", voice=True)
    audio = ("--prompt-capabilities", '{"audio": true}')
    async with discord_chat(tmp_path, fake_agent, *audio) as chat:
        chat.fake.dm(chat.alice, "", files=(note,))
        await wait_for(lambda: "[received:" in chat.said(), "the agent's answer")
        await wait_for(chat.idle, "the end of the turn")
    (blocks,) = prompt_blocks(fake_agent)
    assert blocks[0]["type"] == "text" and blocks[0]["text"].startswith("I am sending you")
    assert blocks[1] == {
        "type": "audio",
        "data": base64.b64encode(ogg).decode(),
        "mimeType": "audio/ogg",
    }


async def test_an_attachment_alone_in_a_guild_channel_opens_a_thread_and_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with discord_chat(tmp_path, fake_agent) as chat:
        general = chat.general
        chat.fake.post(general, chat.bob, "", mention=True, files=(FakeFile("notes.txt", b"hi\n"),))
        await wait_for(lambda: chat.fake.threads(), "the thread")
        (thread,) = chat.fake.threads()
        await wait_for(lambda: "[received:" in chat.said(thread.id), "the answer in the thread")
        await wait_for(lambda: chat.idle(thread.id), "the end of the turn")
        assert chat.fake.bot_messages(general) == []
    (blocks,) = prompt_blocks(fake_agent)
    assert [b["type"] for b in blocks] == ["text", "resource_link"]
    assert inbox(tmp_path, "notes.txt").read_bytes() == b"hi\n"
