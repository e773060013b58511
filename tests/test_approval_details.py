"""Approvals show what will run: details an agent sent in earlier `tool_call` /
`tool_call_update` frames are merged into a `session/request_permission` that carries only the
tool call's id — on the approval card and in `ask`'s "approval required" sentence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import PendingPermission, PermissionRequest
from bot.permissions import approval_prompt
from tests.acp_helpers import agent_spec, collect_turn, open_test_client
from tests.conftest import FakeAgent, script

WAIT = 20

EDIT = {
    "sessionUpdate": "tool_call",
    "toolCallId": "call_9",
    "title": "Edit notes.txt",
    "kind": "edit",
    "status": "pending",
    "locations": [{"path": "notes.txt"}],
    "content": [
        {
            "type": "diff",
            "path": "notes.txt",
            "oldText": "one\ntwo\nthree\n",
            "newText": "one\n2\nthree\nfour\n",
        }
    ],
}
COMMAND = {
    "sessionUpdate": "tool_call",
    "toolCallId": "call_7",
    "title": "bash",
    "kind": "other",
    "status": "pending",
}
COMMAND_UPDATE = {
    "sessionUpdate": "tool_call_update",
    "toolCallId": "call_7",
    "kind": "execute",
    "rawInput": {"command": "echo hi > f.txt"},
}


def _bare_permission(tool_call_id: str) -> dict[str, Any]:
    return {"permission": {"toolCall": {"toolCallId": tool_call_id}}}


async def _asked(fake_agent: FakeAgent, workspace: Path, prompt: str) -> PermissionRequest:
    seen: list[PermissionRequest] = []

    def reject(pending: PendingPermission) -> str | None:
        seen.append(pending.request)
        option = pending.request.option_of_kind("reject_once")
        return option.option_id if option else None

    spec = agent_spec(fake_agent, workspace)
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            await collect_turn(session, prompt, reject)
    (request,) = seen
    return request


@pytest.mark.anyio
async def test_an_edit_known_from_an_earlier_tool_call_is_shown_with_its_diff(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    request = await _asked(
        fake_agent, workspace, script({"update": EDIT}, _bare_permission("call_9"))
    )
    assert request.tool.title == "Edit notes.txt" and request.tool.kind == "edit"
    card = approval_prompt(request)
    assert "  Edit notes.txt (edit)" in card
    assert "  notes.txt: +2 \u22121" in card  # two lines added, one removed
    assert "```diff\n@@ -1,3 +1,4 @@\n one\n-two\n+2\n three\n+four\n```" in card
    assert "  a tool" not in card


@pytest.mark.anyio
async def test_an_update_patches_the_call_before_the_request(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    prompt = script({"update": COMMAND}, {"update": COMMAND_UPDATE}, _bare_permission("call_7"))
    request = await _asked(fake_agent, workspace, prompt)
    card = approval_prompt(request)
    assert "  bash (execute)" in card
    assert "  echo hi > f.txt" in card


@pytest.mark.anyio
async def test_details_of_the_request_itself_win_and_other_calls_do_not_leak(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    permission = {"permission": {"toolCall": {"toolCallId": "call_9", "title": "Write notes"}}}
    prompt = script({"update": COMMAND}, {"update": EDIT}, permission)
    request = await _asked(fake_agent, workspace, prompt)
    assert request.tool.title == "Write notes"
    assert request.tool.kind == "edit"  # from the earlier tool_call of the same id
    assert "bash" not in approval_prompt(request)


def test_a_long_diff_shows_its_first_lines_and_how_many_more(tmp_path: Path) -> None:
    from acp import FileDiff, ToolCall

    diff = FileDiff("big.py", None, "".join(f"line {n}\n" for n in range(40)))
    tool = ToolCall("c", title="Write big.py", kind="edit", diffs=(diff,))
    card = approval_prompt(PermissionRequest("s", tool, ()))
    assert "  big.py: +40 \u22120" in card
    assert "\n+line 0\n" in card and "line 39" not in card
    assert "more lines" in card


def test_ask_says_which_tool_and_what_it_changes(run_cli, fake_agent):  # type: ignore[no-untyped-def]
    prompt = script({"update": EDIT}, _bare_permission("call_9"))
    result = run_cli("ask", "--agent-command", fake_agent.command(), prompt)
    assert result.returncode == 1
    assert "approval to run a tool (Edit notes.txt: notes.txt: +2 \u22121)" in (result.stderr), (
        result.stderr
    )
