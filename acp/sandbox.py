"""Where an agent runs: `Isolation` says whether bubblewrap confines it, its home, the user it
runs as, and what of Switchboard must never be visible to it; `launch_argv` turns an agent's (or
one of its terminals') command line into the bubblewrap command line that confines it.

The sandbox view: own mount, PID and IPC namespaces, a fresh `/proc` (Switchboard's processes
are not in it), a minimal `/dev`, a private `/tmp` (one per agent, shared with its terminals),
the workspace and the agent's home read-write, the system directories, a few files of `/etc`
and the directories the command lives in read-only. Network kept: agents call their model
services. Switchboard's state, config file and logs (`hidden`) are covered by an empty mount
wherever a read-only directory would have shown them."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from acp.session_handle import AcpRuntimeError

log = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "off"]

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt")
# What programs read of /etc to run, resolve names and trust TLS: never /etc as a whole (an
# operator's config file may live there).
ETC_ENTRIES = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/crypto-policies",
    "/etc/gai.conf",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/ssl",
    "/etc/timezone",
)
_PROBE_TIMEOUT = 10.0
_warned: set[str] = set()  # each fallback is said once per process, not once per agent
_PR_SET_DUMPABLE = 4


class SandboxUnavailable(AcpRuntimeError):
    """`SWITCHBOARD_AGENT_SANDBOX=bwrap`, and bubblewrap does not work here."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"bubblewrap cannot confine agents here: {reason}")


class AgentUserUnusable(AcpRuntimeError):
    """`SWITCHBOARD_AGENT_USER` names no user here, or Switchboard cannot switch to one."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"agents cannot run as {name!r}: {reason}")


@dataclass(frozen=True, slots=True)
class AgentUser:
    name: str
    uid: int
    gid: int

    @classmethod
    def named(cls, name: str) -> AgentUser:
        try:
            entry = pwd.getpwnam(name) if not name.isdigit() else pwd.getpwuid(int(name))
        except KeyError:
            raise AgentUserUnusable(name, "there is no such user on this host") from None
        if os.geteuid() not in (0, entry.pw_uid):
            raise AgentUserUnusable(name, "Switchboard must run as root to switch users")
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid)

    def spawn_options(self) -> dict[str, Any]:
        """`anyio.open_process`'s keywords that start a process as this user."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


@dataclass(frozen=True, slots=True)
class Isolation:
    """How agents run. The default is no sandbox and Switchboard's own user and home."""

    bwrap: str = ""  # bubblewrap's path when the sandbox is in force, else ""
    home: Path | None = None  # the agent's HOME; None: Switchboard's own (sandbox off only)
    user: AgentUser | None = None
    hidden: tuple[Path, ...] = ()  # Switchboard's state directory, config file, logs
    why_off: str = ""  # the reason `auto` fell back to no sandbox

    @property
    def sandboxed(self) -> bool:
        return bool(self.bwrap)

    def describe(self) -> str:
        """doctor's line."""
        user = f"; user {self.user.name}" if self.user else ""
        if self.sandboxed:
            return f"bubblewrap (mount, PID, IPC namespaces; home {self.home}{user})"
        who = f"user {self.user.name}" if self.user else "this user"
        why = f" ({self.why_off})" if self.why_off else ""
        return (
            f"off{why}: agents run as {who} and can read whatever it can read, Switchboard's "
            "state and config included"
        )

    def summary(self) -> str:
        """/status's line."""
        user = f" as {self.user.name}" if self.user else ""
        if self.sandboxed:
            return f"Isolation: bubblewrap sandbox{user}"
        return f"Isolation: none, the agent runs{user or ' as Switchboard'} unsandboxed"


@functools.cache
def probe(bwrap: str, uid: int | None = None, gid: int | None = None) -> str:
    """ "" when bubblewrap can make the namespaces we use here (as that user), else why not."""
    argv = [bwrap, *_NAMESPACES, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    try:
        done = subprocess.run(
            [*argv, "--", "true"],
            capture_output=True,
            timeout=_PROBE_TIMEOUT,
            check=False,
            user=uid,
            group=gid,
            extra_groups=[] if uid is not None else None,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{bwrap} could not be run ({exc})"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return said[-1][:300] if said else f"{bwrap} exited with {done.returncode}"
    return ""


def plan_isolation(
    mode: SandboxMode,
    *,
    home: Path,
    home_chosen: bool,
    hidden: Iterable[Path],
    user: str = "",
    path: str | None = None,
) -> Isolation:
    """Decide how agents run (probing bubblewrap once per process) and prepare the agent's home
    (created 0700, owned by the agent's user). `home_chosen`: the operator set it, so it is the
    agent's HOME even without the sandbox."""
    agent_user = AgentUser.named(user) if user else None
    hidden = tuple(Path(os.path.abspath(p)) for p in hidden)
    bwrap = ""
    why_off = ""
    if mode != "off":
        found = shutil.which("bwrap", path=path)
        uid = agent_user.uid if agent_user else None
        gid = agent_user.gid if agent_user else None
        why_off = "bubblewrap is not installed" if found is None else probe(found, uid, gid)
        if not why_off and found is not None:
            bwrap = found
        elif mode == "bwrap":
            raise SandboxUnavailable(why_off)
        elif why_off not in _warned:
            _warned.add(why_off)
            log.warning("agents run unsandboxed: %s (SWITCHBOARD_AGENT_SANDBOX=auto)", why_off)
    if not bwrap and not home_chosen:
        return Isolation(user=agent_user, hidden=hidden, why_off=why_off)
    _prepare_home(home, agent_user)
    return Isolation(bwrap=bwrap, home=home, user=agent_user, hidden=hidden, why_off=why_off)


def _prepare_home(home: Path, user: AgentUser | None) -> None:
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(home, 0o700)
    if user is not None and os.geteuid() == 0:
        os.chown(home, user.uid, user.gid)


def prepare_private_tmp(isolation: Isolation) -> Path | None:
    """The directory an agent and its terminals see as /tmp (removed when the agent stops)."""
    if not isolation.sandboxed:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="switchboard-agent-tmp-"))
    if isolation.user is not None and os.geteuid() == 0:
        os.chown(tmp, isolation.user.uid, isolation.user.gid)
    return tmp


def remove_private_tmp(tmp: Path | None) -> None:
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


_NAMESPACES = ("--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session")


def launch_argv(
    isolation: Isolation,
    argv: Sequence[str],
    *,
    workspace: Path,
    cwd: Path,
    tmp: Path | None,
    env: Mapping[str, str],
) -> list[str]:
    """`argv` as it is started: unchanged without the sandbox, else behind bubblewrap."""
    if not isolation.sandboxed:
        return list(argv)
    args = [isolation.bwrap, *_NAMESPACES, "--proc", "/proc", "--dev", "/dev"]
    # /tmp first: a workspace (or anything else shown) under /tmp is mounted on top of it
    args += ["--bind", str(tmp), "/tmp"] if tmp is not None else ["--tmpfs", "/tmp"]
    sources = read_only_sources(argv, env)
    if (
        isolation.user is not None
    ):  # bubblewrap runs as that user: it cannot bind what it cannot reach
        sources = [p for p in sources if _reachable(p, isolation.user)]
    for source in sources:
        args += _read_only(source)
    args += ["--bind", str(workspace), str(workspace)]
    shown = [*map(Path, sources), workspace]
    for secret in isolation.hidden:
        if any(secret.is_relative_to(s) for s in shown):
            args += _cover(secret, workspace)
    if isolation.home is not None:
        args += ["--bind", str(isolation.home), str(isolation.home)]
    args += ["--chdir", str(cwd), "--", *argv]
    return args


def _reachable(path: str, user: AgentUser) -> bool:
    """Whether `user` (no supplementary groups) may walk down to `path`: a PATH entry under a
    private home is left out of its view rather than failing its sandbox."""
    current = Path("/")
    for part in Path(path).parts[1:]:
        try:
            info = current.stat()
        except OSError:
            return False
        if info.st_uid == user.uid:
            allowed = info.st_mode & 0o100
        elif info.st_gid == user.gid:
            allowed = info.st_mode & 0o010
        else:
            allowed = info.st_mode & 0o001
        if not allowed:
            log.debug("the agent's user %s cannot reach %s: not in its view", user.name, path)
            return False
        current = current / part
    return True


def _read_only(source: str) -> list[str]:
    if os.path.islink(source) and source.count("/") == 1:  # /bin -> usr/bin (merged /usr)
        return ["--symlink", os.readlink(source), source]
    return ["--ro-bind", source, source]


def _cover(secret: Path, workspace: Path) -> list[str]:
    """An empty mount over one of Switchboard's files, so no directory the agent sees shows it.
    A directory holding the workspace is not covered (its files are, one by one: `hidden` names
    them too)."""
    if secret.is_dir():
        if workspace.is_relative_to(secret):
            log.warning("the workspace %s lies in Switchboard's directory %s", workspace, secret)
            return []
        return ["--tmpfs", str(secret)]
    if not secret.exists():  # nothing to show; a mount point would create it
        return []
    return ["--ro-bind", "/dev/null", str(secret)]


def read_only_sources(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Every directory the agent may read: the system's, a few of /etc, the PATH entries, and
    where its command, the command's interpreter (`#!`) and its script arguments live."""
    wanted: list[str] = [*SYSTEM_DIRS, *ETC_ENTRIES]
    wanted += [p for p in env.get("PATH", "").split(":") if os.path.isabs(p)]
    wanted += _command_dirs(argv[0]) if argv else []
    for arg in argv[1:]:
        if os.path.isabs(arg) and os.path.exists(arg):
            wanted += _script_dirs(arg)
    seen: list[str] = []
    for path in wanted:
        normal = os.path.normpath(path)
        if os.path.lexists(normal) and normal not in seen and normal != "/":
            seen.append(normal)
    return seen


def _command_dirs(command: str) -> list[str]:
    """Where a command lives, as started and with links resolved; for `<prefix>/bin/x` the
    prefix too (a virtual environment or a node install keeps its libraries beside `bin`)."""
    found: list[str] = []
    for path in (command, os.path.realpath(command)):
        where = os.path.dirname(path)
        found.append(where)
        if os.path.basename(where) == "bin":
            found.append(os.path.dirname(where))
    interpreter = _interpreter(command)
    if interpreter and interpreter != command:
        found += _command_dirs(interpreter)
    return found


def _script_dirs(path: str) -> list[str]:
    """A script argument's directory; in a `node_modules` tree, the outermost one (its
    dependencies are its siblings)."""
    where = path if os.path.isdir(path) else os.path.dirname(path)
    parts = Path(os.path.realpath(where)).parts
    if "node_modules" in parts:
        return [where, str(Path(*parts[: parts.index("node_modules") + 1]))]
    return [where]


def _interpreter(command: str) -> str:
    try:
        with open(command, "rb") as file:
            head = file.read(256)
    except OSError:
        return ""
    if not head.startswith(b"#!"):
        return ""
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    return words[0] if words and os.path.isabs(words[0]) else ""


def make_undumpable() -> None:
    """Mark this process non-dumpable: its /proc/<pid>/environ and mem become unreadable to
    other processes of the same user (an unsandboxed agent among them)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            log.warning("could not mark Switchboard non-dumpable (errno %d)", ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        log.warning("could not mark Switchboard non-dumpable (%s)", exc)
