"""Projects end to end: two projects, each with its own scripted agent (the fake agent in two
dialects) in its own workspace, through the real `switchboard chat` and through Telegram (the real
python-telegram-bot against the fake Bot API, BotApp in process). Which agent ran where is read
from the fake agent's log: each process logs its argv (so its dialect), and `session/new` and
`session/load` carry the workspace as `cwd`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from bot.store import SqliteStateStore
from config import Settings, load_settings
from surfaces.base import ConversationKey
from tests.conftest import FakeAgent
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import BOT_USERNAME, FakeBotApi, People
from tests.harness.telegram import serving

PEOPLE = People()
ALICE, BOB, CAROL = PEOPLE.alice, PEOPLE.bob, PEOPLE.carol
GROUP = -1001234567890


def workspaces(tmp_path: Path) -> tuple[Path, Path]:
    api, web = tmp_path / "ws-api", tmp_path / "ws-web"
    api.mkdir()
    web.mkdir()
    return api.resolve(), web.resolve()


def projects_json(fake_agent: FakeAgent, api: Path, web: Path, **web_extra: Any) -> str:
    """`api` runs the kiro-dialect agent, `web` the claude-dialect one (and may switch to
    `fast`, a generic-dialect agent from SWITCHBOARD_AGENTS)."""
    return json.dumps(
        {
            "api": {"workspace": str(api), "agent": "kiro", "agent_command": fake_agent.command()},
            "web": {
                "workspace": str(web),
                "agent": "claude",
                "agent_command": fake_agent.command("--modes", "auto,default", dialect="claude"),
                "agents": ["fast"],
                **web_extra,
            },
        }
    )


def agents_json(fake_agent: FakeAgent) -> str:
    return json.dumps(
        {
            "fast": {
                "agent": "generic",
                "agent_command": fake_agent.command("--modes", "auto,ask", dialect="generic"),
                "mode": "ask",
            }
        }
    )


def dialect_of(fake_agent: FakeAgent) -> dict[int, str]:
    """Each agent process's dialect, by pid."""
    found = {}
    for record in fake_agent.records():
        if record.get("event") == "start":
            argv = record["argv"]
            found[record["pid"]] = argv[argv.index("--dialect") + 1]
    return found


def calls(fake_agent: FakeAgent, method: str) -> list[tuple[str, dict[str, Any]]]:
    """(dialect, params) of each `method` frame an agent was sent, in order."""
    dialects = dialect_of(fake_agent)
    return [
        (dialects[r["pid"]], r["frame"].get("params", {}))
        for r in fake_agent.records()
        if r.get("dir") == "in" and r.get("frame", {}).get("method") == method
    ]


def prompts(fake_agent: FakeAgent) -> list[tuple[str, str]]:
    """(dialect, text) of each prompt."""
    return [
        (dialect, "\n".join(block.get("text", "") for block in params["prompt"]))
        for dialect, params in calls(fake_agent, "session/prompt")
    ]


# ---- the terminal --------------------------------------------------------------------------------
@pytest.fixture
def chat_env(cli_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path) -> dict[str, str]:
    api, web = workspaces(tmp_path)
    return cli_env | {
        "SWITCHBOARD_PROJECTS": projects_json(fake_agent, api, web),
        "SWITCHBOARD_AGENTS": agents_json(fake_agent),
    }


def chat(env: dict[str, str], cwd: Path, lines: Sequence[str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "bot", "chat"],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout


def test_the_terminal_lists_switches_and_each_project_runs_its_agent_in_its_workspace(
    chat_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    api, web = workspaces_of(tmp_path)
    out = chat(
        chat_env,
        tmp_path,
        [
            "hello",
            "/project",
            "/project web",
            "hi web",
            "/status",
            "/agent",
            "/agent fast",
            "fast?",
        ],
    )
    assert "Echo: hello" in out
    assert "Projects: api (current), web\nSwitch with /project NAME." in out
    assert f"Switched to project web ({web}, agent claude); a new agent session starts." in out
    assert "Echo: hi web" in out
    assert "Project: web" in out and f"Workspace: {web}" in out and "Agent: claude (" in out
    assert "Agents of project web: claude (current), fast" in out
    assert "Switched to the agent fast in project web" in out
    assert prompts(fake_agent) == [("kiro", "hello"), ("claude", "hi web"), ("generic", "fast?")]
    opened = [(dialect, params["cwd"]) for dialect, params in calls(fake_agent, "session/new")]
    assert opened == [("kiro", str(api)), ("claude", str(web)), ("generic", str(web))]


def test_the_terminal_refuses_an_unknown_project_and_an_agent_the_project_does_not_offer(
    chat_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    out = chat(chat_env, tmp_path, ["/project nowhere", "/agent codex", "/status"])
    assert "You have no project named nowhere; /project lists yours." in out
    assert "Project api does not offer the agent codex; it offers: kiro." in out
    assert "Project: api" in out
    assert prompts(fake_agent) == []


def test_a_restart_resumes_the_terminal_conversation_in_its_own_project(
    chat_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    _, web = workspaces_of(tmp_path)
    chat(chat_env, tmp_path, ["/project web", "first"])
    (new,) = [params for dialect, params in calls(fake_agent, "session/new") if dialect == "claude"]
    out = chat(chat_env, tmp_path, ["again", "/status"])
    assert "Echo: again" in out and "Project: web" in out
    loads = calls(fake_agent, "session/load")
    assert [(dialect, params["cwd"]) for dialect, params in loads] == [("claude", str(web))]
    assert prompts(fake_agent)[-1] == ("claude", "again")
    assert all(dialect == "claude" for dialect, _ in calls(fake_agent, "session/new"))
    assert new["cwd"] == str(web)


def test_new_keeps_the_project_and_agent_also_across_a_restart(
    chat_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    _, web = workspaces_of(tmp_path)
    chat(chat_env, tmp_path, ["/project web", "/agent fast", "first", "/new"])
    out = chat(chat_env, tmp_path, ["after new", "/status"])
    assert "Echo: after new" in out and "Project: web" in out
    assert prompts(fake_agent)[-1] == ("generic", "after new")
    assert not calls(fake_agent, "session/load")  # /new: nothing to resume
    opened = [(dialect, params["cwd"]) for dialect, params in calls(fake_agent, "session/new")]
    assert opened[-1] == ("generic", str(web))


def workspaces_of(tmp_path: Path) -> tuple[Path, Path]:
    return (tmp_path / "ws-api").resolve(), (tmp_path / "ws-web").resolve()


# ---- Telegram ------------------------------------------------------------------------------------
@pytest.fixture
async def tg_api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team", forum=True)
        yield fake


def tg_settings(
    tmp_path: Path, fake_agent: FakeAgent, api: FakeBotApi, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """Alice and Bob may chat, Carol is an admin; `web` is Alice's only (admins always)."""
    ws_api, ws_web = workspaces(tmp_path)
    monkeypatch.setenv(
        "SWITCHBOARD_PROJECTS",
        projects_json(fake_agent, ws_api, ws_web, users=[f"telegram:{ALICE.id}"]),
    )
    monkeypatch.setenv("SWITCHBOARD_AGENTS", agents_json(fake_agent))
    return load_settings(
        state=str(tmp_path / "state.db"),
        cancel_grace=1,
        shutdown_grace=0.5,
        request_timeout=10,
        initialize_timeout=10,
        telegram={
            "token": api.token,
            "api_url": api.url,
            "allowed_users": [str(ALICE.id), str(BOB.id)],
            "admins": [str(CAROL.id)],
            "allowed_chats": [str(GROUP)],
        },
    )


def shows(api: FakeBotApi, chat: int, text: str) -> Any:
    return lambda: text in api.chat_text(chat)


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_a_person_is_refused_a_project_they_may_not_use_and_never_sees_it(
    tmp_path: Path, fake_agent: FakeAgent, tg_api: FakeBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = tg_api
    async with serving(tg_settings(tmp_path, fake_agent, api, monkeypatch)):
        api.dm(BOB, "/project")
        await wait_for(shows(api, BOB.id, "Projects:"), "bob's list")
        api.dm(BOB, "/project web")
        await wait_for(shows(api, BOB.id, "You have no project named web"), "bob's refusal")
        api.dm(ALICE, "/project")

        def offer() -> Any:
            return next((m for m in api.chat_messages(ALICE.id) if m.reply_markup), None)

        await wait_for(offer, "alice's project buttons")
        message = offer()
        assert message.text.startswith("Projects: api (current), web")
        (button,) = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        assert button["text"] == "web"  # the others than the current one
        api.press(ALICE, message, button["callback_data"])
        await wait_for(shows(api, ALICE.id, "Switched to project web"), "alice's switch")
        assert message.reply_markup is None and "Chose web." in message.text
        api.dm(ALICE, "hello web")
        await wait_for(shows(api, ALICE.id, "Echo: hello web"), "alice's answer")
        api.dm(BOB, "hello api")
        await wait_for(shows(api, BOB.id, "Echo: hello api"), "bob's answer")
    assert not [m for m in api.chat_messages(BOB.id) if m.reply_markup]  # one project: no buttons
    bob_sees = api.chat_text(BOB.id)
    assert "Projects: api (current)\n" in bob_sees and "web" not in bob_sees.split("\n")[0]
    assert "Switched" not in bob_sees
    assert sorted(prompts(fake_agent)) == [("claude", "hello web"), ("kiro", "hello api")]


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_an_admin_binds_a_group_and_a_topic_and_new_conversations_land_there(
    tmp_path: Path, fake_agent: FakeAgent, tg_api: FakeBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = tg_api
    _, ws_web = workspaces_of(tmp_path)
    settings = tg_settings(tmp_path, fake_agent, api, monkeypatch)
    first, second, third = (api.add_topic(GROUP, CAROL) for _ in range(3))
    async with serving(settings):
        api.post_message(GROUP, BOB, f"@{BOT_USERNAME} /project bindchat api", thread=first)
        await wait_for(shows(api, GROUP, "Only an admin can bind"), "bob refused the binding")
        api.post_message(GROUP, CAROL, f"@{BOT_USERNAME} /project bindchat web", thread=first)
        await wait_for(shows(api, GROUP, "start in project web"), "the group bound")
        api.post_message(GROUP, CAROL, f"@{BOT_USERNAME} /project bind api", thread=third)
        await wait_for(shows(api, GROUP, "this thread start in project api"), "the topic bound")
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} in the second topic", thread=second)
        await wait_for(shows(api, GROUP, "Echo: in the second topic"), "the new conversation")
    reply = "\n".join(m.text for m in api.chat_messages(GROUP, thread=first))
    assert "Switched to project web" in reply
    assert "New conversations in this chat start in project web." in reply
    # the second topic never chose: it landed in the project its group is bound to
    assert prompts(fake_agent) == [("claude", "in the second topic")]
    opened = calls(fake_agent, "session/new")
    assert ("claude", str(ws_web)) in [(d, p["cwd"]) for d, p in opened]
    store = SqliteStateStore(settings.state)
    try:
        assert await store.get_place(ConversationKey("telegram", str(GROUP))) == "web"
        assert await store.get_place(ConversationKey("telegram", str(GROUP), str(third))) == "api"
        binding = await store.get_binding(ConversationKey("telegram", str(GROUP), str(second)))
        assert binding is not None and (binding.project, binding.agent) == ("web", "claude")
    finally:
        await store.aclose()


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_a_person_is_refused_in_a_place_bound_to_a_project_they_may_not_use(
    tmp_path: Path, fake_agent: FakeAgent, tg_api: FakeBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = tg_api
    topic = api.add_topic(GROUP, CAROL)
    async with serving(tg_settings(tmp_path, fake_agent, api, monkeypatch)):
        api.post_message(GROUP, CAROL, f"@{BOT_USERNAME} /project bind web", thread=topic)
        await wait_for(shows(api, GROUP, "start in project web"), "the topic bound")
        api.post_message(GROUP, BOB, f"@{BOT_USERNAME} let me in", thread=topic)
        await wait_for(shows(api, GROUP, "a project you may not use"), "bob refused")
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} hello web", thread=topic)
        await wait_for(shows(api, GROUP, "Echo: hello web"), "alice's answer")
    assert prompts(fake_agent) == [("claude", "hello web")]  # bob's message reached no agent
    assert "let me in" not in api.chat_text(GROUP).split("a project you may not use")[1]


@pytest.mark.anyio
@pytest.mark.usefixtures("clean_env")
async def test_telegram_a_restart_resumes_each_conversation_in_its_own_project(
    tmp_path: Path, fake_agent: FakeAgent, tg_api: FakeBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = tg_api
    ws_api, ws_web = workspaces_of(tmp_path)
    settings = tg_settings(tmp_path, fake_agent, api, monkeypatch)
    async with serving(settings):
        api.dm(ALICE, "/project web")
        await wait_for(shows(api, ALICE.id, "Switched to project web"), "alice's switch")
        api.dm(ALICE, "one")
        api.dm(BOB, "two")
        await wait_for(shows(api, ALICE.id, "Echo: one"), "alice's answer")
        await wait_for(shows(api, BOB.id, "Echo: two"), "bob's answer")
    async with serving(settings):
        api.dm(ALICE, "three")
        api.dm(BOB, "four")
        await wait_for(shows(api, ALICE.id, "Echo: three"), "alice's answer after the restart")
        await wait_for(shows(api, BOB.id, "Echo: four"), "bob's answer after the restart")
    loads = sorted((d, p["cwd"]) for d, p in calls(fake_agent, "session/load"))
    assert loads == [("claude", str(ws_web)), ("kiro", str(ws_api))]
    assert sorted(prompts(fake_agent)[2:]) == [("claude", "three"), ("kiro", "four")]


# ---- doctor --------------------------------------------------------------------------------------
def test_doctor_checks_every_projects_workspace_and_each_of_its_agents(
    chat_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    api, web = workspaces_of(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "bot", "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
        env=chat_env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert f"ok   project api: workspace: {api} is writable" in lines
    assert f"ok   project web: workspace: {web} is writable" in lines
    for what in ("agent found", "agent starts", "agent signed in"):
        for label in ("project api: ", "project web: claude ", "project web: fast "):
            assert any(line.startswith(f"ok   {label}{what}") for line in lines), label + what
    assert {dialect for dialect in dialect_of(fake_agent).values()} == {"kiro", "claude", "generic"}


def test_doctor_fails_only_the_project_whose_agent_is_missing(
    chat_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path
) -> None:
    _, web = workspaces_of(tmp_path)
    projects = json.loads(chat_env["SWITCHBOARD_PROJECTS"])
    projects["web"] = {"workspace": str(web), "agent": "generic", "agent_command": "no-such-agent"}
    env = chat_env | {"SWITCHBOARD_PROJECTS": json.dumps(projects)}
    proc = subprocess.run(
        [sys.executable, "-m", "bot", "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 1
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith("FAIL project web: agent")
    assert "no-such-agent" in failed[0] and "Traceback" not in proc.stdout + proc.stderr
