"""Diffs (issue 24): an edit's change, whether a `diff` content item or only the tool's own input
(claude's Edit, MultiEdit, Write), shows on the approval card as `path: +12 −4` and a fenced code
block of its first lines, bounded for every surface; past `SWITCHBOARD_DIFF_FILE_AFTER` lines the
whole patch goes with the card as a `.diff` file where the surface takes uploads; the live
progress shows the change too, and the final names the files changed. Through the scripted agent
(a real subprocess) and the Telegram fake with the real python-telegram-bot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import FileDiff, PendingPermission, PermissionRequest, ToolCall
from acp.tool_parsing import MAX_DIFF_LINES, MAX_DIFFS
from bot.approval_card import CARD_CHARS, approval_prompt, fit_card
from surfaces.base import STATUS_MARK, SurfaceCapabilities, count_utf16
from tests.acp_helpers import agent_spec, collect_turn, open_test_client
from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, running_app, wait_for
from tests.fakes.telegram_api import FakeBotApi
from tests.harness.telegram import serving
from tests.test_telegram import ALICE, api, settings_for, shows  # noqa: F401

WAIT = 30

OLD = "".join(f"line {n}\n" for n in range(60))
NEW = OLD.replace("line 3\n", "line three\n") + "".join(f"added {n}\n" for n in range(50))


def _edit_permission(raw_input: dict[str, Any], kind: str = "edit") -> dict[str, Any]:
    tool = {"toolCallId": "e1", "title": "Edit", "kind": kind, "rawInput": raw_input}
    return {"permission": {"toolCall": tool}}


async def _asked(fake_agent: FakeAgent, workspace: Path, prompt: str) -> PermissionRequest:
    seen: list[PermissionRequest] = []

    def allow(pending: PendingPermission) -> str | None:
        seen.append(pending.request)
        option = pending.request.option_of_kind("allow_once")
        return option.option_id if option else None

    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            await collect_turn(session, prompt, allow)
    (request,) = seen
    return request


# ---- reading the change ------------------------------------------------------------------------
@pytest.mark.anyio
async def test_claudes_edit_input_is_read_as_the_change(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    raw = {"file_path": "/w/notes.txt", "old_string": "two\n", "new_string": "2\nthree\n"}
    request = await _asked(fake_agent, workspace, script(_edit_permission(raw)))
    (diff,) = request.tool.diffs
    assert diff.summary() == "/w/notes.txt: +2 \u22121"
    card = approval_prompt(request)
    assert "  /w/notes.txt: +2 \u22121\n```diff\n" in card
    assert "\n-two\n+2\n+three\n```" in card


@pytest.mark.anyio
async def test_multiedit_and_write_inputs_are_read_and_other_inputs_are_not(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    edits = [{"old_string": "a", "new_string": "b"}, {"old_string": "c", "new_string": "d\ne"}]
    multi = await _asked(
        fake_agent, workspace, script(_edit_permission({"file_path": "m.py", "edits": edits}))
    )
    assert [d.summary() for d in multi.tool.diffs] == ["m.py: +3 \u22122"]
    write = await _asked(
        fake_agent, workspace, script(_edit_permission({"file_path": "n.py", "content": "x\ny\n"}))
    )
    assert [d.summary() for d in write.tool.diffs] == ["n.py: +2 \u22120"]
    # a tool that is not an edit, whose input merely has a path and some content
    other = await _asked(
        fake_agent,
        workspace,
        script(_edit_permission({"path": "q.txt", "content": "hello"}, kind="fetch")),
    )
    assert other.tool.diffs == ()


@pytest.mark.anyio
async def test_a_hostile_change_is_read_bounded(fake_agent: FakeAgent, workspace: Path) -> None:
    huge = "x\n" * (MAX_DIFF_LINES * 3)
    content = [
        {"type": "diff", "path": f"f{n}.txt", "oldText": huge, "newText": huge + "y\n"}
        for n in range(MAX_DIFFS + 10)
    ]
    content.append({"type": "diff", "path": 42, "newText": "not a path"})
    tool = {"toolCallId": "h1", "title": "Edit", "kind": "edit", "content": content}
    request = await _asked(fake_agent, workspace, script({"permission": {"toolCall": tool}}))
    assert len(request.tool.diffs) == MAX_DIFFS
    assert all(d.new_text.count("\n") <= MAX_DIFF_LINES for d in request.tool.diffs)
    card = approval_prompt(request)
    assert len(card) <= CARD_CHARS
    assert card.count("```") % 2 == 0  # every block it opened is closed
    assert "and f3.txt" in card  # the files past the first few are named


def test_the_card_fits_a_surface_smaller_than_the_bound() -> None:
    diffs = tuple(FileDiff(f"src/{n}.py", "a\n" * 5, "b\n" * 40) for n in range(2))
    request = PermissionRequest("s", ToolCall("c", title="Edit", kind="edit", diffs=diffs), ())

    class Small:
        capabilities = SurfaceCapabilities(max_chars=400, count=count_utf16)

    card = approval_prompt(request)
    fitted = fit_card(card, Small())  # type: ignore[arg-type]
    assert count_utf16(fitted) <= 300 and fitted.count("```") % 2 == 0
    assert fitted.startswith("The agent wants to use a tool:")


def test_a_patch_is_a_unified_diff_with_its_headers() -> None:
    changed = FileDiff("src/a.py", "one\ntwo\n", "one\n2\n").patch()
    assert changed.startswith("--- a/src/a.py\n+++ b/src/a.py\n@@ ")
    assert "-two\n+2\n" in changed
    assert FileDiff("new.txt", None, "hi").patch().startswith("--- /dev/null\n+++ b/new.txt\n")


# ---- Telegram: the card, and the patch as a file -----------------------------------------------
def _long_edit() -> str:
    change = {"type": "diff", "path": "/w/long.txt", "oldText": OLD, "newText": NEW}
    tool = {"toolCallId": "e1", "title": "Edit long.txt", "kind": "edit", "content": [change]}
    return script({"permission": {"toolCall": tool}}, {"chunk": "edited"})


def _card(api: FakeBotApi) -> Any:  # noqa: F811
    return next((m for m in api.chat_messages(ALICE.id) if m.reply_markup), None)


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_card_shows_the_change_and_a_long_one_comes_as_a_diff_file(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    async with serving(settings_for(tmp_path, fake_agent, api)):
        api.dm(ALICE, _long_edit())
        await wait_for(lambda: _card(api), "the approval card", 15)
        message = _card(api)
        assert "  /w/long.txt: +51 \u22121\n```diff\n@@ " in message.text
        assert "+line three" in message.text and "added 49" not in message.text
        (upload,) = [u for u in api.uploads if u.chat_id == ALICE.id]
        assert upload.name == "long.txt.diff" and upload.method == "document"
        patch = upload.data.decode()
        assert patch.startswith("--- a/w/long.txt\n+++ b/w/long.txt\n")
        assert "+added 49\n" in patch and "-line 3\n" in patch
        buttons = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        allow = next(b for b in buttons if b["text"] == "Yes")
        api.press(ALICE, message, allow["callback_data"])
        await wait_for(shows(api, ALICE.id, "edited"), "the turn to go on", 15)


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_sends_no_file_for_a_change_within_the_setting(
    tmp_path: Path,
    fake_agent: FakeAgent,
    api: FakeBotApi,  # noqa: F811
) -> None:
    settings = settings_for(tmp_path, fake_agent, api).model_copy(update={"diff_file_after": 1000})
    async with serving(settings):
        api.dm(ALICE, _long_edit())
        await wait_for(lambda: _card(api), "the approval card", 15)
        assert "/w/long.txt: +51" in _card(api).text
    assert not [u for u in api.uploads if u.chat_id == ALICE.id]


# ---- the live progress -------------------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_the_live_progress_shows_the_change_and_the_final_names_the_files(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    edit = {
        "sessionUpdate": "tool_call",
        "toolCallId": "e1",
        "title": "Edit",
        "kind": "edit",
        "status": "pending",  # it never runs: nobody is asked here
        "rawInput": {"file_path": "src/a.py", "old_string": "x = 1\n", "new_string": "x = 2\n"},
    }
    steps = script({"update": edit}, {"sleep": 0.4}, {"chunk": "Done."})
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", steps)))
    live = [call.text for call in surface.ops("send", "edit") if not call.formatted]
    assert any(
        f"{STATUS_MARK}working\n▸ Edit (src/a.py): src/a.py: +1 \u22121\n│ @@ -1 +1 @@\n"
        "│ -x = 1\n│ +x = 2" in text
        for text in live
    ), live
    final = list(surface.shown().values())[-1]
    assert final.endswith("Tools: 1 edit · changed src/a.py")
