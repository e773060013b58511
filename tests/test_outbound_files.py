"""The agent's files, delivered after its reply: uploads within the surface's limit, a workspace
file it links to uploaded only from inside the workspace (no symlink escape), and a one-line note
for the rest (too big, no uploads here, outside the workspace, an http link: never fetched); a
failed upload is a line, not a failed turn; a long reply as a .md file with a short summary."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from acp import AgentFile
from bot.outbound_files import deliver_files
from surfaces.errors import SendFailed
from tests.conftest import FakeAgent, script
from tests.engine_helpers import CHAT, ScriptedSurface, engine_settings, finished, running_app

pytestmark = [pytest.mark.usefixtures("clean_env")]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def _image_chunk(data: bytes) -> dict:
    content = {"type": "image", "mimeType": "image/png", "data": base64.b64encode(data).decode()}
    return {"update": {"sessionUpdate": "agent_message_chunk", "content": content}}


def _link_chunk(uri: str, name: str) -> dict:
    content = {"type": "resource_link", "uri": uri, "name": name}
    return {"update": {"sessionUpdate": "agent_message_chunk", "content": content}}


def _surface(limit: int = 1000) -> ScriptedSurface:
    return ScriptedSurface(max_upload_bytes=limit)


# ---- delivery, file by file --------------------------------------------------------------------
@pytest.mark.anyio
async def test_bytes_within_the_limit_are_uploaded_and_bigger_ones_saved_with_a_note(
    tmp_path: Path,
) -> None:
    surface = _surface(limit=100)
    files = [
        AgentFile("../../etc/shot.png", "image/png", data=PNG),
        AgentFile("", "image/png", data=b"x" * 101),
    ]
    notes = await deliver_files(surface, CHAT, files, tmp_path)
    (sent,) = surface.files()
    assert (sent.name, sent.data, sent.mime, sent.is_image) == ("shot.png", PNG, "image/png", True)
    (note,) = notes
    saved = note.rsplit(": ", 1)[1]
    assert note.startswith("File from the agent (too big to upload here): .switchboard/outbox/")
    assert saved.endswith("/file.png")
    assert (tmp_path / saved).read_bytes() == b"x" * 101


@pytest.mark.anyio
async def test_without_uploads_bytes_are_saved_and_named(tmp_path: Path) -> None:
    surface = _surface(limit=0)
    notes = await deliver_files(surface, CHAT, [AgentFile("a.txt", data=b"one")] * 2, tmp_path)
    assert not surface.files()
    paths = [note.rsplit(": ", 1)[1] for note in notes]
    assert [Path(path).name for path in paths] == ["a.txt", "a-1.txt"]  # never overwritten
    assert all("this chat takes no uploads" in note for note in notes)
    assert all((tmp_path / path).read_bytes() == b"one" for path in paths)


@pytest.mark.anyio
async def test_a_linked_workspace_file_is_uploaded_and_anything_else_only_named(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "out").mkdir(parents=True)
    (workspace / "out" / "report.txt").write_text("the report")
    (workspace / "big.log").write_bytes(b"z" * 2000)
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")
    os.symlink(outside, workspace / "escape.txt")
    surface = _surface(limit=1000)
    files = [
        AgentFile("report.txt", uri=(workspace / "out" / "report.txt").as_uri()),
        AgentFile("secret.txt", uri=outside.as_uri()),
        AgentFile("escape.txt", uri=(workspace / "escape.txt").as_uri()),
        AgentFile("big.log", uri=(workspace / "big.log").as_uri()),
        AgentFile("page", uri="https://example.com/page"),
        AgentFile("dir", uri=(workspace / "out").as_uri()),
        AgentFile("nul", uri="file:///etc%00/passwd"),
        AgentFile("remote", uri="file://fileserver/share/x.txt"),
    ]
    notes = await deliver_files(surface, CHAT, files, workspace)
    (sent,) = surface.files()
    assert (sent.name, sent.data) == ("report.txt", b"the report")
    assert notes == [
        f"File from the agent, outside the workspace (not sent): {outside}",
        f"File from the agent, outside the workspace (not sent): {workspace / 'escape.txt'}",
        f"File from the agent (too big to upload here): {workspace / 'big.log'}",
        "Link from the agent: https://example.com/page",
        f"File from the agent, not a regular file (not sent): {workspace / 'out'}",
        "File from the agent, with an unusable path (not sent): file:///etc%00/passwd",
        "File from the agent, not on this machine (not sent): file://fileserver/share/x.txt",
    ]


@pytest.mark.anyio
async def test_a_failed_upload_is_one_line(tmp_path: Path) -> None:
    surface = _surface()
    surface.fail_next(SendFailed("file type refused", transient=False), on="send_file")
    notes = await deliver_files(surface, CHAT, [AgentFile("a.bin", data=b"1")], tmp_path)
    assert notes == ["Could not upload a.bin: file type refused."]


# ---- end to end --------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_the_agents_image_and_workspace_file_arrive_after_the_reply(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    (tmp_path / "notes.md").write_text("# notes")
    surface = _surface(limit=10_000)
    steps = script(
        {"chunk": "Here you go."},
        _image_chunk(PNG),
        _link_chunk((tmp_path / "notes.md").as_uri(), "notes.md"),
        _link_chunk("https://example.com/x.png", "x.png"),
    )
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    sent = surface.files()
    assert [file.data for file in sent] == [PNG, b"# notes"]
    calls = surface.ops("send", "edit", "send_file")
    first_upload = next(i for i, call in enumerate(calls) if call.op == "send_file")
    final = max(i for i, call in enumerate(calls) if call.text == "Here you go.")
    assert first_upload > final  # after the answer
    assert list(surface.shown().values())[-1] == "Link from the agent: https://example.com/x.png"


@pytest.mark.anyio
async def test_a_long_reply_is_sent_as_a_file_with_a_summary(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(max_chars=200, max_upload_bytes=100_000)
    settings = engine_settings(tmp_path, fake_agent, reply_file_after=2)
    first = "The short version: it works."
    body = first + "\n\n" + "\n\n".join(f"Detail {n}: " + "words " * 20 for n in range(10))
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", script({"chunk": body}))))
    (sent,) = surface.files()
    assert (sent.name, sent.mime) == ("reply.md", "text/markdown")
    assert sent.data.decode() == body
    shown = [text for text in surface.shown().values() if text != "…"]
    assert shown == [f"{first}\n\n(Full reply attached: reply.md)"]


@pytest.mark.anyio
async def test_a_long_reply_stays_text_where_the_setting_is_off_or_no_uploads(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    body = "\n\n".join(f"Detail {n}: " + "words " * 20 for n in range(10))
    for surface, after in (
        (ScriptedSurface(max_chars=200, max_upload_bytes=100_000), 0),
        (ScriptedSurface(max_chars=200), 2),
    ):
        state = str(tmp_path / f"state-{after}.db")  # each run its own event ids
        settings = engine_settings(tmp_path, fake_agent, reply_file_after=after, state=state)
        async with running_app(settings, surface):
            await finished(surface.post(surface.message("alice", script({"chunk": body}))))
        assert not surface.files()
        assert "Detail 9" in surface.transcript()


@pytest.mark.anyio
async def test_a_refused_reply_file_is_sent_as_text_after_all(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface(max_chars=200, max_upload_bytes=100_000)
    surface.fail_next(SendFailed("uploads are off here", transient=False), on="send_file")
    settings = engine_settings(tmp_path, fake_agent, reply_file_after=2)
    body = "\n\n".join(f"Detail {n}: " + "words " * 20 for n in range(10))
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", script({"chunk": body}))))
    assert not surface.files()
    shown = surface.transcript()
    assert "(Full reply attached: reply.md)" in shown
    assert "The full reply could not be attached; here it is as text." in shown
    assert all(f"Detail {n}:" in shown for n in range(10))
