"""Projects: the registry built from settings and checked at start-up (each bad entry named), the
project `default` formed by today's single-workspace settings, who may use a project, and the
state store's migration of bindings written before projects existed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bot.access import AccessPolicy, SurfaceRules
from bot.agent_plans import AgentPlans, agent_plan
from bot.conversation import Binding
from bot.projects import DEFAULT_PROJECT, build_projects, place_keys
from bot.store import SqliteStateStore
from config import ConfigError, load_settings
from surfaces.base import ConversationKey
from tests.store_backends import Backend

pytestmark = pytest.mark.usefixtures("clean_env")


@pytest.fixture
def spaces(tmp_path: Path) -> tuple[Path, Path]:
    api, web = tmp_path / "api", tmp_path / "web"
    api.mkdir()
    web.mkdir()
    return api, web


def bad(monkeypatch: pytest.MonkeyPatch, projects: object, **env: str) -> str:
    """The start-up error for SWITCHBOARD_PROJECTS set to `projects` (JSON text as given)."""
    text = projects if isinstance(projects, str) else json.dumps(projects)
    monkeypatch.setenv("SWITCHBOARD_PROJECTS", text)
    for name, value in env.items():
        monkeypatch.setenv(f"SWITCHBOARD_{name}", value)
    with pytest.raises(ConfigError) as caught:
        build_projects(load_settings())
    return str(caught.value)


# ---- validation: each bad entry named ----------------------------------------------------------
def test_a_missing_workspace_names_the_project_and_the_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "srv" / "web"
    error = bad(monkeypatch, {"web": {"workspace": str(missing)}})
    assert (
        error == f'Invalid setting SWITCHBOARD_PROJECTS["web"].workspace: {missing} does not exist'
    )


def test_a_workspace_that_is_a_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("x")
    error = bad(monkeypatch, {"api": {"workspace": str(tmp_path)}, "web": {"workspace": str(file)}})
    assert error.endswith(f'SWITCHBOARD_PROJECTS["web"].workspace: {file} is not a directory')


def test_a_project_without_a_workspace_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    error = bad(monkeypatch, {"web": {"agent": "claude"}})
    assert error == 'Invalid setting SWITCHBOARD_PROJECTS["web"].workspace: is required'


def test_an_unknown_agent_names_the_entry_and_the_choices(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    error = bad(monkeypatch, {"web": {"workspace": str(spaces[1]), "agent": "clod"}})
    assert 'SWITCHBOARD_PROJECTS["web"].agent: unknown agent' in error
    assert "'clod'" in error and "claude" in error


def test_an_unknown_agent_in_the_allowed_list_is_refused(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    error = bad(monkeypatch, {"web": {"workspace": str(spaces[1]), "agents": ["codex", "nope"]}})
    assert 'SWITCHBOARD_PROJECTS["web"].agents: unknown agent' in error and "'nope'" in error


def test_a_name_given_twice_in_the_environment_json_is_refused(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    api, web = spaces
    text = f'{{"web": {{"workspace": "{api}"}}, "web": {{"workspace": "{web}"}}}}'
    error = bad(monkeypatch, text)
    assert (
        error == "Invalid setting SWITCHBOARD_PROJECTS: names 'web' twice; each name must be unique"
    )


def test_a_name_given_twice_in_the_config_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path], tmp_path: Path
) -> None:
    api, web = spaces
    config = tmp_path / "config.json"
    config.write_text(
        f'{{"projects": {{"web": {{"workspace": "{api}"}}, "web": {{"workspace": "{web}"}}}}}}'
    )
    monkeypatch.setenv("SWITCHBOARD_CONFIG", str(config))
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert str(caught.value) == (
        "Invalid setting SWITCHBOARD_PROJECTS: names 'web' twice; each name must be unique"
    )


def test_two_names_differing_only_in_case_are_refused(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    api, web = spaces
    error = bad(monkeypatch, {"web": {"workspace": str(api)}, "Web": {"workspace": str(web)}})
    assert "SWITCHBOARD_PROJECTS" in error and "differ only in case" in error


def test_an_unknown_default_project_is_refused(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    error = bad(monkeypatch, {"api": {"workspace": str(spaces[0])}}, DEFAULT_PROJECT="web")
    assert error.startswith(
        "Invalid setting SWITCHBOARD_DEFAULT_PROJECT: no project is named 'web'"
    )


def test_users_not_in_surface_id_form_are_refused(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    error = bad(monkeypatch, {"api": {"workspace": str(spaces[0]), "users": ["1001"]}})
    assert "SWITCHBOARD_PROJECTS[\"api\"].users: '1001' is not in surface:id form" in error


def test_a_misspelt_project_setting_is_named(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    error = bad(monkeypatch, {"api": {"workspace": str(spaces[0]), "modle": "m1"}})
    assert 'SWITCHBOARD_PROJECTS["api"].modle' in error


def test_a_named_agent_with_an_unknown_preset_is_named(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    monkeypatch.setenv("SWITCHBOARD_AGENTS", json.dumps({"mine": {"agent": "gpt"}}))
    error = bad(monkeypatch, {"api": {"workspace": str(spaces[0]), "agent": "mine"}})
    assert 'SWITCHBOARD_AGENTS["mine"].agent' in error


def test_a_generic_agent_without_a_command_stops_the_start_naming_the_project(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    monkeypatch.setenv(
        "SWITCHBOARD_PROJECTS",
        json.dumps({"web": {"workspace": str(spaces[1]), "agent": "generic"}}),
    )
    settings = load_settings()
    plans = AgentPlans(settings, build_projects(settings))
    with pytest.raises(ConfigError) as caught:
        plans.check_all()
    assert caught.value.setting == 'SWITCHBOARD_PROJECTS["web"].agent_command'


# ---- what a valid configuration means ------------------------------------------------------------
def test_todays_settings_form_the_default_project(tmp_path: Path) -> None:
    settings = load_settings(
        workspace=tmp_path,
        agent="claude",
        agent_command="my-agent --acp",
        agent_mode="ask",
        model="m1",
    )
    registry = build_projects(settings)
    assert [project.name for project in registry] == [DEFAULT_PROJECT]
    project = registry.default
    assert project.workspace == tmp_path.resolve()
    assert (project.agent.preset, project.agent.command) == ("claude", "my-agent --acp")
    assert (project.agent.mode, project.agent.model) == ("ask", "m1")
    assert project.users == frozenset()
    spec, _ = agent_plan(settings)
    assert spec.workspace == tmp_path.resolve() and spec.argv == ("my-agent", "--acp")


def test_todays_missing_workspace_still_names_switchboard_workspace(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        build_projects(load_settings(workspace=tmp_path / "gone"))
    assert caught.value.setting == "SWITCHBOARD_WORKSPACE"


def test_projects_take_their_agents_from_presets_and_named_agents(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    api, web = spaces
    monkeypatch.setenv(
        "SWITCHBOARD_AGENTS", json.dumps({"mine": {"agent": "generic", "agent_command": "x --acp"}})
    )
    projects = {
        "api": {"workspace": str(api), "agent": "claude"},
        "web": {
            "workspace": str(web), "agent": "mine", "model": "m1", "agents": ["codex", "MINE"],
            "users": "telegram:1001, slack:U0123",
        },
    }  # fmt: skip
    monkeypatch.setenv("SWITCHBOARD_PROJECTS", json.dumps(projects))
    monkeypatch.setenv("SWITCHBOARD_DEFAULT_PROJECT", "Web")
    registry = build_projects(load_settings())
    assert registry.default.name == "web"  # names are found whatever their case
    web_project = registry.get("WEB")
    assert web_project is not None
    assert [a.name for a in web_project.agents] == ["mine", "codex"]  # its own first, no repeat
    assert (web_project.agent.preset, web_project.agent.command, web_project.agent.model) == (
        "generic",
        "x --acp",
        "m1",
    )
    assert web_project.users == {"telegram:1001", "slack:U0123"}


def test_a_project_with_users_is_for_them_and_admins_only(
    monkeypatch: pytest.MonkeyPatch, spaces: tuple[Path, Path]
) -> None:
    api, web = spaces
    projects = {
        "api": {"workspace": str(api)},
        "web": {"workspace": str(web), "users": ["telegram:1"]},
    }
    monkeypatch.setenv("SWITCHBOARD_PROJECTS", json.dumps(projects))
    registry = build_projects(load_settings())
    access = AccessPolicy(
        {"telegram": SurfaceRules(chat=frozenset({"1", "2"}), admin=frozenset({"9"}))}
    )
    names = {who: [p.name for p in registry.usable(access, "telegram", who)] for who in "129"}
    assert names == {"1": ["api", "web"], "2": ["api"], "9": ["api", "web"]}
    assert [p.name for p in registry.usable(access, "slack", "1")] == ["api"]  # ids are per surface


def test_a_topic_is_its_own_place_and_in_its_group() -> None:
    topic = ConversationKey("telegram", "-100", "7")
    assert place_keys(topic) == (topic, ConversationKey("telegram", "-100"))
    dm = ConversationKey("telegram", "42")
    assert place_keys(dm) == (dm,)


# ---- the store: bindings record the project; a database of the old schema is migrated ---------------
OLD_BINDINGS = """
CREATE TABLE bindings (
    surface TEXT NOT NULL, chat TEXT NOT NULL, thread TEXT NOT NULL,
    session_id TEXT NOT NULL, backend TEXT NOT NULL, workspace TEXT NOT NULL,
    model TEXT NOT NULL, generation INTEGER NOT NULL,
    PRIMARY KEY (surface, chat, thread)
);
INSERT INTO bindings VALUES ('telegram', '42', '', 'sess-old', 'kiro', '/ws', 'm1', 2);
"""


@pytest.mark.anyio
async def test_a_database_made_by_the_old_schema_gains_the_project_columns(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript(OLD_BINDINGS)
    conn.close()
    key = ConversationKey("telegram", "42")
    store = SqliteStateStore(path)
    try:
        assert await store.get_binding(key) == Binding("sess-old", "kiro", "/ws", "m1", 2)
        await store.put_binding(key, Binding("sess-new", "claude", "/web", "", 3, "web", "claude"))
        assert await store.get_binding(key) == Binding(
            "sess-new", "claude", "/web", "", 3, "web", "claude"
        )
    finally:
        await store.aclose()
    store = SqliteStateStore(path)  # opening a migrated file again changes nothing
    try:
        found = await store.get_binding(key)
        assert found is not None and found.project == "web"
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_place_bindings_persist(backend: Backend) -> None:
    topic = ConversationKey("telegram", "-100", "7")
    store = backend.open()  # SQLite and a real Redis server
    try:
        assert await store.get_place(topic) is None
        await store.put_place(topic, "web")
    finally:
        await store.aclose()
    store = backend.open()
    try:
        assert await store.get_place(topic) == "web"
        assert await store.get_place(ConversationKey("telegram", "-100")) is None
        await store.delete_place(topic)
        assert await store.get_place(topic) is None
    finally:
        await store.aclose()
