"""The SQLite state file (bot/store/sqlite_file.py): created private (0700 directories, 0600 file and
side files), looser ones of ours tightened with a warning, and refused inside a workspace by
`switchboard run` (and failed by doctor) in one sentence naming SWITCHBOARD_STATE."""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.projects import build_projects
from bot.store import SqliteStateStore
from bot.store.sqlite_file import refuse_inside_workspaces
from config import ConfigError, load_settings
from tests.conftest import FakeAgent

pytestmark = pytest.mark.anyio


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The umask most systems start with: without our modes, files would be 0644."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


# ---- modes -----------------------------------------------------------------------------------
async def test_a_new_state_file_its_directories_and_side_files_are_private(
    tmp_path: Path, usual_umask: None
) -> None:
    path = tmp_path / "state-home" / "switchboard" / "state.db"
    store = SqliteStateStore(path)
    try:
        await store.check_writable()
        assert (path.with_name("state.db-wal")).exists()  # WAL: the side files are there now
        for side in ("state.db", "state.db-wal", "state.db-shm"):
            assert mode(path.with_name(side)) == 0o600, side
    finally:
        await store.aclose()
    assert mode(path.parent) == 0o700
    assert mode(path.parent.parent) == 0o700


async def test_looser_files_of_ours_are_tightened_with_a_warning_and_the_directory_left(
    tmp_path: Path, usual_umask: None, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir(mode=0o755)
    path = directory / "state.db"
    # An older version's files (0644 under this umask), side files kept by an open connection.
    older = sqlite3.connect(path)
    try:
        older.execute("PRAGMA journal_mode=WAL")
        older.execute("CREATE TABLE t (x)")
        older.commit()
        sides = [path.with_name("state.db-wal"), path.with_name("state.db-shm")]
        assert [mode(p) for p in [path, *sides]] == [0o644] * 3
        caplog.set_level(logging.WARNING, logger="bot.store.sqlite_file")
        store = SqliteStateStore(path)
        try:
            await store.check_writable()
        finally:
            await store.aclose()
        assert [mode(p) for p in [path, *sides]] == [0o600] * 3
    finally:
        older.close()
    assert mode(directory) == 0o755  # existed before: not Switchboard's to change
    warned = [r.getMessage() for r in caplog.records if r.name == "bot.store.sqlite_file"]
    assert warned == [
        f"the state file {p} was readable by other users (mode 644); it is private now"
        for p in [path, *sides]
    ]


async def test_a_directory_anyone_may_write_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    caplog.set_level(logging.WARNING, logger="bot.store.sqlite_file")
    store = SqliteStateStore(directory / "state.db")
    try:
        await store.check_writable()
    finally:
        await store.aclose()
    assert mode(directory / "state.db") == 0o600
    (line,) = [r.getMessage() for r in caplog.records if r.name == "bot.store.sqlite_file"]
    assert (
        line
        == f"the state directory {directory} may be written by any user (mode 777); keep it private"
    )


# ---- inside a workspace -------------------------------------------------------------------------
def _projects(tmp_path: Path, **settings: Any) -> Any:
    return build_projects(load_settings(**settings))


def test_a_state_file_inside_any_projects_workspace_is_refused_naming_the_setting(
    tmp_path: Path,
) -> None:
    web, api = tmp_path / "web", tmp_path / "api"
    web.mkdir()
    api.mkdir()
    (tmp_path / "into-api").symlink_to(api, target_is_directory=True)
    projects = _projects(
        tmp_path,
        projects={"web": {"workspace": str(web)}, "api": {"workspace": str(api)}},
        default_project="web",
    )
    for inside in (api / "state.db", api / "deep" / "state.db", tmp_path / "into-api" / "s.db"):
        with pytest.raises(ConfigError) as refused:
            refuse_inside_workspaces(str(inside), projects)
        assert refused.value.setting == "SWITCHBOARD_STATE"
        assert str(refused.value) == (
            f"Invalid setting SWITCHBOARD_STATE: {inside} is inside the workspace of project api "
            f"({api}), where its agent could read approval tokens and other people's messages; "
            "put the state file outside every workspace"
        )
    with pytest.raises(ConfigError, match="project web"):
        refuse_inside_workspaces(f"sqlite:///{web}/state.db", projects)
    for elsewhere in (str(tmp_path / "state.db"), "redis://:pw@127.0.0.1:1/0", ":memory:"):
        refuse_inside_workspaces(elsewhere, projects)


def test_the_default_workspace_counts_too(tmp_path: Path) -> None:
    projects = _projects(tmp_path, workspace=tmp_path)
    with pytest.raises(ConfigError, match="inside the workspace of project default"):
        refuse_inside_workspaces(str(tmp_path / "state.db"), projects)


def test_switchboard_run_refuses_a_state_file_in_its_workspace_before_anything_starts(
    run_cli: Any, fake_agent: FakeAgent, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    state = workspace / ".switchboard" / "state.db"
    result = run_cli(
        "run",
        env={
            "SWITCHBOARD_WORKSPACE": str(workspace),
            "SWITCHBOARD_STATE": str(state),
            "SWITCHBOARD_AGENT_COMMAND": fake_agent.command(),
            "SWITCHBOARD_TELEGRAM__TOKEN": "123456:" + "A" * 35,
            "SWITCHBOARD_TELEGRAM__API_URL": "http://127.0.0.1:9/",
            "SWITCHBOARD_TELEGRAM__ALLOWED_USERS": "1",
        },
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Invalid setting SWITCHBOARD_STATE: {state} is inside the workspace of project default "
        f"({workspace}), where its agent could read approval tokens and other people's messages; "
        "put the state file outside every workspace"
    ]
    assert not state.parent.exists()
    assert fake_agent.spawns() == 0


def test_doctor_fails_the_state_store_inside_the_workspace(
    run_cli: Any, fake_agent: FakeAgent, tmp_path: Path
) -> None:
    state = tmp_path / "state.db"  # run_cli's working directory is the workspace
    result = run_cli(
        "doctor",
        "--agent-command",
        fake_agent.command(),
        env={"SWITCHBOARD_STATE": str(state)},
    )
    assert result.returncode == 1
    (line,) = [line for line in result.stdout.splitlines() if "state store" in line]
    assert line.startswith("FAIL state store: Invalid setting SWITCHBOARD_STATE: ")
    assert not state.exists()
