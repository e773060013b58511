"""Attachments that travel between replicas (issue 16): a file one replica's adapter received
carries a `ref` (the platform's file id, or Discord's CDN URL; never a credential), and another
replica's adapter, a second instance that never saw the message, turns it back into the same
download with `file_from_ref`; a ref that is not its own, or not well formed, gives None. Each
against its fake platform; and end to end, a photo sent through the replica that does not serve
the conversation reaches the agent through the one that does (tests/cluster_harness.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from config import load_settings
from config.settings import TelegramSettings
from surfaces.base import ChoiceAnswer, Inbound, IncomingFile
from surfaces.discord.adapter import DiscordSurface
from surfaces.errors import FileRefused
from surfaces.slack.adapter import SlackSurface
from surfaces.telegram.adapter import TelegramSurface
from tests.cluster_harness import cluster
from tests.conftest import script
from tests.engine_helpers import wait_for
from tests.fakes.discord_api import FakeDiscord, FakeFile, User
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack, envelope, file_share
from tests.fakes.telegram_api import FakeBotApi, People
from tests.harness.discord import discord_access, fast_surface
from tests.harness.slack import slack_settings
from tests.harness.telegram import telegram_access

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
JPEG = b"\xff\xd8\xff\xe0" + b"\1" * 2000
MB = 1024 * 1024
ALICE = People().alice
# Refs no adapter may take: forged, malformed, oversized, off the platform's hosts.
HOSTILE = (
    "",
    "tg1:",
    "tg2:FILE-1",
    "tg1:FILE 1",
    "tg1:FILE-1\n",
    "tg1:" + "A" * 300,
    "FABC\x00",
    "fabc",
    "https://cdn.discordapp.com.evil.example/a.png",
    "http://cdn.discordapp.com/attachments/1/2/a.png",
    "https://user:pw@cdn.discordapp.com/attachments/1/2/a.png",
    "https://evil.example/attachments/1/2/a.png",
    "/attachments/1/2/a.png",
    "https://cdn.discordapp.com/" + "a" * 3000,
)


# The adapters whose files another replica can download.
Refetching = TelegramSurface | SlackSurface | DiscordSurface

# Well-formed refs of each platform: each adapter takes its own only.
FOREIGN = {
    "telegram": "tg1:AgACAgIAAxkBAAIB",
    "slack": "F0123ABCDEF",
    "discord": "https://cdn.discordapp.com/attachments/1/2/a.png?ex=1&is=2&hm=3",
}


def refs_refused(surface: Refetching, own: str, *good: str) -> list[str]:
    """The refs `surface` took that it should not have (hostile ones, other platforms' ones,
    and its own `good` ones with a kind or size that cannot be): none, for a careful adapter."""
    assert surface.file_from_ref("a", "", 1, "image", FOREIGN[own]) is not None
    foreign = [ref for name, ref in FOREIGN.items() if name != own]
    taken = [ref for ref in (*HOSTILE, *foreign) if surface.file_from_ref("a", "", 1, "image", ref)]
    taken += [ref for ref in good if surface.file_from_ref("a", "", 1, "spreadsheet", ref)]
    taken += [ref for ref in good if surface.file_from_ref("a", "", -1, "image", ref)]
    return taken


async def travelled(surface: Refetching, file: IncomingFile) -> IncomingFile:
    """`file` as the other replica's adapter rebuilds it from what the relay carries."""
    assert file.ref, "the file carries a ref"
    again = surface.file_from_ref(file.name, file.mime, file.size, file.kind, file.ref)
    assert again is not None
    assert (again.name, again.mime, again.size, again.kind) == (
        file.name,
        file.mime,
        file.size,
        file.kind,
    )
    return again


# ---- Telegram -----------------------------------------------------------------------------------
def telegram(api: FakeBotApi) -> TelegramSurface:
    settings = TelegramSettings(**telegram_access(api, ALICE))
    return TelegramSurface(settings, min_edit_interval=0.01, poll_timeout=2.0, album_quiet=0.1)


async def test_a_telegram_file_is_downloaded_again_by_another_replicas_adapter() -> None:
    async with FakeBotApi() as api:
        api.private_chat(ALICE)
        here, there = telegram(api), telegram(api)  # `there` never polls: another replica
        events: list[Inbound | ChoiceAnswer] = []

        async def on_event(event: Inbound | ChoiceAnswer) -> None:
            events.append(event)

        try:
            async with anyio.create_task_group() as tg:
                await tg.start(here.run, on_event)
                api.post_photo(ALICE.id, ALICE, JPEG)
                api.post_document(ALICE.id, ALICE, b"notes\n", "notes.txt", "text/plain")
                api.post_media(ALICE.id, ALICE, {"game": {"title": "g", "description": "d"}})
                await wait_for(lambda: len(events) == 3, "the three messages")
                tg.cancel_scope.cancel()
            photo, notes, game = (file for event in events for file in event.files)  # type: ignore[union-attr]
            assert photo.ref.startswith("tg1:") and api.token not in photo.ref
            assert await (await travelled(there, photo)).fetch(10 * MB) == JPEG
            assert await (await travelled(there, notes)).fetch(10 * MB) == b"notes\n"
            small = there.file_from_ref("", "image/jpeg", None, "image", photo.ref)
            assert small is not None
            with pytest.raises(FileRefused):  # the same bounded download path
                await small.fetch(100)
            with pytest.raises(FileRefused) as refused:  # why, said by the serving replica
                await (await travelled(there, game)).fetch(10 * MB)
            assert refused.value.reason == "An agent cannot play or read a Telegram game."
            assert there.file_from_ref("x", "", None, "document", "tg1x:The password") is None
            assert refs_refused(there, "telegram", photo.ref, FOREIGN["telegram"]) == []
        finally:
            await here.close()
            await there.close()
    assert [call.params["file_id"] for call in api.calls_to("getFile")][:2] == [
        photo.ref.removeprefix("tg1:"),
        notes.ref.removeprefix("tg1:"),
    ]


# ---- Slack --------------------------------------------------------------------------------------
def slack(fake: FakeSlack) -> SlackSurface:
    settings = slack_settings(fake, "socket", allowed_users=["UALICE"])
    return SlackSurface(settings, min_edit_interval=0.01, stream_idle=0.3)


async def test_a_slack_file_is_fetched_again_through_files_info_by_another_replicas_adapter() -> (
    None
):
    async with FakeSlack() as fake:
        here, there = slack(fake), slack(fake)
        events: list[Inbound | ChoiceAnswer] = []

        async def on_event(event: Inbound | ChoiceAnswer) -> None:
            events.append(event)

        shot = fake.add_file("shot.png", "image/png", PNG)
        gone = fake.add_file("old.png", "image/png", PNG, mode="hidden_by_limit")
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(here.run, on_event)
                body = envelope(file_share("DALICE", "UALICE", "look", [shot, gone], ts="1.0"))
                envelope_id = await fake.push("events_api", body)
                await wait_for(lambda: fake.acked(envelope_id) and events, "the message")
                tg.cancel_scope.cancel()
            image, hidden = events[0].files  # type: ignore[union-attr]
            assert image.ref == shot["id"]  # the file id, not a URL (nor the token)
            assert await (await travelled(there, image)).fetch(1_000_000) == PNG
            with pytest.raises(FileRefused):  # Slack's refusal, found again through files.info
                await (await travelled(there, hidden)).fetch(1_000_000)
            assert refs_refused(there, "slack", image.ref, FOREIGN["slack"]) == []
        finally:
            with anyio.CancelScope(shield=True):
                await here.close()
                await there.close()
    assert [call.params["file"] for call in fake.calls_to("files.info")] == [shot["id"], gone["id"]]
    assert fake.downloads == [(shot["id"], BOT_TOKEN)]


# ---- Discord ------------------------------------------------------------------------------------
@asynccontextmanager
async def discord_pair() -> AsyncIterator[tuple[FakeDiscord, User, DiscordSurface, DiscordSurface]]:
    async with FakeDiscord() as fake:
        guild = fake.add_guild(channels=("general",))
        alice = fake.user("Alice")
        fake.join(guild, alice)
        settings = load_settings(discord=discord_access(fake, alice)).discord
        here = fast_surface(settings, min_edit_interval=0.01)
        there = fast_surface(settings, min_edit_interval=0.01)
        try:
            yield fake, alice, here, there
        finally:
            await here.close()
            await there.close()


async def test_a_discord_attachment_is_downloaded_again_from_the_cdn_by_another_replica() -> None:
    async with discord_pair() as (fake, alice, here, there):
        events: list[Inbound | ChoiceAnswer] = []

        async def on_event(event: Inbound | ChoiceAnswer) -> None:
            events.append(event)

        async with anyio.create_task_group() as tg:
            await tg.start(here.run, on_event)
            await wait_for(here.is_ready, "the gateway")
            photo = FakeFile("shot.png", PNG, "image/png")
            fake.dm(alice, f"<@{fake.bot.id}> look", files=(photo,))
            await wait_for(lambda: events, "the message")
            tg.cancel_scope.cancel()
        (file,) = events[0].files  # type: ignore[union-attr]
        assert "/cdn/attachments/" in file.ref and fake.token not in file.ref
        assert await (await travelled(there, file)).fetch(1024) == PNG
        with pytest.raises(FileRefused):
            await (await travelled(there, file)).fetch(10)  # its claimed size, past the limit
        assert refs_refused(there, "discord", file.ref, FOREIGN["discord"]) == []
    assert fake.downloads == [photo.id]


# ---- end to end: three replicas -----------------------------------------------------------------
async def test_a_photo_sent_through_the_other_replica_reaches_the_agent_of_the_serving_one(
    tmp_path: Path,
) -> None:
    slow = script({"chunk": "Working "}, {"sleep": 2.0}, {"chunk": "slow done"})
    async with cluster(tmp_path, "telegram", users=[ALICE]) as c:
        await c.post_update(c.api.dm(ALICE, slow))
        serving = (await c.wait_prompt("Working")).replica
        photo = c.api.post_photo(ALICE.id, ALICE, JPEG, "what is this")
        await c.post_update(photo, to=c.other_than(serving))  # while the slow turn runs
        await c.wait_text(ALICE.id, "slow done")
        await c.wait_text(ALICE.id, "[received: resource_link", timeout=30)
        (prompt,) = c.prompts_containing("what is this")
        assert prompt.replica is serving
        assert not any("could not be passed" in text for text in c.chat_texts(ALICE.id))
    saved = list((tmp_path / "workspace" / ".switchboard" / "inbox").rglob("*"))
    assert [path.read_bytes() for path in saved if path.is_file()] == [JPEG]
