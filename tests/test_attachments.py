"""Files people attach, in isolation: types from the bytes, safe names, the limits (before and
during download), the blocks per agent capability, the inbox, and the agent's reply files."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from acp import EventKind, PromptCapabilities
from acp._dispatch import parse_update
from bot.attachments import (
    FileLimits,
    Intake,
    build_prompt,
    receive,
    save_in_inbox,
    take_in,
)
from bot.file_types import safe_name, sniff, with_extension
from config import ConfigError, load_settings
from surfaces.base import IncomingFile
from surfaces.errors import FileRefused

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 40
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 40
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 40
LIMITS = FileLimits(1000, 3, frozenset({"image", "audio", "video", "text", "pdf", "document"}))
ALL = PromptCapabilities(image=True, audio=True, embedded_context=True)
NONE = PromptCapabilities()


class Upload:
    """An IncomingFile whose downloads are counted, and which stops at the limit as a platform
    download does (unless `honest` is false: it then returns everything)."""

    def __init__(self, data: bytes, name: str = "x", size: int | None = None, **kw: str) -> None:
        self.data = data
        self.fetched: list[int] = []
        self.honest = kw.pop("honest", "yes") == "yes"
        self.file = IncomingFile(
            name=name,
            mime=kw.get("mime", ""),
            size=size,
            fetch=self.fetch,
            kind=kw.get("kind", "document"),
        )

    async def fetch(self, limit: int) -> bytes:
        self.fetched.append(limit)
        if self.honest and len(self.data) > limit:
            raise FileRefused(f"it is larger than {limit} bytes", limit=limit)
        return self.data


# ---- types from the bytes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "category", "mime"),
    [
        (PNG, "image", "image/png"),
        (JPEG, "image", "image/jpeg"),
        (b"GIF89a....", "image", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image", "image/webp"),
        (b"RIFF\x00\x00\x00\x00WAVEfmt ", "audio", "audio/wav"),
        (b"OggS\x00\x02", "audio", "audio/ogg"),
        (b"ID3\x03\x00", "audio", "audio/mpeg"),
        (b"\x00\x00\x00\x18ftypisom", "video", "video/mp4"),
        (b"%PDF-1.7\n", "pdf", "application/pdf"),
        (
            b"PK\x03\x04" + b"\x00" * 26 + b"word/document.xml",
            "document",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ),
        (b"PK\x03\x04" + b"\x00" * 26 + b"notes.txt", "archive", "application/zip"),
        (b"\x1f\x8b\x08\x00", "archive", "application/gzip"),
        ("naïve text, no NUL\n".encode(), "text", "text/plain"),
        (ELF, "executable", "application/octet-stream"),
        (b"MZ\x90\x00", "executable", "application/octet-stream"),
        (b"\xcf\xfa\xed\xfe\x07", "executable", "application/octet-stream"),
        (b"\xff\xfe\x00\x00binary\x00", "binary", "application/octet-stream"),
        (b"text\x00with a NUL", "binary", "application/octet-stream"),
    ],
)
def test_the_type_comes_from_the_bytes(data: bytes, category: str, mime: str) -> None:
    kind = sniff(data)
    assert (kind.category, kind.mime) == (category, mime)


def test_a_name_gets_the_extension_of_what_the_bytes_are() -> None:
    assert with_extension("holiday", sniff(PNG)) == "holiday.png"
    assert with_extension("holiday.jpeg", sniff(JPEG)) == "holiday.jpeg"
    assert with_extension("holiday.txt", sniff(PNG)) == "holiday.txt.png"
    assert with_extension("notes.py", sniff(b"print(1)\n")) == "notes.py"
    assert with_extension("setup.exe", sniff(b"just text")) == "setup.exe.txt"


# ---- safe names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("../../etc/passwd", "passwd"),
        ("..\\..\\windows\\system.ini", "system.ini"),
        (".bashrc", "bashrc"),
        ("...", "file"),
        ("CON.txt", "_CON.txt"),
        ("nul", "_nul"),
        ("COM1.log", "_COM1.log"),
        ("a\x00b", "ab"),
        ("line\nbreak\t.txt", "linebreak.txt"),
        ("evil\u202egnp.exe", "evilgnp.exe"),
        ("zero\u200bwidth.md", "zerowidth.md"),
        ('what?<is>:"this|*.txt', "what__is___this__.txt"),
        ("", "file"),
        ("/", "file"),
    ],
)
def test_names_are_made_safe(raw: str, safe: str) -> None:
    assert safe_name(raw, fallback="file") == safe


def test_a_long_name_is_cut_keeping_its_extension() -> None:
    name = safe_name("x" * 300 + ".png", fallback="file")
    assert len(name) == 120 and name.endswith("x.png")


# ---- limits ----------------------------------------------------------------------------------


async def test_a_file_claimed_too_large_is_never_downloaded() -> None:
    upload = Upload(PNG, "big.png", size=5000)
    received, refusals = await receive([upload.file], LIMITS)
    assert received == [] and upload.fetched == []
    assert refusals == [
        "big.png was not sent to the agent: it is 5 KB, over the limit of 1000 bytes per file."
    ]


async def test_a_download_past_the_limit_is_stopped_and_refused() -> None:
    upload = Upload(PNG * 100, "photo.png", size=None)  # the platform did not say its size
    received, refusals = await receive([upload.file], LIMITS)
    assert upload.fetched == [1000]  # the limit went to the download
    assert received == []
    assert refusals == ["photo.png was not sent to the agent: it is larger than 1000 bytes."]


async def test_a_download_that_ignores_the_limit_is_still_refused() -> None:
    upload = Upload(PNG * 100, "photo.png", size=10, honest="no")  # the claim lied
    received, refusals = await receive([upload.file], LIMITS)
    assert received == [] and "over the limit of 1000 bytes" in refusals[0]


async def test_programs_and_kinds_not_allowed_are_refused_whatever_their_name() -> None:
    program = Upload(ELF, "cat.png", mime="image/png")
    archive = Upload(b"\x1f\x8b\x08\x00" + b"\x00" * 20, "logs.tgz")
    photo = Upload(PNG, "ok.png")
    received, refusals = await receive([program.file, archive.file, photo.file], LIMITS)
    assert [r.name for r in received] == ["ok.png"]
    assert refusals[0] == (
        "cat.png was not sent to the agent: it is a program, and Switchboard never accepts "
        "programs."
    )
    assert refusals[1].startswith("logs.tgz was not sent to the agent: it is a archive")
    assert "document, image, pdf, text, video" in refusals[1]


async def test_more_files_than_a_message_may_carry_are_refused_by_name() -> None:
    uploads = [Upload(PNG, f"p{n}.png") for n in range(5)]
    received, refusals = await receive([u.file for u in uploads], LIMITS)
    assert [r.name for r in received] == ["p0.png", "p1.png", "p2.png"]
    assert refusals == [
        f"p{n}.png was not sent to the agent: a message may carry at most 3 files." for n in (3, 4)
    ]
    assert uploads[4].fetched == []


async def test_a_photo_without_a_name_is_named_for_when_it_came() -> None:
    (received,), _ = await receive([Upload(JPEG, "", kind="image").file], LIMITS)
    assert received.name.startswith("photo-") and received.name.endswith(".jpg")


def test_the_platform_limit_lowers_ours() -> None:
    settings = load_settings(max_file_bytes=50, max_files=2, file_types="image, text")
    assert FileLimits.of(settings, 20) == FileLimits(20, 2, frozenset({"image", "text"}))
    assert FileLimits.of(settings, 0).max_bytes == 50
    assert load_settings().max_file_bytes == 20 * 1024 * 1024
    with pytest.raises(ConfigError, match=r"SWITCHBOARD_FILE_TYPES.*unknown file type 'exe'"):
        load_settings(file_types="image,exe")


async def test_a_message_of_refused_files_only_sends_nothing() -> None:
    intake = await take_in([""], [[Upload(ELF, "a").file]], LIMITS)
    assert not intake.for_agent and len(intake.refusals) == 1
    captioned = await take_in(["look"], [[Upload(ELF, "a").file]], LIMITS)
    assert captioned.for_agent and captioned.text == "look"


# ---- blocks per capability -------------------------------------------------------------------


def intake_of(*files: tuple[str, bytes], text: str = "") -> Intake:
    from bot.attachments import Received

    return Intake(text, [Received(name, data, sniff(data)) for name, data in files], [], len(files))


def test_text_alone_stays_a_string() -> None:
    assert build_prompt(Intake("hi", [], [], 0), ALL, Path("/nowhere")) == "hi"


def test_an_image_is_an_image_block_when_the_agent_takes_images(tmp_path: Path) -> None:
    blocks = build_prompt(intake_of(("a.png", PNG), text="what is it?"), ALL, tmp_path)
    assert blocks == [
        {"type": "text", "text": "what is it?"},
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"},
    ]
    assert not (tmp_path / ".switchboard").exists()


def test_without_the_capability_the_image_is_saved_and_linked(tmp_path: Path) -> None:
    blocks = build_prompt(intake_of(("a.png", PNG)), NONE, tmp_path, now=0)
    assert isinstance(blocks, list)
    text, link = blocks
    assert text == {"type": "text", "text": "I am sending you this file: a.png."}
    saved = tmp_path / ".switchboard" / "inbox" / "1970-01-01" / "a.png"
    assert saved.read_bytes() == PNG
    assert link == {
        "type": "resource_link",
        "uri": saved.as_uri(),
        "name": "a.png",
        "mimeType": "image/png",
        "size": len(PNG),
    }


def test_a_small_text_file_is_embedded_only_when_the_agent_takes_embedded_context(
    tmp_path: Path,
) -> None:
    with_context = build_prompt(intake_of(("log.txt", b"line 1\n")), ALL, tmp_path)
    without = build_prompt(intake_of(("log.txt", b"line 1\n")), NONE, tmp_path)
    assert [b["type"] for b in with_context] == ["text", "resource_link", "resource"]
    assert with_context[2]["resource"]["text"] == "line 1\n"  # type: ignore[index]
    assert [b["type"] for b in without] == ["text", "resource_link"]


def test_the_inbox_never_overwrites_and_stays_inside_the_workspace(tmp_path: Path) -> None:
    first = save_in_inbox(tmp_path, "a.txt", b"one", now=0)
    second = save_in_inbox(tmp_path, "a.txt", b"two", now=0)
    assert (first.name, second.name) == ("a.txt", "a-1.txt")
    assert first.read_bytes() == b"one" and second.read_bytes() == b"two"
    assert sorted(p.name for p in first.parent.iterdir()) == ["a-1.txt", "a.txt"]
    outside = tmp_path / "outside"
    outside.mkdir()
    workspace = tmp_path / "ws"
    (workspace / ".switchboard").mkdir(parents=True)
    os.symlink(outside, workspace / ".switchboard" / "inbox")
    with pytest.raises(OSError, match="outside the workspace"):
        save_in_inbox(workspace, "a.txt", b"x", now=0)
    assert list(outside.rglob("*.txt")) == []


# ---- files and plans in the agent's reply (acp) ----------------------------------------------


def chunk(content: object) -> dict[str, object]:
    return {
        "sessionId": "s",
        "update": {"sessionUpdate": "agent_message_chunk", "content": content},
    }


def test_an_image_in_the_reply_is_a_file_event() -> None:
    event = parse_update(
        chunk({"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"})
    )
    assert event is not None and event.kind is EventKind.FILE and event.file is not None
    assert (event.file.name, event.file.mime, event.file.data) == ("image.png", "image/png", PNG)


def test_a_resource_link_is_a_file_event_with_a_safe_name_and_no_text() -> None:
    event = parse_update(
        chunk(
            {
                "type": "resource_link",
                "uri": "file:///ws/out/r.pdf",
                "name": "../../\u202ex.pdf",
                "size": 12,
            }
        )
    )
    assert event is not None and event.kind is EventKind.FILE and event.file is not None
    assert (event.file.name, event.file.uri, event.file.size, event.text) == (
        "x.pdf",
        "file:///ws/out/r.pdf",
        12,
        "",
    )


def test_embedded_resources_text_and_blob() -> None:
    text = parse_update(
        chunk({"type": "resource", "resource": {"uri": "file:///a/notes.md", "text": "# hi"}})
    )
    blob = parse_update(
        chunk(
            {
                "type": "resource",
                "resource": {
                    "uri": "x",
                    "blob": base64.b64encode(b"\x01\x02").decode(),
                    "mimeType": "application/octet-stream",
                },
            }
        )
    )
    assert text is not None and text.file is not None and text.file.data == b"# hi"
    assert text.file.name == "notes.md" and text.file.mime == "text/plain"
    assert blob is not None and blob.file is not None and blob.file.data == b"\x01\x02"


@pytest.mark.parametrize(
    "content",
    [
        {"type": "image", "data": "not base64!!", "mimeType": "image/png"},
        {"type": "image", "data": 12},
        {"type": "image", "data": "A" * (30 * 1024 * 1024)},  # past the cap: not even decoded
        {"type": "resource", "resource": "nope"},
        {"type": "resource_link", "uri": ""},
        {"type": "resource_link", "uri": "x" * 5000},
    ],
)
def test_hostile_file_blocks_are_skipped_without_raising(content: object) -> None:
    event = parse_update(chunk(content))
    assert event is None or event.kind is not EventKind.FILE


def test_a_plan_is_parsed_bounded() -> None:
    entries = [
        {"content": f"step {n}", "status": "in_progress" if n == 1 else "weird"} for n in range(80)
    ]
    entries.append({"content": 5})
    entries.insert(0, {"content": "x" * 1000, "status": "completed", "priority": "high"})
    event = parse_update(
        {"sessionId": "s", "update": {"sessionUpdate": "plan", "entries": entries}}
    )
    assert event is not None and event.kind is EventKind.PLAN
    assert len(event.plan) == 50
    assert len(event.plan[0].content) == 300 and event.plan[0].status == "completed"
    assert event.plan[0].priority == "high"
    assert event.plan[2].status == "in_progress" and event.plan[1].status == "pending"


def test_usage_cost_is_read() -> None:
    update = {
        "sessionUpdate": "usage_update",
        "used": 500,
        "size": 1000,
        "cost": {"amount": 0.25, "currency": "usd"},
    }
    event = parse_update({"sessionId": "s", "update": update})
    assert event is not None and event.usage is not None
    assert (event.usage.used, event.usage.cost, event.usage.currency) == (500, 0.25, "USD")
    bad = parse_update(
        {"sessionId": "s", "update": {**update, "cost": {"amount": "lots", "currency": "$$$"}}}
    )
    assert bad is not None and bad.usage is not None and bad.usage.cost is None


def test_session_state_keeps_the_cost() -> None:
    from acp import SessionState, get_backend

    state = SessionState(get_backend("generic"))
    state.apply(
        "session/update",
        {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "usage_update",
                "used": 1,
                "size": 2,
                "cost": {"amount": 3, "currency": "EUR"},
            },
        },
    )
    assert state.usage is not None and (state.usage.cost, state.usage.currency) == (3.0, "EUR")


async def test_an_unnamed_document_is_called_file_and_a_failed_download_is_said() -> None:
    from surfaces.errors import SendFailed

    async def broken(limit: int) -> bytes:
        raise SendFailed("network down", transient=True)

    failing = IncomingFile(name="x.pdf", mime="", size=10, fetch=broken)
    received, refusals = await receive([Upload(b"%PDF-1.4").file, failing], LIMITS)
    unnamed = await receive([Upload(b"%PDF-1.4", "").file], LIMITS)
    assert unnamed[0][0].name == "file.pdf"
    assert refusals == ["x.pdf was not sent to the agent: it could not be downloaded."]
    assert [r.name for r in received] == ["x.pdf"]


async def test_a_local_file_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    from surfaces.local_files import LocalFileMissing, local_file

    (tmp_path / "big.txt").write_text("x" * 5000)
    received, refusals = await receive(
        [local_file(str(tmp_path / "big.txt"))], FileLimits(10**6, 3, LIMITS.types)
    )
    assert received[0].data == b"x" * 5000 and refusals == []
    big = local_file(str(tmp_path / "big.txt"))
    with pytest.raises(FileRefused, match="larger than 100 bytes"):
        await big.fetch(100)
    with pytest.raises(LocalFileMissing, match=r"^Cannot attach .*: it is not a regular file\.$"):
        local_file(str(tmp_path))
