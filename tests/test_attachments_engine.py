"""Files people attach, through the engine: the recording surface hands the bot messages with
files, the real fake-agent subprocess says what reached it (and logs the prompt frame)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
import pytest

from surfaces.base import Inbound, IncomingFile, UserRef
from surfaces.errors import FileRefused
from tests.conftest import FakeAgent
from tests.engine_helpers import CHAT, ScriptedSurface, engine_settings, finished, running_app

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 40
IMAGES = ("--prompt-capabilities", '{"image": true}')
CONTEXT = ("--prompt-capabilities", '{"embeddedContext": true}')


def attached(
    name: str, data: bytes, *, size: int | None = -1, kind: str = "document"
) -> tuple[IncomingFile, list[int]]:
    fetched: list[int] = []

    async def fetch(limit: int) -> bytes:
        fetched.append(limit)
        if len(data) > limit:
            raise FileRefused("Telegram does not let bots download files this large", limit=limit)
        return data

    claimed = len(data) if size == -1 else size
    return IncomingFile(name=name, mime="", size=claimed, fetch=fetch, kind=kind), fetched


def message(text: str, *files: IncomingFile, event: str = "") -> Inbound:
    return Inbound(
        CHAT,
        UserRef("alice", "Alice"),
        text,
        event or f"ev-{text}-{len(files)}",
        anyio.Event(),
        files,
    )


def prompt_blocks(fake: FakeAgent) -> list[list[dict[str, Any]]]:
    return [frame["params"]["prompt"] for frame in fake.frames_in("session/prompt")]


async def send(
    tmp_path: Path, fake: FakeAgent, inbound: Inbound, *agent_opts: str, **settings: Any
) -> ScriptedSurface:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake, *agent_opts, **settings), surface):
        await finished(surface.post(inbound))
    return surface


async def test_a_captioned_photo_reaches_an_agent_that_takes_images_as_an_image_block(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    photo, _ = attached("", PNG, kind="image")
    surface = await send(tmp_path, fake_agent, message("what is this?", photo), *IMAGES)
    (blocks,) = prompt_blocks(fake_agent)
    assert blocks == [
        {"type": "text", "text": "what is this?"},
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
    ]
    assert f"[received: image image/png {len(PNG)}B]" in surface.transcript()
    assert not (tmp_path / ".switchboard").exists()


async def test_a_photo_without_caption_is_still_a_question_to_the_agent(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    photo, _ = attached("", PNG, kind="image")
    surface = await send(tmp_path, fake_agent, message("", photo), *IMAGES)
    (blocks,) = prompt_blocks(fake_agent)
    assert blocks[0]["type"] == "text" and blocks[0]["text"].startswith(
        "I am sending you this file: photo-"
    )
    assert blocks[1]["type"] == "image"
    assert "Echo: I am sending you this file: photo-" in surface.transcript()


async def test_an_agent_without_the_capability_gets_the_photo_saved_and_linked(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    photo, _ = attached("cat", PNG, kind="image")
    surface = await send(tmp_path, fake_agent, message("and this?", photo))
    (blocks,) = prompt_blocks(fake_agent)
    text, link = blocks
    assert text == {"type": "text", "text": "and this?"}
    assert link["type"] == "resource_link" and link["name"] == "cat.png"
    assert link["mimeType"] == "image/png" and link["size"] == len(PNG)
    (saved,) = (tmp_path / ".switchboard" / "inbox").glob("*/cat.png")
    assert link["uri"] == saved.as_uri() and saved.read_bytes() == PNG
    assert f"[received: resource_link cat.png image/png {len(PNG)}B]" in surface.transcript()


async def test_a_text_document_is_embedded_when_the_agent_takes_embedded_context(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    document, _ = attached("../../notes.md", b"# Notes\nall fine\n")
    await send(tmp_path, fake_agent, message("summarise", document), *CONTEXT)
    (blocks,) = prompt_blocks(fake_agent)
    assert [b["type"] for b in blocks] == ["text", "resource_link", "resource"]
    assert blocks[1]["name"] == "notes.md"
    assert blocks[2]["resource"] == {
        "uri": blocks[1]["uri"],
        "text": "# Notes\nall fine\n",
        "mimeType": "text/plain",
    }
    assert (tmp_path / ".switchboard" / "inbox").glob("*/notes.md")


async def test_oversized_and_forbidden_files_are_refused_with_a_sentence_and_the_rest_goes_on(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    big, big_fetched = attached("huge.pdf", b"%PDF-" + b"0" * 2000)
    program, _ = attached("totally-a-photo.png", ELF, kind="image")
    photo, _ = attached("fine.png", PNG)
    surface = await send(
        tmp_path, fake_agent, message("look", big, program, photo), *IMAGES, max_file_bytes=1000
    )
    assert big_fetched == []  # refused from its claimed size, never downloaded
    said = surface.transcript()
    assert (
        "huge.pdf was not sent to the agent: it is 2 KB, over the limit of 1000 bytes per file."
        in said
    )
    assert (
        "totally-a-photo.png was not sent to the agent: it is a program, and Switchboard never "
        "accepts programs." in said
    )
    (blocks,) = prompt_blocks(fake_agent)
    assert [b["type"] for b in blocks] == ["text", "image"]


async def test_a_message_of_refused_files_only_never_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    program, _ = attached("run-me", ELF)
    lying, fetched = attached("", PNG * 100, size=None, kind="image")  # size unknown, too big
    surface = await send(tmp_path, fake_agent, message("", program, lying), max_file_bytes=1000)
    assert prompt_blocks(fake_agent) == []
    assert fetched == [1000]
    said = surface.transcript()
    assert "run-me was not sent to the agent: it is a program" in said
    assert (
        "The photo was not sent to the agent: Telegram does not let bots download files this "
        "large." in said
    )
