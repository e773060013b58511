"""Runs one terminal's command so that everything it starts ends with it.

Started by `acp/terminals.py` as `python -I -S _terminal_wrapper.py [--nice N] [--cgroup FILE]
[--uid N --gid N] -- ARGV...` (stdlib only: it runs outside any package). It makes itself a
child subreaper (orphans of the command, even `setsid sleep &`, become its children instead of
init's), lowers its CPU priority and joins the session's CPU cgroup (inherited by the command),
starts the command (as the agent's user, when given), and kills every descendant with SIGKILL
when the command ends, when it is told (SIGTERM, SIGINT, SIGHUP) or when Switchboard dies. It
exits as the command did (the same exit code, or killed by the same signal)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_descendants() -> None:
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


_told: list[int] = []  # set once a kill was asked for: a command not yet started never starts


def _on_signal(signum: int, _frame: object) -> None:
    _told.append(signum)
    _kill_descendants()


def _parse(args: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    while args and args[0] != "--":
        options[args[0].lstrip("-")] = args[1]
        args = args[2:]
    return options, args[1:]


def _start(argv: list[str], options: dict[str, str]) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if "gid" in options:
            os.setgroups([])
            os.setgid(int(options["gid"]))
        if "uid" in options:
            os.setuid(int(options["uid"]))
        os.execv(argv[0], argv)
    except OSError as exc:
        os.write(2, f"could not start {argv[0]}: {exc.strerror}\n".encode())
    os._exit(127)


def main() -> None:
    options, argv = _parse(sys.argv[1:])
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # Switchboard died before we could hear of it
        os._exit(1)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if "cgroup" in options:
        try:
            with open(options["cgroup"], "w") as procs:
                procs.write(str(os.getpid()))
        except OSError:
            pass  # the CPU share is a bound, not a condition to run
    os.nice(int(options.get("nice", "0")))
    told = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    for signum in told:
        signal.signal(signum, _on_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, told)  # Switchboard spawned us with them blocked
    if _told:  # killed before it started: as if the command had been
        os.kill(os.getpid(), signal.SIGKILL)
    command = _start(argv, options)
    if _told:  # the kill came while the command was being forked
        _kill_descendants()
    status: int | None = None
    while True:
        try:
            # Once the command ended, nothing waits: what is left is killed until none is.
            pid, waited = os.waitpid(-1, os.WNOHANG if status is not None else 0)
        except ChildProcessError:
            break
        if pid == 0:  # a descendant forked while the last pass killed: another pass
            _kill_descendants()
            time.sleep(0.01)
        elif pid == command:
            status = waited
            _kill_descendants()
    status = status or 0
    if os.WIFSIGNALED(status):
        killed_by = os.WTERMSIG(status)
        signal.signal(killed_by, signal.SIG_DFL)
        os.kill(os.getpid(), killed_by)
        os._exit(128 + killed_by)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
