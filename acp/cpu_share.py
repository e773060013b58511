"""How much CPU an agent's terminals may take: each runs at `TERMINAL_NICE`, and where the cgroup
filesystem is writable each session's terminals share one cgroup under the agent's own, whose
weight is a quarter of a default one: eight `yes` commands weigh as one small process, not eight.

cgroup v1's `cpu` controller (`cpu.shares`) or v2 (`cpu.weight`, where our cgroup may enable the
`cpu` controller for its children); without either, nice alone."""

from __future__ import annotations

import itertools
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

TERMINAL_NICE = 10
_V1_MOUNTS = (Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/cpu,cpuacct"))
_V2_MOUNT = Path("/sys/fs/cgroup")
_GROUP_WEIGHT = {"cpu.shares": "256", "cpu.weight": "25"}  # a default is 1024 / 100
_ids = itertools.count(1)


def _own_cgroups() -> dict[str, str]:
    """Our cgroup path per hierarchy: {"cpu": "/x"} for v1's cpu, {"": "/y"} for v2."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            found[name] = path
    return found


class CpuShares:
    """The cgroups of one agent's terminals: one per session, removed when it has no more."""

    def __init__(self) -> None:
        self.group: Path | None = None
        self.weight_file = ""
        self._sessions: dict[str, Path] = {}
        self._tried = False  # the group is made on the first terminal: most agents run none

    @property
    def kind(self) -> str:
        if self.group is None:
            return ""
        return (
            "cgroup v1 cpu.shares" if self.weight_file == "cpu.shares" else "cgroup v2 cpu.weight"
        )

    def describe(self) -> str:
        """doctor's line: how terminals are held back."""
        self._open()
        if self.group is None:
            return f"nice {TERMINAL_NICE} only (no writable cgroup cpu controller here)"
        return f"nice {TERMINAL_NICE} and a CPU share per session ({self.kind})"

    def _open(self) -> None:
        if self._tried:
            return
        self._tried = True
        own = _own_cgroups()
        name = f"switchboard-terminals-{os.getpid()}-{next(_ids)}"
        candidates: list[tuple[Path, str]] = []
        if "cpu" in own:
            candidates += [(m / own["cpu"].lstrip("/"), "cpu.shares") for m in _V1_MOUNTS]
        if "" in own:
            candidates.append((_V2_MOUNT / own[""].lstrip("/"), "cpu.weight"))
        for base, weight_file in candidates:
            group = base / name
            if not _offers_cpu(base, weight_file):
                continue
            try:
                if weight_file == "cpu.weight":
                    (base / "cgroup.subtree_control").write_text("+cpu")
                group.mkdir()
            except OSError:
                continue
            try:
                (group / weight_file).write_text(_GROUP_WEIGHT[weight_file])
                if weight_file == "cpu.weight":
                    (group / "cgroup.subtree_control").write_text("+cpu")
            except OSError:
                _remove(group)
                continue
            self.group, self.weight_file = group, weight_file
            return

    def procs_file(self, session_id: str) -> Path | None:
        """The file a terminal of this session writes its pid to, to join the session's share."""
        self._open()
        if self.group is None:
            return None
        session = self._sessions.get(session_id)
        if session is None:
            session = self.group / f"session-{len(self._sessions) + 1}-{next(_ids)}"
            try:
                session.mkdir()
            except OSError as exc:
                log.debug("no CPU cgroup for a session: %s", exc)
                return None
            self._sessions[session_id] = session
        return session / "cgroup.procs"

    def release(self, session_id: str) -> None:
        """The session has no terminal left: its cgroup goes (it is empty by then)."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            _remove(session)

    def close(self) -> None:
        for session_id in list(self._sessions):
            self.release(session_id)
        if self.group is not None:
            _remove(self.group)
            self.group = None


def _offers_cpu(base: Path, weight_file: str) -> bool:
    """Whether `base` is a cgroup whose children can be given a CPU weight (checked before any
    write: a v2 path under a v1 host is a plain tmpfs, where a write would make a file)."""
    if weight_file == "cpu.shares":
        return (base / "cpu.shares").exists()
    try:
        return "cpu" in (base / "cgroup.controllers").read_text().split()
    except OSError:
        return False


def _remove(group: Path) -> None:
    try:
        group.rmdir()
    except OSError as exc:  # a process still in it: the kernel keeps it until it is empty
        log.debug("cgroup %s not removed: %s", group, exc)


def describe_cpu_limits() -> str:
    """How terminals would be held back here, found by making (and removing) one agent's group."""
    shares = CpuShares()
    try:
        return shares.describe()
    finally:
        shares.close()
