"""Issue 13 on Discord, at the adapter: the real discord.py through `DiscordSurface` against the
fake gateway and REST API (tests/fakes/discord_api.py). Attachments reach the bot as
`IncomingFile`s whose downloads are bounded, the bot's files go out as attachments within the
upload limit, messages carry buttons, and the agent's commands become guild commands."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from config import load_settings
from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    LivePart,
    MenuCommand,
    OutgoingFile,
)
from surfaces.discord.adapter import DiscordSurface
from surfaces.discord.agent_menus import agent_commands, discord_name
from surfaces.discord.files import CDN_HOSTS, UPLOAD_LIMIT, download
from surfaces.errors import FileRefused
from tests.engine_helpers import wait_for
from tests.fakes.discord_api import FakeDiscord, FakeFile, Guild, User
from tests.harness.discord import discord_access, fast_surface
from tests.harness.surface import Received, running_surface

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@dataclass
class Bot:
    fake: FakeDiscord
    guild: Guild
    alice: User
    surface: DiscordSurface
    events: list[Inbound | ChoiceAnswer]

    @property
    def general(self) -> str:
        return self.guild.channel("general").id

    def dm_key(self) -> ConversationKey:
        return ConversationKey("discord", self.fake.dm_channel(self.alice).id)

    def inbound(self) -> Inbound:
        (event,) = [e for e in self.events if isinstance(e, Inbound)]
        return event


@asynccontextmanager
async def discord_surface(**knobs: Any) -> AsyncIterator[Bot]:
    async with FakeDiscord() as fake:
        guild = fake.add_guild(channels=("general",))
        alice = fake.user("Alice")
        fake.join(guild, alice)
        settings = load_settings(discord=discord_access(fake, alice))
        surface = fast_surface(
            settings.discord, min_edit_interval=0.01, menu_coalesce=0.05, **knobs
        )
        got = Received()
        menu = [("status", "Show the status"), ("new", "Start over")]
        async with running_surface(surface, got, menu):
            await wait_for(surface.is_ready, "the gateway")
            yield Bot(fake, guild, alice, surface, got.events)


# ---- files in -----------------------------------------------------------------------------------
async def test_attachments_arrive_as_files_on_the_inbound_and_download_through_the_cdn() -> None:
    async with discord_surface() as bot:
        photo = FakeFile("shot.png", PNG, "image/png")
        note = FakeFile("voice-message.ogg", b"OggS" + b"\x00" * 20, "audio/ogg", voice=True)
        log = FakeFile("build.log", b"error: it broke\n", "text/plain")
        bot.fake.dm(bot.alice, f"<@{bot.fake.bot.id}> what is this?", files=(photo, note, log))
        await wait_for(lambda: bot.events, "the message")
        inbound = bot.inbound()
        assert inbound.text == "what is this?"  # the caption, mention stripped
        assert [(f.name, f.mime, f.size, f.kind) for f in inbound.files] == [
            ("shot.png", "image/png", len(PNG), "image"),
            ("voice-message.ogg", "audio/ogg", 24, "voice"),
            ("build.log", "text/plain", 16, "document"),
        ]
        assert bot.fake.downloads == [], "nothing is downloaded before the bot asks"
        assert await inbound.files[0].fetch(1024) == PNG
        assert bot.fake.downloads == [photo.id]


async def test_an_attachment_without_text_still_reaches_the_bot_and_opens_a_thread() -> None:
    async with discord_surface() as bot:
        bot.fake.dm(bot.alice, "", files=(FakeFile("a.png", PNG, "image/png"),))
        await wait_for(lambda: bot.events, "the DM")
        bot.fake.post(bot.general, bot.alice, "", mention=True, files=(FakeFile("b.txt", b"hi"),))
        await wait_for(lambda: len(bot.events) == 2, "the channel's message")
        dm, opened = bot.events
        assert isinstance(dm, Inbound) and isinstance(opened, Inbound)
        assert (dm.text, [f.name for f in dm.files]) == ("", ["a.png"])
        assert (opened.text, [f.kind for f in opened.files]) == ("", ["document"])
        (thread,) = bot.fake.threads()
        assert opened.key.chat == thread.id and thread.name == "Chat with Alice"


async def test_a_download_is_refused_before_it_starts_over_the_claim_and_cut_off_past_it() -> None:
    async with discord_surface() as bot:
        honest = FakeFile("big.bin", b"x" * 5000)
        liar = FakeFile("small.bin", b"y" * 5000, claimed_size=10)  # claims 10 bytes
        bot.fake.dm(bot.alice, "two files", files=(honest, liar))
        await wait_for(lambda: bot.events, "the message")
        big, small = bot.inbound().files
        with pytest.raises(FileRefused) as claimed:
            await big.fetch(1000)
        assert bot.fake.downloads == [], "refused from the claimed size, never fetched"
        assert claimed.value.limit == 1000 and claimed.value.reason.startswith("big.bin is larger")
        with pytest.raises(FileRefused) as cut:
            await small.fetch(1000)
        assert bot.fake.downloads == [liar.id] and cut.value.limit == 1000
        del bot.fake.cdn[liar.id]  # deleted on Discord meanwhile
        with pytest.raises(FileRefused) as gone:
            await small.fetch(10_000)
        assert "404" in gone.value.reason


# ---- files out ----------------------------------------------------------------------------------
async def test_send_file_uploads_an_attachment_and_a_file_discord_refuses_is_file_refused() -> None:
    async with discord_surface() as bot:
        key = bot.dm_key()
        caps = bot.surface.capabilities
        assert caps.max_upload_bytes == UPLOAD_LIMIT
        assert caps.message_buttons and caps.agent_menus
        ref = await bot.surface.send_file(
            key, OutgoingFile("chart.png", PNG, "image/png", caption="the **chart**")
        )
        message = bot.fake.messages[ref.id]
        assert [(f.filename, f.data) for f in message.files] == [("chart.png", PNG)]
        assert message.content == r"the \*\*chart\*\*"  # a caption is plain text
        (call,) = bot.fake.routes("create_message", key.chat)
        assert call.body["allowed_mentions"] == {"parse": []}
        with pytest.raises(FileRefused) as ours:  # over the limit: never sent
            await bot.surface.send_file(key, OutgoingFile("huge.bin", b"z" * (UPLOAD_LIMIT + 1)))
        assert ours.value.limit == UPLOAD_LIMIT
        assert len(bot.fake.routes("create_message", key.chat)) == 1
        bot.fake.upload_limit = 100  # Discord's own check says no
        with pytest.raises(FileRefused) as theirs:
            await bot.surface.send_file(key, OutgoingFile("log.txt", b"l" * 200, "text/plain"))
        assert bot.fake.routes("create_message", key.chat)[-1].status == 413
        assert "too large" in theirs.value.reason


# ---- buttons on messages ------------------------------------------------------------------------
async def test_buttons_go_on_a_message_come_off_with_an_edit_and_a_press_is_a_choice() -> None:
    async with discord_surface() as bot:
        key = bot.dm_key()
        ref = await bot.surface.send(key, "working", buttons=[Choice("stop-1", "Stop", "danger")])
        message = bot.fake.messages[ref.id]
        assert [(b["custom_id"], b["label"]) for b in message.buttons()] == [("stop-1", "Stop")]
        await bot.surface.edit(ref, "still working", buttons=[Choice("stop-1", "Stop", "danger")])
        assert message.content == "still working" and len(message.buttons()) == 1
        interaction = bot.fake.press(bot.alice, ref.id, "stop-1")
        await wait_for(lambda: bot.events, "the press")
        (answer,) = bot.events
        assert isinstance(answer, ChoiceAnswer)
        assert (answer.token, answer.key, answer.user.id) == ("stop-1", key, bot.alice.id)
        assert interaction.callback is not None and interaction.callback["type"] == 6  # at once
        await bot.surface.edit(ref, "done", formatted=True)
        assert message.content == "done" and message.buttons() == []
        assert bot.fake.routes("edit_message")[-1].body["components"] == []


async def test_a_live_reply_edits_only_what_changed_and_finishes_once() -> None:
    stop = Choice("stop-1", "Stop", "danger")
    async with discord_surface() as bot:
        key = bot.dm_key()
        live = bot.surface.open_live(key)

        def calls() -> int:
            return len(bot.fake.routes("create_message") + bot.fake.routes("edit_message"))

        await live.show([LivePart("working")], buttons=[stop])
        await live.show([LivePart("working")], buttons=[stop])  # the same: no call
        assert calls() == 1
        (message,) = bot.fake.bot_messages(key.chat)
        assert len(message.buttons()) == 1
        await live.show([LivePart("working")])  # the same text without Stop: the button goes
        assert calls() == 2 and message.buttons() == [] and message.content == "working"
        final = bot.surface.render("**done**")
        await live.finish([final])
        assert calls() == 3 and message.content == final
        await live.finish([final])
        assert calls() == 3  # finished already


# ---- the agent's commands -----------------------------------------------------------------------
def test_agent_command_names_follow_discords_rules_and_a_clash_with_ours_is_renamed() -> None:
    assert discord_name("Review PR!") == "review-pr"
    assert discord_name("x" * 40) == "x" * 32
    assert discord_name("???") == ""
    mapped = agent_commands(
        [
            MenuCommand("status", "The agent's status"),
            MenuCommand("Review PR", "Review a pull request " * 10, hint="PR number"),
            MenuCommand("review_pr", "a different one"),
            MenuCommand("!!!", "nothing left of the name"),
            MenuCommand("init", ""),
        ],
        ours=["status", "new"],
    )
    assert list(mapped) == ["agent-status", "review-pr", "review_pr", "init"]
    assert mapped["agent-status"].text("") == "//status"
    review = mapped["review-pr"]
    assert review.text("42") == "/Review PR 42"
    assert len(review.payload["description"]) <= 100
    assert review.payload["options"] == [
        {"type": 3, "name": "input", "description": "PR number", "required": False}
    ]
    assert "options" not in mapped["init"].payload
    assert mapped["init"].payload["description"] == "the agent's /init"


async def test_agent_commands_become_guild_commands_published_only_when_they_change() -> None:
    async with discord_surface() as bot:
        bot.fake.post(bot.general, bot.alice, "hello", mention=True)
        await wait_for(lambda: bot.events, "the thread's first message")
        key = bot.inbound().key
        commands = [MenuCommand("status", "agent status"), MenuCommand("plan", "", "goal")]
        await bot.surface.agent_command_menu(key, commands)
        await bot.surface.agent_command_menu(key, commands[:1])  # a burst: one call
        await bot.surface.agent_command_menu(key, commands)
        await wait_for(lambda: bot.fake.routes("guild_commands"), "the guild's commands")
        names = [c["name"] for c in bot.fake.guild_commands[bot.guild.id]]
        assert names == ["agent-status", "plan"]
        await bot.surface.agent_command_menu(key, list(commands))  # the same set again
        await bot.surface.agent_command_menu(bot.dm_key(), commands)  # a DM: no global change
        global_commands = list(bot.fake.commands)
        await bot.surface.agent_command_menu(key, [*commands, MenuCommand("test", "run tests")])
        await wait_for(lambda: len(bot.fake.routes("guild_commands")) == 2, "the change")
        assert [c["name"] for c in bot.fake.guild_commands[bot.guild.id]][-1] == "test"
        assert bot.fake.commands == global_commands
        assert len(bot.fake.routes("guild_commands")) == 2, "unchanged sets are not published"


async def test_using_an_agent_command_hands_the_bot_its_text_after_deferring() -> None:
    async with discord_surface() as bot:
        bot.fake.post(bot.general, bot.alice, "hello", mention=True)
        await wait_for(lambda: bot.events, "the thread")
        key = bot.inbound().key
        commands = [MenuCommand("status", "agent status"), MenuCommand("plan", "", "goal")]
        await bot.surface.agent_command_menu(key, commands)
        await wait_for(lambda: bot.fake.guild_commands.get(bot.guild.id), "the guild's commands")
        plan = bot.fake.slash(bot.alice, "plan", channel_id=key.chat, options={"input": "ship"})
        clash = bot.fake.slash(bot.alice, "agent-status", channel_id=key.chat)
        ours = bot.fake.slash(bot.alice, "status", channel_id=key.chat)
        await wait_for(lambda: len(bot.events) == 4, "the three commands")
        texts = [e.text for e in bot.events[1:] if isinstance(e, Inbound)]
        assert texts == ["/plan ship", "//status", "/status"]
        for interaction in (plan, clash, ours):
            assert interaction.callback is not None and interaction.callback["type"] == 5


async def test_a_failed_publish_is_logged_not_fatal_and_the_next_change_publishes_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with discord_surface() as bot:
        bot.fake.post(bot.general, bot.alice, "hello", mention=True)
        await wait_for(lambda: bot.events, "the thread")
        key = bot.inbound().key
        bot.fake.fail_next("guild_commands", status=403)  # e.g. no applications.commands scope
        await bot.surface.agent_command_menu(key, [MenuCommand("plan", "make a plan")])
        await wait_for(
            lambda: "could not show the agent's commands" in caplog.text, "the failure logged"
        )
        assert bot.fake.guild_commands == {}
        await bot.surface.agent_command_menu(key, [MenuCommand("plan", "make a better plan")])
        await wait_for(lambda: bot.fake.guild_commands, "the next change published")
        assert bot.surface.is_ready(), "the surface keeps serving"


async def test_only_discords_own_file_servers_are_downloaded_from() -> None:
    with pytest.raises(FileRefused) as refused:
        await download("http://169.254.169.254/latest", 100, name="x.png", trusted=CDN_HOSTS)
    assert refused.value.reason == "Discord did not give a download address for x.png."
