"""`switchboard run` as an attacker's target (issue 21): the real process, the fake Telegram Bot
API, and the scripted agent armed with its own shell tool.

    async with attack_run(tmp_path, WEBHOOK_SQLITE) as run:
        await run.say(script({"shell": run.attacker("environ", run.loot_path("env"))}))
        await run.wait_text("DONE")                      # or run.wait_for(predicate, what)
        loot = run.loot("env")

What runs, all on 127.0.0.1 and stopped at the end: the fake Bot API (tests/fakes/telegram_api.py),
with a Telegram token of the real shape; for a Redis deployment a `redis-server` of its own with
a password (`--requirepass`); and `python -m bot run` at debug level with the DEFAULT isolation
settings (no SWITCHBOARD_AGENT_SANDBOX, no SWITCHBOARD_AGENT_USER: what `auto` gives is what is
tested), Telegram by webhook or by long polling. Every credential Switchboard holds is set: the
bot token (in the environment and in the SWITCHBOARD_CONFIG file, which also holds the metrics
token), the webhook secret, the Redis password (in SWITCHBOARD_STATE's URL), the cluster key
(SWITCHBOARD_CLUSTER_KEY, with Redis), the dashboard's token digest.

The layout keeps Switchboard's files away from the agent's workspace, as a deployment would:
`state/state.db`, `config/switchboard.json`, `switchboard.log` (its stderr) beside `workspace/`.
The agent (a copy of tests/fakes/fake_agent.py and tests/fakes/attacker.py) lives in
`workspace/.attack/`, the one place any sandbox must show it, and writes its log and what it
finds there (`loot_path`), where the test reads them."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tests.conftest import FAST_ENV, ROOT
from tests.fakes.telegram_api import FakeBotApi, People, User
from tests.harness.process import (
    START_TIMEOUT,
    clean_environ,
    free_port,
    kill_pids,
    port_open,
    spawn_run,
    stop_run,
)
from tests.harness.telegram import telegram_env, webhook_env, webhook_set, webhook_url
from tests.store_backends import RedisProcess

ALICE = People().alice  # the requester: an allowed user
BOB = People().bob  # another allowed user, not an approver

TELEGRAM_TOKEN = "7054311198:AAF3kQ9x_Zr2mV8bLw5nT1cYpHd6sJ4uEgQ"  # the real shape
WEBHOOK_SECRET = "attack-hook-secret_9d41c7a2e8"
REDIS_PASSWORD = "redis-pass-6f0b2c9e47d1a3"
CLUSTER_KEY = "cluster-key-8e3f1a5c0b7d92e4f6a1c3e5b7d9f0a2c4"  # 32+ characters, as required
METRICS_TOKEN = "metrics-token-2b8d4f6a1c3e5"  # only in the config file
DASHBOARD_TOKEN = "dashboard-token-5a7c9e1b3d"
DASHBOARD_DIGEST = hashlib.sha256(DASHBOARD_TOKEN.encode()).hexdigest()
REPLICA = "r0"
NOT_SHOWN = frozenset({"getMe", "getUpdates", "setWebhook", "deleteWebhook", "getWebhookInfo"})
STOP_TIMEOUT = 15.0
FAKES = ROOT / "tests" / "fakes"
# The agent and its attacker run on this interpreter's real file (stdlib only): a directory the
# agent's own command lives in, which any sandbox shows it.
AGENT_PYTHON = os.path.realpath(sys.executable)


@dataclass(frozen=True)
class Deployment:
    receiving: str  # "webhook" | "polling"
    store: str  # "sqlite" | "redis"

    def __str__(self) -> str:
        return f"{self.receiving}-{self.store}"


WEBHOOK_SQLITE = Deployment("webhook", "sqlite")
WEBHOOK_REDIS = Deployment("webhook", "redis")
POLLING_SQLITE = Deployment("polling", "sqlite")
POLLING_REDIS = Deployment("polling", "redis")


class AttackTimeout(AssertionError):
    """A bounded wait ran out: the message names what was awaited and shows Switchboard's log."""

    def __init__(self, what: str, timeout: float, log_tail: str) -> None:
        self.what = what
        self.timeout = timeout
        super().__init__(f"timed out after {timeout:g} s waiting for {what}\n{log_tail}")


@dataclass
class AttackRun:
    deployment: Deployment
    root: Path
    workspace: Path
    state_path: Path  # the SQLite file (also made for a Redis deployment: unused then)
    config_path: Path
    log_path: Path
    api: FakeBotApi
    env: dict[str, str]
    redis: RedisProcess | None = None
    proc: subprocess.Popen[bytes] | None = None
    webhook_url: str = ""
    _marks: dict[str, int] = field(default_factory=dict)
    _allowed: set[int] = field(default_factory=set)  # Switchboard's own cards Alice allowed

    # ---- what Switchboard holds ----------------------------------------------------------------
    def secrets(self) -> dict[str, str]:
        """Name -> value of every credential this deployment gave Switchboard."""
        held = {
            "the Telegram bot token": TELEGRAM_TOKEN,
            "the Telegram token's secret half": TELEGRAM_TOKEN.split(":", 1)[1],
            "the webhook secret": WEBHOOK_SECRET,
            "the metrics token": METRICS_TOKEN,
            "the dashboard token digest": DASHBOARD_DIGEST,
        }
        if self.redis is not None:
            held |= {"the Redis password": REDIS_PASSWORD, "the cluster key": CLUSTER_KEY}
        return held

    @property
    def state(self) -> str:
        return self.env["SWITCHBOARD_STATE"]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def status_kib(self, field_name: str) -> int:
        """A field of Switchboard's /proc/<pid>/status in KiB (VmHWM: its peak RSS so far)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
        raise AssertionError(f"no {field_name} in /proc/{self.pid}/status")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 25) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return "--- switchboard.log ---\n" + "\n".join(line[:500] for line in tail)

    # ---- the agent's side ----------------------------------------------------------------------
    @property
    def attack_dir(self) -> Path:
        return self.workspace / ".attack"

    def loot_path(self, name: str) -> str:
        return str(self.attack_dir / f"loot-{name}.json")

    def loot(self, name: str) -> dict[str, Any]:
        path = Path(self.loot_path(name))
        assert path.exists(), f"the agent's attacker wrote no {path.name}\n{self.log_tail()}"
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    def attacker(self, *args: str) -> str:
        """The shell command that runs tests/fakes/attacker.py (the agent's copy) with `args`."""
        return shlex.join([AGENT_PYTHON, str(self.attack_dir / "attacker.py"), *args])

    # ---- Telegram's side -----------------------------------------------------------------------
    async def say(self, text: str, user: User = ALICE) -> None:
        """`user` writes to the bot in their private chat (by webhook or for getUpdates)."""
        update = self.api.dm(user, text)
        if self.deployment.receiving == "webhook":
            self.api.take_update(update)
            status = await self.api.post_webhook(update, secret=WEBHOOK_SECRET)
            assert status == 200, f"the webhook answered {status}\n{self.log_tail()}"

    async def post_update(self, update: dict[str, Any]) -> int:
        """Deliver a (forged) update to the webhook with the right secret; the status."""
        assert self.deployment.receiving == "webhook"
        with contextlib.suppress(ValueError):
            self.api.take_update(update)
        return await self.api.post_webhook(update, secret=WEBHOOK_SECRET)

    def sent_text(self) -> str:
        """Every parameter of every call Switchboard made to the Bot API that a chat could show
        (messages, drafts, edits, captions, command menus, answers to presses), as one text;
        not the calls that configure the bot (setWebhook carries the webhook secret, by design)."""
        return "\n".join(
            json.dumps(call.params, ensure_ascii=False, default=str)
            for call in self.api.calls
            if call.method not in NOT_SHOWN
        )

    def chat_text(self, user: User = ALICE) -> str:
        return self.api.chat_text(user.id)

    async def wait_for(
        self, predicate: Callable[[], object], what: str, timeout: float = 30.0
    ) -> None:
        with anyio.move_on_after(timeout):
            while not predicate():
                await self._allow_unasked()
                assert self.proc is not None and self.proc.poll() is None, (
                    f"switchboard exited ({self.proc and self.proc.returncode}) while waiting "
                    f"for {what}\n{self.log_tail()}"
                )
                await anyio.sleep(0.05)
            return
        raise AttackTimeout(what, timeout, self.log_tail())

    async def _allow_unasked(self) -> None:
        """Alice allows each command or write Switchboard asks her about itself (the agent's
        terminal/create and fs/write_text_file with no request of its own): the attacks here
        are on what runs once a person allowed it; tests/test_gate_client_requests.py and
        tests/test_gate_surfaces.py test the gate itself."""
        for message in self.api.chat_messages(ALICE.id):
            rows = (message.reply_markup or {}).get("inline_keyboard") or []
            allow = [b for row in rows for b in row if b.get("text") == "Allow"]
            if not allow or "did not ask" not in message.text:
                continue
            if message.message_id in self._allowed:
                continue
            self._allowed.add(message.message_id)
            press = self.api.press(ALICE, message, str(allow[0]["callback_data"]))
            if self.deployment.receiving == "webhook":
                await self.post_update(press)

    async def wait_text(self, text: str, user: User = ALICE, timeout: float = 30.0) -> None:
        await self.wait_for(
            lambda: text in self.chat_text(user),
            f"{text!r} in {user.first_name}'s chat (shown: {self.chat_text(user)[-1500:]!r})",
            timeout,
        )

    # ---- the audit log -------------------------------------------------------------------------
    async def audit(self) -> list[dict[str, Any]]:
        """`switchboard audit --since 1h` on this deployment's store (its JSON lines)."""
        return await anyio.to_thread.run_sync(self._audit)

    def _audit(self) -> list[dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-m", "bot", "audit", "--since", "1h"],
            env=self.env,
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, f"switchboard audit failed: {done.stderr[-2000:]}"
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def base_env(run: AttackRun) -> dict[str, str]:
    env = clean_environ("PYTHON")
    agent = [
        AGENT_PYTHON,
        str(run.attack_dir / "fake_agent.py"),
        *("--dialect", "kiro", "--log", str(run.attack_dir / "agent-log.jsonl")),
        *("--state-dir", str(run.attack_dir / "agent-state")),
    ]
    # The suite's own pins of how agents run (e.g. SWITCHBOARD_AGENT_SANDBOX=off for tests that
    # are not about isolation) are not taken: the defaults are what is attacked.
    fast = {k: v for k, v in FAST_ENV.items() if not k.startswith("SWITCHBOARD_AGENT_")}
    env |= fast | {
        "PYTHONPATH": str(ROOT),
        "SWITCHBOARD_LOG_LEVEL": "debug",  # the worst case for what reaches a log
        "SWITCHBOARD_CONFIG": str(run.config_path),
        "SWITCHBOARD_WORKSPACE": str(run.workspace),
        "SWITCHBOARD_AGENT": "kiro",
        "SWITCHBOARD_AGENT_COMMAND": shlex.join(agent),
        "SWITCHBOARD_APPROVAL_TIMEOUT": "120",
        "SWITCHBOARD_REPLICA_ID": REPLICA,
        **telegram_env(run.api, ALICE, BOB),  # the fake API was made with TELEGRAM_TOKEN
        "SWITCHBOARD_TELEGRAM__WEBHOOK_SECRET": WEBHOOK_SECRET,
        "SWITCHBOARD_DASHBOARD__ENABLED": "true",
        "SWITCHBOARD_DASHBOARD__ALLOWED_USERS": "alice",
        "SWITCHBOARD_DASHBOARD__TOKENS": json.dumps({"alice": DASHBOARD_DIGEST}),
        "SWITCHBOARD_STATE": str(run.state_path),
    }
    if run.redis is not None:
        env["SWITCHBOARD_STATE"] = (
            f"redis://:{REDIS_PASSWORD}@127.0.0.1:{run.redis.port}/0"  # the password in the URL
        )
        env["SWITCHBOARD_CLUSTER_KEY"] = CLUSTER_KEY
    if run.deployment.receiving == "webhook":
        port = free_port()
        run.webhook_url = webhook_url(port)
        env |= webhook_env(port, WEBHOOK_SECRET)
    return env


def _layout(root: Path) -> tuple[Path, Path, Path]:
    workspace = (root / "workspace").resolve()
    state_dir = root / "state"
    config_dir = root / "config"
    for folder in (workspace, state_dir, config_dir):
        folder.mkdir()
    attack = workspace / ".attack"
    attack.mkdir()
    (attack / "agent-state").mkdir()
    for tool in ("fake_agent.py", "attacker.py"):
        shutil.copy(FAKES / tool, attack / tool)
    config = config_dir / "switchboard.json"
    config.write_text(
        json.dumps(
            {"telegram": {"token": TELEGRAM_TOKEN}, "http": {"metrics_token": METRICS_TOKEN}}
        )
    )
    return workspace, state_dir / "state.db", config


def our_agents(workspace: Path) -> list[int]:
    """Host pids of processes started from this run's copy of the agent (or its attacker):
    found by the unique path in their command line, never by a name."""
    needle = str(workspace / ".attack").encode()
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


async def _wait_receiving(run: AttackRun) -> None:
    def receiving() -> bool:
        if run.deployment.receiving == "polling":
            return bool(run.api.calls_to("getUpdates"))
        port = int(run.env["SWITCHBOARD_TELEGRAM__WEBHOOK_PORT"])
        return webhook_set(run.api, run.webhook_url) and port_open(port)

    await run.wait_for(receiving, "switchboard to receive updates", START_TIMEOUT)


async def _stop(run: AttackRun) -> None:
    if run.proc is not None:
        await stop_run(run.proc, STOP_TIMEOUT)
    kill_pids(our_agents(run.workspace))


@asynccontextmanager
async def attack_run(
    root: Path, deployment: Deployment, *, env: dict[str, str] | None = None
) -> AsyncIterator[AttackRun]:
    """`switchboard run` in `deployment`, receiving; everything stopped on the way out."""
    workspace, state_path, config = _layout(root)
    api = FakeBotApi(token=TELEGRAM_TOKEN)
    run = AttackRun(
        deployment, root, workspace, state_path, config, root / "switchboard.log", api, {}
    )
    try:
        if deployment.store == "redis":
            redis_dir = root / "redis"
            redis_dir.mkdir()
            run.redis = RedisProcess(
                redis_dir,
                args=["--requirepass", REDIS_PASSWORD],
                client_args={"password": REDIS_PASSWORD},
            )
            run.redis.start()
        await api.start()
        run.env = base_env(run) | (env or {})
        run.proc = spawn_run(run.env, run.root, run.log_path)
        await _wait_receiving(run)
        yield run
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(run)
            await api.close()
            if run.redis is not None:
                run.redis.stop()
