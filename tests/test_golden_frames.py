"""Golden wire frames.

What we SEND is captured from the fake agent's `--log` file while acp's real API (open_runtime,
AcpClient, AcpSession) drives it, normalized (workspace, home and session ids become placeholders)
and compared with `tests/golden/sent_*.json`. What we PARSE comes from frames real agents sent
(as recorded in tests/fakes/REAL_AGENTS_NOTES.md), stored as `tests/golden/parse_*.json` next to what
`acp._dispatch` makes of them.

After an intended change, `SWITCHBOARD_UPDATE_GOLDEN=1` rewrites the golden files (for parse files
only the "parsed" half; the captured frame is source data). Review the diff before committing."""

from __future__ import annotations

import dataclasses
import difflib
import enum
import json
import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import (
    AcpEvent,
    EventKind,
    GatePlan,
    PendingPermission,
)
from acp._dispatch import (
    codex_thread_status,
    kiro_context_percent,
    parse_permission_request,
    parse_refusal,
    parse_update,
)
from acp.types import RefusalInfo
from tests.acp_helpers import agent_spec as _spec
from tests.acp_helpers import collect_turn as _turn
from tests.acp_helpers import open_test_client as _client
from tests.conftest import FakeAgent

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("SWITCHBOARD_UPDATE_GOLDEN") == "1"
WAIT = 20  # seconds: an upper bound on every test here, never a measurement

_RE_SESSION_ID = re.compile(r"\bsess-[0-9a-f]{8}\b")


# ---- golden files ----------------------------------------------------------------------------
def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _diff_or_none(name: str, expected: Any, actual: Any) -> str | None:
    want, got = _pretty(expected), _pretty(actual)
    if want == got:
        return None
    return "".join(
        difflib.unified_diff(
            want.splitlines(keepends=True),
            got.splitlines(keepends=True),
            fromfile=f"tests/golden/{name} (golden)",
            tofile=f"tests/golden/{name} (actual)",
        )
    )


def check_golden(name: str, actual: Any) -> None:
    """Compare pretty-printed JSON so that a drift reads as a diff."""
    path = GOLDEN / name
    if UPDATE:
        path.write_text(_pretty(actual), encoding="utf-8")
        return
    if not path.exists():
        pytest.fail(f"{path} is missing; SWITCHBOARD_UPDATE_GOLDEN=1 writes it", pytrace=False)
    diff = _diff_or_none(name, json.loads(path.read_text(encoding="utf-8")), actual)
    if diff is not None:
        pytest.fail(
            f"wire frames drifted from tests/golden/{name} "
            f"(SWITCHBOARD_UPDATE_GOLDEN=1 rewrites it after an intended change):\n{diff}",
            pytrace=False,
        )


def test_a_drift_from_the_golden_reads_as_a_line_diff() -> None:
    diff = _diff_or_none("x.json", {"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 3]})
    assert diff is not None
    assert "-    2\n" in diff and "+    3\n" in diff
    assert _diff_or_none("x.json", {"b": 1, "a": 2}, {"a": 2, "b": 1}) is None


# ---- driving the real API against the fake agent ----------------------------------------------


def _normalize(value: Any, replacements: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in replacements:
            value = value.replace(old, new)
        return _RE_SESSION_ID.sub("<SESSION_ID>", value)
    if isinstance(value, dict):
        return {key: _normalize(item, replacements) for key, item in value.items()}
    if isinstance(value, list):
        return [_normalize(item, replacements) for item in value]
    return value


def sent_frames(agent: FakeAgent, workspace: Path) -> list[dict[str, Any]]:
    """Every frame the fake agent read from us, in order, normalized."""
    replacements = sorted(
        [(str(workspace), "<WORKSPACE>"), (str(Path.home()), "<HOME>")],
        key=lambda pair: -len(pair[0]),
    )
    raw = [r for r in agent.records() if r.get("dir") == "in"]
    assert all("frame" in r for r in raw), f"we sent a line that is not JSON: {raw}"
    return [_normalize(r["frame"], replacements) for r in raw]


def after_handshake(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert [f.get("method") for f in frames[:2]] == ["initialize", "session/new"], frames[:2]
    return frames[2:]


# ---- what we send -------------------------------------------------------------------------------
HANDSHAKES = [
    pytest.param(
        "kiro",
        ("--models", "kiro-small,kiro-large"),
        GatePlan(),  # kiro gates through its command line: no mode switch
        "kiro-large",
        "sent_handshake_kiro.json",
        id="kiro-string-version-set-model",
    ),
    pytest.param(
        "claude",
        ("--modes", "auto,default", "--models", "sonnet,opus"),
        GatePlan(mode="default"),
        "opus",
        "sent_handshake_claude.json",
        id="claude-set-mode-legacy-modes",
    ),
    pytest.param(
        "codex",
        ("--modes", "agent,read-only", "--models", "gpt-a,gpt-b", "--config-options"),
        GatePlan(mode="read-only"),
        "gpt-b",
        "sent_handshake_codex.json",
        id="codex-set-config-option",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("dialect", "options", "gate", "model", "golden"), HANDSHAKES)
async def test_the_handshake_gate_mode_and_model_switch_match_the_golden_frames(
    fake_agent: FakeAgent,
    workspace: Path,
    dialect: str,
    options: tuple[str, ...],
    gate: GatePlan,
    model: str,
    golden: str,
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace, *options, dialect=dialect), gate) as client:
            session = await client.open_session(model=model)
            assert session.model == model
    frames = sent_frames(fake_agent, workspace)
    version = frames[0]["params"]["protocolVersion"]
    assert version == ("2025-08-22" if dialect == "kiro" else 1)
    assert type(version) is (str if dialect == "kiro" else int)
    assert frames[1]["params"] == {"cwd": "<WORKSPACE>", "mcpServers": []}
    check_golden(golden, frames)


@pytest.mark.anyio
async def test_a_prompt_is_one_text_block_matching_the_golden_frame(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            events = await _turn(session, "hello there")
    assert [e.text for e in events if e.kind is EventKind.TEXT] == ["Echo: ", "hello there"]
    check_golden("sent_prompt.json", after_handshake(sent_frames(fake_agent, workspace)))


@pytest.mark.anyio
async def test_an_approved_permission_answers_the_backends_option_id_chosen_by_kind(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    def allow_once(pending: PendingPermission) -> str | None:
        option = pending.request.option_of_kind("allow_once")
        assert option is not None
        return option.option_id

    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace, dialect="claude")) as client:
            session = await client.open_session()
            events = await _turn(session, "SCN_PERMISSION", on_permission=allow_once)
    assert "permission:allow-once" in [e.text for e in events]
    frames = after_handshake(sent_frames(fake_agent, workspace))
    assert frames[1]["result"] == {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
    check_golden("sent_permission_selected.json", frames)


@pytest.mark.anyio
async def test_a_permission_answered_with_no_option_is_sent_as_cancelled(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            events = await _turn(session, "SCN_PERMISSION", on_permission=lambda _: None)
    assert "permission:cancelled" in [e.text for e in events]
    frames = after_handshake(sent_frames(fake_agent, workspace))
    assert frames[1]["result"] == {"outcome": {"outcome": "cancelled"}}
    check_golden("sent_permission_cancelled.json", frames)


@pytest.mark.anyio
async def test_cancel_is_a_session_cancel_notification_matching_the_golden_frame(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()

            async def cancel_on_text(event: AcpEvent) -> None:
                if event.kind is EventKind.TEXT:
                    await session.cancel()

            events = await _turn(session, "SCN_HANG", on_event=cancel_on_text)
    assert events[-1].stats is not None and events[-1].stats.stop_reason == "cancelled"
    frames = after_handshake(sent_frames(fake_agent, workspace))
    assert "id" not in frames[1]  # a notification: no id, no reply expected
    check_golden("sent_cancel.json", frames)


@pytest.mark.anyio
async def test_unknown_agent_requests_get_the_golden_method_not_found_reply(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            await _turn(session, "SCN_UNKNOWN_REQUEST")
    frames = after_handshake(sent_frames(fake_agent, workspace))
    replies = [f for f in frames if "method" not in f]
    assert [r["error"]["code"] for r in replies] == [-32601, -32601]
    check_golden("sent_method_not_found.json", frames)


_RE_TERMINAL_ID = re.compile(r"\bterm-\d+-[0-9a-f]{8}\b")


@pytest.mark.anyio
async def test_fs_and_terminal_requests_get_the_golden_answers(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("one\ntwo\n", encoding="utf-8")
    steps = [
        {"request": {"method": "fs/read_text_file", "params": {"path": f"{workspace}/notes.txt"}}},
        {"request": {"method": "fs/read_text_file", "params": {"path": "/etc/hostname"}}},
        {
            "request": {
                "method": "fs/write_text_file",
                "params": {"path": f"{workspace}/out.txt", "content": "written"},
            }
        },
        {
            "request": {"method": "terminal/create", "params": {"command": "echo hi"}},
            "save": "t",
        },
        {
            "request": {
                "method": "terminal/wait_for_exit",
                "params": {"terminalId": "$t.terminalId"},
            }
        },
        {"request": {"method": "terminal/output", "params": {"terminalId": "$t.terminalId"}}},
        {"request": {"method": "terminal/kill", "params": {"terminalId": "$t.terminalId"}}},
        {"request": {"method": "terminal/release", "params": {"terminalId": "$t.terminalId"}}},
    ]
    with anyio.fail_after(WAIT):
        async with _client(_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            await _turn(session, "SCRIPT:" + json.dumps(steps))
    frames = after_handshake(sent_frames(fake_agent, workspace))
    replies = [f for f in frames if "method" not in f]
    normalized = json.loads(_RE_TERMINAL_ID.sub("<TERMINAL_ID>", json.dumps(replies)))
    check_golden("sent_client_methods.json", normalized)


@pytest.mark.anyio
async def test_a_kiro_session_load_carries_the_session_file_meta(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = _spec(fake_agent, workspace)
    with anyio.fail_after(WAIT):
        async with _client(spec) as client:
            session_id = (await client.open_session()).session_id
            await _turn(client.sessions[session_id], "first turn")
        async with _client(spec) as client:
            await client.load_session(session_id)
    loads = [f for f in sent_frames(fake_agent, workspace) if f.get("method") == "session/load"]
    assert len(loads) == 1
    meta = loads[0]["params"]["_meta"]
    assert meta == {"_kiro.dev/session_file": "<HOME>/.kiro/sessions/cli/<SESSION_ID>.json"}
    check_golden("sent_session_load_kiro.json", loads)


# ---- what we parse ------------------------------------------------------------------------------
def render(value: Any) -> Any:
    """A parse result as JSON: dataclasses as objects without their default-valued fields (and
    without `raw`, which is the input again), enums as their values."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {"__type__": type(value).__name__}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.name == "raw" or (
                field.default is not dataclasses.MISSING and item == field.default
            ):
                continue
            out[field.name] = render(item)
        return out
    if isinstance(value, list | tuple):
        return [render(item) for item in value]
    if isinstance(value, dict):
        return {key: render(item) for key, item in value.items()}
    return value


def parse_frame(frame: dict[str, Any]) -> Any:
    """Route a captured frame to the parser the transport would use for it."""
    method, params = frame["method"], frame["params"]
    if method == "session/update":
        event = parse_update(params)
        parsed: dict[str, Any] = {"parse_update": render(event)}
        if event is not None and event.kind is EventKind.SESSION_INFO and event.raw is not None:
            parsed["codex_thread_status"] = codex_thread_status(event.raw)
        return parsed
    if method == "_kiro.dev/metadata":
        return {
            "parse_refusal": render(parse_refusal(params)),
            "kiro_context_percent": kiro_context_percent(params),
        }
    if method == "session/request_permission":
        return {"parse_permission_request": render(parse_permission_request(params))}
    raise AssertionError(f"no parser for {method}")


PARSE_GOLDENS = sorted(path.name for path in GOLDEN.glob("parse_*.json"))


def _parsed_golden(name: str) -> tuple[dict[str, Any], Any]:
    data = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    return data["frame"], parse_frame(data["frame"])


def test_the_parse_goldens_are_present() -> None:
    assert len(PARSE_GOLDENS) >= 10, PARSE_GOLDENS


@pytest.mark.parametrize("name", PARSE_GOLDENS)
def test_a_captured_frame_parses_as_its_golden_says(name: str) -> None:
    frame, parsed = _parsed_golden(name)
    check_golden(name, {"frame": frame, "parsed": parsed})


def _refusal(name: str) -> RefusalInfo | None:
    frame, _ = _parsed_golden(name)
    return parse_refusal(frame["params"])


def _update(name: str) -> AcpEvent | None:
    frame, _ = _parsed_golden(name)
    return parse_update(frame["params"])


def test_a_kiro_refusal_at_the_top_level_keeps_all_three_fields() -> None:
    refusal = _refusal("parse_kiro_refusal_top_level.json")
    assert refusal is not None
    assert refusal.category == "CYBER"
    assert refusal.explanation.startswith("I can't help with this request")
    assert refusal.recommended_model == "claude-sonnet-4"


def test_a_kiro_refusal_nested_under_stop_details_is_the_same_refusal() -> None:
    top = _refusal("parse_kiro_refusal_top_level.json")
    nested = _refusal("parse_kiro_refusal_stop_details.json")
    assert nested is not None and nested == top


def test_kiro_metadata_without_a_refusal_is_only_context_usage() -> None:
    frame, _ = _parsed_golden("parse_kiro_metadata_usage.json")
    assert parse_refusal(frame["params"]) is None
    assert kiro_context_percent(frame["params"]) == 41.2


def test_a_claude_permission_request_maps_its_option_ids_by_kind() -> None:
    frame, _ = _parsed_golden("parse_claude_permission_request.json")
    request = parse_permission_request(frame["params"])
    assert request.session_id == "sess-0f1e2d3c"
    assert [(o.option_id, o.kind) for o in request.options] == [
        ("allow-once", "allow_once"),
        ("allow-with-updates", "allow_always"),
        ("reject", "reject_once"),
    ]
    assert request.tool.describe() == "echo switchboard-tool-ran > tool_ran.txt"


def test_a_codex_system_error_status_is_a_session_info_event_with_that_status() -> None:
    event = _update("parse_codex_system_error.json")
    assert event is not None and event.kind is EventKind.SESSION_INFO
    assert event.raw is not None and codex_thread_status(event.raw) == "systemError"


def test_message_chunks_with_and_without_message_id_and_the_flat_legacy_text() -> None:
    with_id = _update("parse_chunk_with_message_id.json")
    without_id = _update("parse_chunk_without_message_id.json")
    flat = _update("parse_chunk_legacy_flat_text.json")
    assert with_id is not None and without_id is not None and flat is not None
    assert (with_id.kind, with_id.message_id) == (EventKind.TEXT, "msg_01")
    assert (without_id.kind, without_id.message_id) == (EventKind.TEXT, None)
    assert (flat.kind, flat.text) == (EventKind.TEXT, "Hello from an older kiro")


def test_tool_call_and_its_update_keep_the_call_id_status_and_locations() -> None:
    call = _update("parse_tool_call.json")
    update = _update("parse_tool_call_update.json")
    assert call is not None and call.kind is EventKind.TOOL_CALL and call.tool is not None
    assert (call.tool.tool_call_id, call.tool.status) == ("call_1", "pending")
    assert call.tool.locations == ("/work/README.md",)
    assert update is not None and update.kind is EventKind.TOOL_UPDATE and update.tool is not None
    assert (update.tool.tool_call_id, update.tool.status) == ("call_1", "completed")


def test_an_unknown_update_variant_is_skipped() -> None:
    assert _update("parse_unknown_variant.json") is None
