"""`/sessions` and `/resume ID` end to end through `switchboard chat` (the terminal's one user is
an admin) with the scripted fake agent, with and without `session/list`; and `session/list`
read defensively (acp/session_list.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from acp.session_list import MAX_PAGES, parse_entry, parse_timestamp, walk_pages
from bot.session_history import short_ids
from tests.conftest import FakeAgent, script
from tests.test_chat_cli import chat  # noqa: F401  (the fixture)

LIST = ("--session-list",)
TITLED = script(
    {"update": {"sessionUpdate": "session_info_update", "title": "Fix the login bug"}},
    {"chunk": "ok"},
)


def created(agent: FakeAgent) -> list[str]:
    """The ids the agent gave its new sessions, in order."""
    return [
        r["frame"]["result"]["sessionId"]
        for r in agent.records()
        if r.get("dir") == "out" and "sessionId" in ((r.get("frame") or {}).get("result") or {})
    ]


def prompted(agent: FakeAgent) -> list[str]:
    return [f["params"]["sessionId"] for f in agent.frames_in("session/prompt")]


def listing(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = lines.index("Sessions (most recent first):")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("Resume one with"))
    return [line for line in lines[start + 1 : end] if " — " in line]


def test_sessions_lists_the_conversations_sessions_with_titles_and_marks_the_current(
    chat,  # noqa: F811
    fake_agent: FakeAgent,
) -> None:
    result = chat(fake_agent, [TITLED, "/new", "second topic", "/sessions"], agent_opts=LIST)
    assert result.returncode == 0, result.stderr
    first, second = created(fake_agent)
    rows = listing(result.stdout)
    assert len(rows) == 2
    # the current one first; its title the agent's list gives (its first message)
    assert rows[0].startswith(short_ids([first, second])[second] + " — second topic — ")
    assert rows[0].endswith("(current)")
    # the title the agent set with session_info_update, kept in the store
    assert rows[1].startswith(short_ids([first, second])[first] + " — Fix the login bug — ")
    assert "current" not in rows[1]
    (asked,) = fake_agent.frames_in("session/list")
    # the workspace's sessions: the folder every session was opened in
    assert asked["params"]["cwd"] == fake_agent.frames_in("session/new")[0]["params"]["cwd"]


def test_without_session_list_the_stores_sessions_are_listed_and_the_agent_is_not_asked(
    chat,  # noqa: F811
    fake_agent: FakeAgent,
) -> None:
    result = chat(fake_agent, [TITLED, "/new", "second topic", "/sessions"])
    assert result.returncode == 0, result.stderr
    rows = listing(result.stdout)
    assert len(rows) == 2
    assert " — untitled — " in rows[0] and rows[0].endswith("(current)")
    assert " — Fix the login bug — " in rows[1]
    assert fake_agent.frames_in("session/list") == []


def test_resume_by_prefix_loads_the_session_and_the_next_prompt_goes_to_it(
    chat,  # noqa: F811
    fake_agent: FakeAgent,
) -> None:
    first_run = chat(fake_agent, ["first topic", "/new", "second topic"], agent_opts=LIST)
    assert first_run.returncode == 0, first_run.stderr
    first, _ = created(fake_agent)
    prefix = first[:-2]
    result = chat(fake_agent, [f"/resume {prefix}", "after resuming"], agent_opts=LIST)
    assert result.returncode == 0, result.stderr
    assert f"Resumed session {first} (first topic); the next message continues it." in (
        result.stdout
    )
    assert first in [f["params"]["sessionId"] for f in fake_agent.frames_in("session/load")]
    assert prompted(fake_agent)[-1] == first  # the conversation is bound to it
    assert "Echo: after resuming" in result.stdout


def test_a_resumed_binding_survives_a_restart(chat, fake_agent: FakeAgent) -> None:  # noqa: F811
    chat(fake_agent, ["first topic", "/new", "second topic"])
    first, _ = created(fake_agent)
    chat(fake_agent, [f"/resume {first}"])
    result = chat(fake_agent, ["after the restart"])
    assert result.returncode == 0, result.stderr
    assert prompted(fake_agent)[-1] == first


def test_ambiguous_and_unknown_ids_are_refused_in_one_sentence(
    chat,  # noqa: F811
    fake_agent: FakeAgent,
) -> None:
    result = chat(
        fake_agent,
        ["one", "/new", "two", "/resume sess-", "/resume nothing-like-it", "/resume", "three"],
        agent_opts=LIST,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "'sess-' matches 2 sessions; type more of the id." in lines
    assert "No session of this conversation matches 'nothing-like-it'." in lines
    assert "Name the session to resume: /resume ID, with an ID /sessions shows." in lines
    assert fake_agent.frames_in("session/load") == []
    _, second = created(fake_agent)
    assert prompted(fake_agent)[-1] == second  # still where it was


def test_resuming_the_current_session_says_so(chat, fake_agent: FakeAgent) -> None:  # noqa: F811
    chat(fake_agent, ["one"])
    (only,) = created(fake_agent)
    result = chat(fake_agent, ["two", f"/resume {only}"])
    assert "This conversation is already in that session." in result.stdout.splitlines()


def test_an_agent_that_cannot_load_sessions_cannot_resume_one(
    chat,  # noqa: F811
    fake_agent: FakeAgent,
) -> None:
    opts = ("--no-load", "--session-list")
    chat(fake_agent, ["one", "/new", "two"], agent_opts=opts)
    first, _ = created(fake_agent)
    result = chat(fake_agent, [f"/resume {first}"], agent_opts=opts)
    assert (
        "The agent cannot take earlier sessions up again, so none can be resumed." in result.stdout
    )
    assert fake_agent.frames_in("session/load") == []


def test_the_admin_sees_sessions_no_conversation_here_recorded_marked_as_such(
    chat,  # noqa: F811
    fake_agent: FakeAgent,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    chat(fake_agent, ["from elsewhere"], agent_opts=LIST)
    (outside,) = created(fake_agent)
    (tmp_path / "state.db").unlink()  # the agent keeps it; Switchboard forgets who used it
    result = chat(fake_agent, ["mine", "/sessions"], agent_opts=LIST)
    rows = listing(result.stdout)
    assert len(rows) == 2
    assert rows[0].endswith("(current)")
    assert rows[1].startswith(outside[:8]) and rows[1].endswith("(not started here)")
    assert "Sessions not recorded for this conversation are shown to admins only." in (
        result.stdout
    )


def test_every_page_of_the_agents_list_is_read(chat, fake_agent: FakeAgent) -> None:  # noqa: F811
    opts = ("--session-list", "--list-page", "1")
    result = chat(fake_agent, ["a", "/new", "b", "/new", "c", "/sessions"], agent_opts=opts)
    assert len(listing(result.stdout)) == 3
    cursors = [f["params"].get("cursor") for f in fake_agent.frames_in("session/list")]
    assert cursors == [None, "page:1", "page:2"]


# ---- session/list read defensively ----------------------------------------------------------
CWD = "/srv/api"


def test_hostile_entries_are_skipped_and_strings_cleaned() -> None:
    assert parse_entry({"sessionId": "s 1", "cwd": CWD}, CWD) is None  # not an id we send back
    assert parse_entry({"sessionId": "s1", "cwd": "/elsewhere"}, CWD) is None
    assert parse_entry({"sessionId": "", "cwd": CWD}, CWD) is None
    assert parse_entry({"sessionId": "x" * 500, "cwd": CWD}, CWD) is None
    assert parse_entry(["s1"], CWD) is None
    entry = parse_entry(
        {"sessionId": "s1", "cwd": CWD, "title": "a\x1b[31m\nb" + "y" * 500, "updatedAt": 7}, CWD
    )
    assert entry is not None
    assert "\x1b" not in entry.title and "\n" not in entry.title and len(entry.title) == 200
    assert entry.updated is None


def test_timestamps_without_a_zone_or_unreadable_are_unknown() -> None:
    assert parse_timestamp("2026-03-09T10:00:00Z") == 1773050400.0
    assert parse_timestamp("2026-03-09T10:00:00") is None
    assert parse_timestamp("yesterday") is None


@pytest.mark.anyio
async def test_the_page_walk_stops_at_its_budget_and_at_a_repeated_cursor() -> None:
    asked: list[dict[str, Any]] = []

    async def endless(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        n = len(asked)
        return {"sessions": [{"sessionId": f"s{n}", "cwd": CWD}], "nextCursor": f"c{n}"}

    found = await walk_pages(endless, CWD)
    assert len(asked) == MAX_PAGES and len(found) == MAX_PAGES

    asked.clear()

    async def looping(params: dict[str, Any]) -> dict[str, Any]:
        asked.append(params)
        return {"sessions": [{"sessionId": "same", "cwd": CWD}], "nextCursor": "again"}

    found = await walk_pages(looping, CWD)
    assert [p.get("cursor") for p in asked] == [None, "again"]
    assert [entry.session_id for entry in found] == ["same"]


def test_short_ids_grow_until_no_two_listed_ids_share_one() -> None:
    ids = ["sess-abc12345", "sess-abc19999", "other-0001"]
    assert short_ids(ids) == {
        "sess-abc12345": "sess-abc12",
        "sess-abc19999": "sess-abc19",
        "other-0001": "other-00",
    }
    assert json.dumps(short_ids([])) == "{}"


# ---- per project ---------------------------------------------------------------------------
def test_sessions_and_resume_keep_to_the_conversations_project(
    chat,  # noqa: F811
    fake_agent: FakeAgent,
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    api, web = tmp_path / "api", tmp_path / "web"
    api.mkdir()
    web.mkdir()
    command = fake_agent.command("--session-list", dialect="kiro")
    projects = {
        "api": {"workspace": str(api), "agent": "kiro", "agent_command": command},
        "web": {"workspace": str(web), "agent": "kiro", "agent_command": command},
    }
    env = {"SWITCHBOARD_PROJECTS": json.dumps(projects), "SWITCHBOARD_DEFAULT_PROJECT": "api"}
    chat(fake_agent, ["api work"], env=env)
    (in_api,) = created(fake_agent)
    result = chat(
        fake_agent,
        ["/project web", "web work", "/sessions", f"/resume {in_api}"],
        env=env,
    )
    assert result.returncode == 0, result.stderr
    rows = listing(result.stdout)
    assert len(rows) == 1 and " — web work — " in rows[0]
    assert f"No session of this conversation matches {in_api!r}." in result.stdout.splitlines()
    asked = [f["params"]["cwd"] for f in fake_agent.frames_in("session/list")]
    assert asked == [str(web.resolve())] * len(asked) and asked
    assert in_api not in [f["params"]["sessionId"] for f in fake_agent.frames_in("session/load")]


def test_a_failing_agent_list_leaves_the_stores_sessions_and_one_sentence(
    chat,  # noqa: F811
    fake_agent: FakeAgent,
) -> None:
    error = json.dumps({"code": -32603, "message": "Internal error", "data": "index corrupt"})
    opts = ("--session-list", "--list-error", error)
    result = chat(fake_agent, ["one", "/sessions"], agent_opts=opts)
    assert result.returncode == 0, result.stderr
    assert len(listing(result.stdout)) == 1
    assert result.stdout.splitlines()[-1] == "The agent's own list of sessions could not be read."


def test_hostile_entries_in_the_agents_list_are_left_out(chat, fake_agent: FakeAgent) -> None:  # noqa: F811
    extra = [
        {"sessionId": "bad id with spaces", "cwd": "/"},
        {"sessionId": 42},
        "not an object",
        {"sessionId": "elsewhere-1", "cwd": "/somewhere/else"},
    ]
    opts = ("--session-list", "--list-extra", json.dumps(extra))
    result = chat(fake_agent, ["one", "/sessions"], agent_opts=opts)
    assert result.returncode == 0, result.stderr
    assert len(listing(result.stdout)) == 1
    assert "elsewhere" not in result.stdout and "bad id" not in result.stdout
