"""The trust ladder (bot/trust.py) in process: BotApp driving the real scripted agent, a recording
surface standing in for a platform. An `allow_always` press and the Trust button make rules that
answer the agent's next identical request without a card (audited as a press is); a different
command or kind still gets a card; /trust lists, revokes and clears; /new drops the rules; a
project's `reads` and `trusted` policies; the gate still holds (an automatic answer allows that
one call, nothing more)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acp import ToolCall
from bot.projects import build_projects
from bot.trust import TRUST_LABEL, ToolShape
from config import ConfigError, load_settings
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    Call,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

ECHO = {
    "toolCallId": "c1",
    "title": "Run echo hi",
    "kind": "execute",
    "rawInput": {"command": "echo hi"},
}


def _tool(command: str, *, call: str = "c2", kind: str = "execute") -> dict[str, Any]:
    return {
        "toolCallId": call,
        "title": f"Run {command}",
        "kind": kind,
        "rawInput": {"command": command},
    }


def _asks(*tools: dict[str, Any], options: list[dict[str, str]] | None = None) -> str:
    steps = []
    for tool in tools:
        permission: dict[str, Any] = {"toolCall": tool}
        if options is not None:
            permission["options"] = options
        steps.append({"permission": permission})
    return script(*steps, {"chunk": " done"})


def _outcomes(fake: FakeAgent) -> list[str]:
    """The option ids we answered the agent's permission requests with, in order."""
    return [
        frame["result"]["outcome"].get("optionId", "cancelled")
        for frame in fake.frames_in()
        if "method" not in frame
        and isinstance(frame.get("result"), dict)
        and "outcome" in frame["result"]
    ]


def _token(call: Call, label: str) -> str:
    return next(choice.token for choice in call.choices if choice.label == label)


async def _approvals(app: Any) -> list[dict[str, object]]:
    records = await app.store.audit_since(0)
    return [r.as_json() for r in records if r.kind == "approval"]


# ---- what a rule matches ----------------------------------------------------------------------
def _shape(command: str = "", kind: str = "execute", **fields: Any) -> ToolShape | None:
    raw = {"command": command} if command else fields.pop("raw", None)
    return ToolShape.of(
        ToolCall("t", title=fields.pop("title", "x"), kind=kind, raw_input=raw, **fields)
    )


def test_a_command_rule_covers_the_command_and_its_plain_extensions_only() -> None:
    rule = _shape("npm test")
    assert rule is not None
    assert rule.describe() == "`npm test …` commands"
    for covered in ("npm test", "npm  test", "npm test --watch src/a.test.js"):
        shape = _shape(covered)
        assert shape is not None and shape.within(rule), covered
    for other in ("npm testing", "npm run build", "npm test && rm -rf ~", "npm test; curl x",
                  "npm test | sh", "npm test > /etc/passwd", "npm test $(rm x)", "npm"):  # fmt: skip
        shape = _shape(other)
        assert shape is not None and not shape.within(rule), other
    read = _shape("npm test", kind="read")
    assert read is not None and not read.within(rule)  # the kind must match too


def test_a_file_rule_covers_its_files_not_their_directory() -> None:
    rule = _shape(kind="edit", locations=("src/a.py",))
    assert rule is not None and rule.describe() == "edit of `src/a.py`"
    same = _shape(kind="edit", locations=("src/./a.py",))
    assert same is not None and same.within(rule)
    for other in (("src/b.py",), ("src/a.py", "src/b.py"), ("src",)):
        shape = _shape(kind="edit", locations=other)
        assert shape is not None and not shape.within(rule), other
    read = _shape(kind="read", locations=("src/a.py",))
    assert read is not None and not read.within(rule)


def test_a_title_alone_a_missing_kind_or_an_unknown_kind_never_makes_a_rule() -> None:
    assert _shape(title="Run npm test") is None  # a title alone
    assert _shape("npm test", kind="") is None
    assert _shape("npm test", kind="shell") is None  # not a kind the spec names


def test_a_bad_approvals_policy_is_a_start_up_error_naming_the_project(tmp_path: Path) -> None:
    projects = {"web": {"workspace": str(tmp_path), "approvals": "always"}}
    with pytest.raises(ConfigError) as caught:
        build_projects(load_settings(projects=projects))
    assert caught.value.setting == 'SWITCHBOARD_PROJECTS["web"].approvals'
    assert "'always' is not an approvals policy; choose from ask, reads, trusted" in str(
        caught.value
    )
    projects["web"]["approvals"] = "Trusted"
    assert build_projects(load_settings(projects=projects)).default.approvals == "trusted"
    del projects["web"]["approvals"]
    assert build_projects(load_settings(projects=projects)).default.approvals == "ask"


# ---- rules made by a press --------------------------------------------------------------------
async def test_allow_always_answers_the_same_command_again_without_a_card_and_audits_it(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    prompt = _asks(ECHO, _tool("echo hi", call="c2"), _tool("echo bye", call="c3"))
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(surface.message("alice", prompt))
        await wait_for(surface.choices, "the first card")
        first = surface.choices()[0]
        assert TRUST_LABEL in [c.label for c in first.choices]
        await finished(surface.post(surface.press("alice", _token(first, "Always"))))
        await wait_for(lambda: len(surface.choices()) == 2, "the card for another command")
        second = surface.choices()[1]
        assert "echo bye" in second.text
        await finished(surface.post(surface.press("alice", _token(second, "No"))))
        await finished(turn)
        audited = await _approvals(app)
    assert _outcomes(fake_agent) == ["allow_always", "allow_always", "reject_once"]
    closing = [c.text for c in surface.ops("close_choice")]
    assert closing[0] == "Allowed always: `echo hi …` commands in this session (trust rule 1)."
    assert closing[1] == "Answered: No"
    pressed, automatic, declined = audited
    assert pressed["actor"] == "alice" and pressed["outcome"] == "allow_always"
    assert pressed["rule"] == "trust rule 1 (allowed always): `echo hi …` commands"
    assert automatic["actor"] == "trust rule 1" and automatic["outcome"] == "allow_always"
    assert automatic["requester"] == "alice" and automatic["tool"] == "Run echo hi execute"
    assert automatic["rule"] == "trust rule 1 (allowed always): `echo hi …` commands"
    assert declined["actor"] == "alice" and declined["outcome"] == "reject_once"


async def test_the_trust_button_answers_allow_once_and_later_calls_of_that_kind_and_command(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    same_words_other_kind = _tool("echo hi", call="c3", kind="edit")
    prompt = _asks(ECHO, _tool("echo hi there", call="c2"), same_words_other_kind)
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(surface.message("alice", prompt))
        await wait_for(surface.choices, "the first card")
        await finished(
            surface.post(surface.press("alice", _token(surface.choices()[0], TRUST_LABEL)))
        )
        await wait_for(lambda: len(surface.choices()) == 2, "the card for another kind")
        await finished(surface.post(surface.press("alice", _token(surface.choices()[1], "Yes"))))
        await finished(turn)
        audited = await _approvals(app)
    assert _outcomes(fake_agent) == ["allow_once", "allow_once", "allow_once"]
    closing = surface.ops("close_choice")[0].text
    assert closing == "Trusted for this session: `echo hi …` commands (trust rule 1)."
    assert [a["actor"] for a in audited] == ["alice", "trust rule 1", "alice"]


async def test_trust_lists_revokes_and_clears_and_new_drops_the_rules(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(surface.message("alice", _asks(ECHO, _tool("ls -la", call="c2"))))
        await wait_for(surface.choices, "the first card")
        await finished(surface.post(surface.press("alice", _token(surface.choices()[0], "Always"))))
        await wait_for(lambda: len(surface.choices()) == 2, "the second card")
        await finished(
            surface.post(surface.press("carol", _token(surface.choices()[1], TRUST_LABEL)))
        )
        await finished(turn)

        await finished(surface.post(surface.message("bob", "/trust")))
        listed = surface.transcript()
        assert "1. `echo hi …` commands — allowed always by Alice, " in listed
        assert "2. `ls -la …` commands — trusted by Carol, " in listed
        await finished(surface.post(surface.message("bob", "/trust revoke 1")))
        assert (
            "Only Alice, an approver or an admin can revoke trust rule 1." in surface.transcript()
        )
        await finished(surface.post(surface.message("bob", "/trust clear")))
        assert "Cleared 0 trust rules; 2 made by others stay" in surface.transcript()
        await finished(surface.post(surface.message("alice", "/trust revoke 1")))
        assert "Revoked trust rule 1: `echo hi …` commands asks again." in surface.transcript()
        await finished(surface.post(surface.message("alice", "/status")))
        assert "Approvals: ask (every tool asks); 1 trust rule (/trust)" in surface.transcript()

        # the revoked rule asks again; the other still answers
        again = surface.post(surface.message("alice", _asks(_tool("ls -la"), ECHO)))
        await wait_for(lambda: len(surface.choices()) == 3, "a card for the revoked rule's command")
        assert "echo hi" in surface.choices()[2].text
        await finished(surface.post(surface.press("alice", _token(surface.choices()[2], "No"))))
        await finished(again)
        assert _outcomes(fake_agent)[-2:] == ["allow_once", "reject_once"]

        await finished(surface.post(surface.message("alice", "/new")))
        await finished(surface.post(surface.message("alice", "/trust")))
        assert "Nothing is trusted in this session: every tool asks." in surface.transcript()
        fresh = surface.post(surface.message("alice", _asks(_tool("ls -la"))))
        await wait_for(lambda: len(surface.choices()) == 4, "a card in the new session")
        await finished(surface.post(surface.press("alice", _token(surface.choices()[3], "No"))))
        await finished(fresh)
        revoked = [
            r.as_json() for r in await app.store.audit_since(0) if r.action == "trust revoked"
        ]
    assert [(r["actor"], r["made_by"]) for r in revoked] == [("alice", "alice")]


async def test_an_approver_clears_every_rule(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", _asks(ECHO)))
        await wait_for(surface.choices, "the card")
        await finished(
            surface.post(surface.press("alice", _token(surface.choices()[0], TRUST_LABEL)))
        )
        await finished(turn)
        await finished(surface.post(surface.message("carol", "/trust clear")))
        assert "Cleared 1 trust rule: every tool asks again." in surface.transcript()
        again = surface.post(surface.message("alice", _asks(ECHO)))
        await wait_for(lambda: len(surface.choices()) == 2, "the card again")
        await finished(surface.post(surface.press("alice", _token(surface.choices()[1], "No"))))
        await finished(again)


# ---- a project's policy -----------------------------------------------------------------------
def _project(tmp_path: Path, policy: str) -> dict[str, Any]:
    return {"projects": {"web": {"workspace": str(tmp_path), "approvals": policy}}}


async def test_reads_lets_reads_and_searches_run_without_a_card_and_asks_the_rest(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    read = {
        "toolCallId": "r1",
        "title": "Read a.py",
        "kind": "read",
        "locations": [{"path": "a.py"}],
    }
    search = {"toolCallId": "s1", "title": "grep", "kind": "search", "rawInput": {"query": "x"}}
    settings = engine_settings(tmp_path, fake_agent, **_project(tmp_path, "reads"))
    async with running_app(settings, surface) as app:
        turn = surface.post(surface.message("alice", _asks(read, search, ECHO)))
        await wait_for(surface.choices, "the card for the command")
        (card,) = surface.choices()
        assert "echo hi" in card.text
        await finished(surface.post(surface.press("alice", _token(card, "No"))))
        await finished(turn)
        audited = await _approvals(app)
    assert _outcomes(fake_agent) == ["allow_once", "allow_once", "reject_once"]
    assert [a["actor"] for a in audited] == ["project policy: reads"] * 2 + ["alice"]
    assert "Approvals:" not in surface.transcript()  # only a trusted project's footer says it


async def test_trusted_answers_every_request_and_every_footer_and_status_say_so(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, **_project(tmp_path, "trusted"))
    async with running_app(settings, surface) as app:
        await finished(surface.post(surface.message("alice", _asks(ECHO, _tool("rm -rf build")))))
        await finished(surface.post(surface.message("alice", "hello")))
        await finished(surface.post(surface.message("alice", "/status")))
        audited = await _approvals(app)
    assert surface.choices() == []
    assert _outcomes(fake_agent) == ["allow_once", "allow_once"]
    assert [a["actor"] for a in audited] == ["project policy: trusted"] * 2
    finals = [text for text in surface.shown().values() if "done" in text or "Echo: hello" in text]
    assert len(finals) == 2
    assert all(text.endswith("Approvals: trusted (tools run without asking)") for text in finals)
    assert (
        "Approvals: trusted (tools run without asking)" in surface.transcript().split("Agent:")[-1]
    )


# ---- the gate ------------------------------------------------------------------------------------
async def test_an_automatic_allow_always_allows_that_call_and_nothing_the_agent_did_not_ask(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    always_only = [
        {"optionId": "always", "name": "Always", "kind": "allow_always"},
        {"optionId": "no", "name": "No", "kind": "reject_once"},
    ]
    ran = {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}
    unasked = {**_tool("echo hi", call="c9"), "sessionUpdate": "tool_call", "status": "completed"}
    prompt = script(
        {"permission": {"toolCall": ECHO, "options": always_only}},
        {"update": ran},
        {"chunk": "asked one ran"},
        {"update": unasked},
        {"chunk": "too late"},
    )
    settings = engine_settings(tmp_path, fake_agent, **_project(tmp_path, "trusted"))
    async with running_app(settings, surface):
        await finished(surface.post(surface.message("alice", prompt)))
    assert _outcomes(fake_agent) == ["always"]
    shown = surface.transcript()
    assert "asked one ran" in shown
    assert "ran a tool (Run echo hi" in shown and "without asking for approval" in shown
    assert "too late" not in shown


async def test_the_refusal_of_an_agent_approvals_command_points_at_trust(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        await finished(surface.post(surface.message("alice", "/yolo")))
    shown = surface.transcript()
    assert "Switchboard does not send /yolo to the agent" in shown
    assert "/trust" in shown and "`approvals` setting" in shown
    assert "SWITCHBOARD_ALLOW_UNGATED_TOOLS" in shown
    assert not fake_agent.frames_in("session/prompt")
