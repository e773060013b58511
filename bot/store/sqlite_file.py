"""Where the SQLite state file may live, and who may read it.

The state file holds what an agent must never see: pending approval tokens (with them it could
press its own approval through a platform's webhook), other people's messages in the delivery
ledger, the audit log. So:

- `refuse_inside_workspaces`: `switchboard run` refuses a state file inside any project's
  workspace (the agent reads and writes there), one sentence naming `SWITCHBOARD_STATE`; doctor
  says the same. `chat` does not refuse: the terminal is the operator's own, approvals come from
  its keyboard and its ledger holds only their own messages.
- `prepare_private`: the directories Switchboard creates for it are 0700 and the file is created
  0600 before SQLite opens it (SQLite gives its `-wal` and `-shm` files the database's mode). A
  file or side file already there with looser modes is made 0600 when this user owns it, with one
  WARNING; one owned by someone else, or a directory others may write, is only warned about: a
  directory that existed before is not Switchboard's to change (it may be `/tmp`, or `/var/lib`).
"""

from __future__ import annotations

import functools
import logging
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from bot.projects import Project, build_projects
from config import ConfigError, Settings

__all__ = [
    "prepare_private",
    "refuse_inside_workspaces",
    "refuse_state_inside_workspaces",
    "sqlite_path",
    "tighten_side_files",
]

log = logging.getLogger(__name__)

SETTING = "SWITCHBOARD_STATE"
SIDE_FILES = ("-wal", "-shm", "-journal")
_PRIVATE_FILE = 0o600
_PRIVATE_DIR = 0o700


def sqlite_path(location: str) -> Path | None:
    """The file a SQLite `state` setting names (as `open_store` reads it), else None (Redis,
    `:memory:`, or a value `open_store` will refuse with its own sentence)."""
    if location.startswith("sqlite:///"):
        location = location.removeprefix("sqlite:///")
    elif "://" in location:
        return None
    if not location or location == ":memory:":
        return None
    return Path(location).expanduser()


def refuse_state_inside_workspaces(settings: Settings) -> None:
    """`switchboard run`'s start: `refuse_inside_workspaces` for every configured project."""
    refuse_inside_workspaces(settings.state, build_projects(settings))


def refuse_inside_workspaces(location: str, projects: Iterable[Project]) -> None:
    """ConfigError naming SWITCHBOARD_STATE when the state file lies inside a project's
    workspace, symlinks resolved on both sides."""
    path = sqlite_path(location)
    if path is None:
        return
    real = Path(os.path.realpath(path))
    for project in projects:
        if real.is_relative_to(os.path.realpath(project.workspace)):
            raise ConfigError(
                SETTING,
                f"{path} is inside the workspace of project {project.name} "
                f"({project.workspace}), where its "
                "agent could read approval tokens and other people's messages; "
                "put the state file outside every workspace",
            )


def prepare_private(path: Path) -> None:
    """The state file's directories made 0700 where missing, the file made 0600 where missing
    or tightened where ours; raises OSError as mkdir and open do."""
    _make_dirs(path.parent)
    directory = os.stat(path.parent)
    if directory.st_mode & stat.S_IWOTH and not directory.st_mode & stat.S_ISVTX:
        log.warning(
            "the state directory %s may be written by any user (mode %o); keep it private",
            path.parent,
            stat.S_IMODE(directory.st_mode),
        )
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
    fd = os.open(path, flags, _PRIVATE_FILE)
    try:
        _tighten(path, os.fstat(fd), lambda mode: os.fchmod(fd, mode))
    finally:
        os.close(fd)


def tighten_side_files(path: Path) -> None:
    """After SQLite opened the file: its side files as private as it is."""
    for suffix in SIDE_FILES:
        side = path.with_name(path.name + suffix)
        try:
            info = os.stat(side, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(info.st_mode):
            _tighten(side, info, functools.partial(os.chmod, side))


def _make_dirs(directory: Path) -> None:
    missing: list[Path] = []
    while not directory.exists():
        missing.append(directory)
        if directory.parent == directory:
            break
        directory = directory.parent
    for made in reversed(missing):
        try:
            os.mkdir(made, _PRIVATE_DIR)
        except FileExistsError:
            continue  # made meanwhile by another process: left as it made it


def _tighten(path: Path, info: os.stat_result, chmod: Callable[[int], None]) -> None:
    loose = stat.S_IMODE(info.st_mode) & 0o077
    if not loose:
        return
    if info.st_uid != os.geteuid():
        log.warning(
            "the state file %s is readable by other users (mode %o) and owned by another user; "
            "make it 0600",
            path,
            stat.S_IMODE(info.st_mode),
        )
        return
    chmod(stat.S_IMODE(info.st_mode) & ~0o077)
    log.warning(
        "the state file %s was readable by other users (mode %o); it is private now",
        path,
        stat.S_IMODE(info.st_mode),
    )
