"""Several replicas of `switchboard run` on one Redis, for the failover suites (issue 16).

    async with cluster(tmp_path, "telegram", replicas=3) as c:
        replica = await c.post_update(c.api.dm(ALICE, "hello"))     # round-robin, as a balancer
        await c.wait_text(ALICE.id, "Echo: hello")
        c.kill(replica)                                             # SIGKILL
        c.stop_redis(); c.start_redis()                             # same port

What runs, all on 127.0.0.1 at free ports, all of it stopped at the end (also when a test fails):
a `redis-server` of its own (`tests.store_backends.RedisProcess`, its data in an append-only
file, so a restart keeps it as a deployed Redis would), the fake Bot API
(tests/fakes/telegram_api.py) or the fake Slack Web API (tests/fakes/slack_api.py), and N
replicas of `python -m bot run`, each a subprocess in its own session with `SWITCHBOARD_STATE` on
that Redis, its own `SWITCHBOARD_REPLICA_ID` (`r0`, `r1`, ...), a short `SWITCHBOARD_LEASE_TTL`,
and its own inbound port: Telegram in webhook mode (our `post_update` plays Telegram and the load
balancer, with the secret token header), Slack in HTTP mode (`post_event` / `post_action`, signed
as Slack signs them, with `X-Slack-Retry-Num` on request).

Every replica shares one workspace and one agent-state directory (the scripted agent's sessions,
so another replica can `session/load` them), as the README asks of a deployment; each replica's
agents log to their own file (`Replica.agent`), which is how a test tells which replica served a
prompt and in which agent session. Each replica's own output goes to `replica-<id>.log`, whose
tail a failed wait prints."""

from __future__ import annotations

import contextlib
import itertools
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp
import anyio
import redis

from bot.store.redis_connection import PREFIX as REDIS_PREFIX
from surfaces.telegram.webhook import SECRET_HEADER
from tests.conftest import FAST_ENV, ROOT, FakeAgent, pid_alive, script
from tests.fakes.slack_api import SIGNING_SECRET, FakeSlack, SignedPoster
from tests.fakes.telegram_api import FakeBotApi, User
from tests.harness.process import (
    START_TIMEOUT,
    clean_environ,
    free_port,
    kill_pids,
    kill_run,
    port_open,
    spawn_run,
    stop_run,
)
from tests.harness.slack import slack_env
from tests.harness.telegram import telegram_env, webhook_env, webhook_set
from tests.store_backends import CLUSTER_KEY, RedisProcess

Surface = Literal["telegram", "slack"]
WEBHOOK_SECRET = "failover-webhook-secret"
SLACK_EVENTS_PATH = "/slack/events"
STOP_TIMEOUT = 10.0


class ClusterTimeout(AssertionError):
    """A bounded wait ran out; the message names what was awaited and shows the replicas' logs."""

    def __init__(self, what: str, timeout: float, logs: str) -> None:
        self.what = what
        self.timeout = timeout
        self.logs = logs
        super().__init__(f"timed out after {timeout:g} s waiting for {what}\n{logs}")


@dataclass
class Replica:
    """One `switchboard run` process."""

    name: str  # its SWITCHBOARD_REPLICA_ID
    port: int  # where it receives: the webhook (Telegram) or HTTP mode (Slack)
    agent: FakeAgent  # what its agents logged
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    killed: bool = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def url(self) -> str:
        path = "/telegram" if "SWITCHBOARD_TELEGRAM__TOKEN" in self.env else SLACK_EVENTS_PATH
        return f"http://127.0.0.1:{self.port}{path}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(line[:400] for line in text.splitlines()[-lines:])


@dataclass
class Prompt:
    """One `session/prompt` an agent received."""

    replica: Replica
    session_id: str
    text: str
    at: float  # the agent's clock (epoch seconds), to order prompts across replicas


@dataclass
class Cluster:
    root: Path
    surface: Surface
    redis: RedisProcess
    workspace: Path
    agent_state: Path
    replicas: list[Replica] = field(default_factory=list)
    api: FakeBotApi = field(default_factory=FakeBotApi)  # Telegram's side
    slack: FakeSlack = field(default_factory=FakeSlack)  # Slack's side
    _turn: itertools.count[int] = field(default_factory=itertools.count)
    _http: aiohttp.ClientSession | None = None
    _posters: dict[str, SignedPoster] = field(default_factory=dict)

    # ---- the load balancer -------------------------------------------------------------------
    def live(self) -> list[Replica]:
        return [replica for replica in self.replicas if replica.alive]

    def next_replica(self) -> Replica:
        """Round-robin over the live replicas, as a load balancer that checks health would."""
        live = self.live()
        assert live, "no replica is alive"
        return live[next(self._turn) % len(live)]

    def other_than(self, replica: Replica) -> Replica:
        return next(r for r in self.live() if r is not replica)

    async def post_update(self, update: dict[str, Any], to: Replica | None = None) -> Replica:
        """Telegram posts `update` (made by the fake Bot API's builders, taken off its queue) to
        one replica's webhook; returns that replica. Fails unless it answered 200."""
        with contextlib.suppress(ValueError):
            self.api.take_update(update)  # delivered by webhook, not by getUpdates
        replica = to or self.next_replica()
        if self._http is None:
            self._http = aiohttp.ClientSession()
        headers = {"Content-Type": "application/json", SECRET_HEADER: WEBHOOK_SECRET}
        async with self._http.post(replica.url, data=json.dumps(update), headers=headers) as reply:
            await reply.read()
            assert reply.status == 200, f"replica {replica.name} answered {reply.status}"
        return replica

    def _poster(self, replica: Replica) -> SignedPoster:
        if replica.name not in self._posters:
            self._posters[replica.name] = SignedPoster(replica.url, SIGNING_SECRET)
        return self._posters[replica.name]

    async def post_event(
        self, body: dict[str, Any], to: Replica | None = None, *, retry_num: int | None = None
    ) -> Replica:
        """Slack posts an Events API body (signed; a redelivery with `retry_num`)."""
        replica = to or self.next_replica()
        status = await self._poster(replica).event(body, retry_num=retry_num)
        assert status == 200, f"replica {replica.name} answered {status}"
        return replica

    async def post_action(self, payload: dict[str, Any], to: Replica | None = None) -> Replica:
        """Slack posts an interactivity payload (a button press), signed."""
        replica = to or self.next_replica()
        status = await self._poster(replica).action(payload)
        assert status == 200, f"replica {replica.name} answered {status}"
        return replica

    # ---- faults ------------------------------------------------------------------------------
    def kill(self, replica: Replica) -> None:
        """SIGKILL: no shutdown, no goodbyes; its agents lose their stdin and go."""
        assert replica.proc is not None
        replica.killed = True
        kill_run(replica.proc, STOP_TIMEOUT)

    async def stop(self, replica: Replica, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM, as an orchestrator stops a replica; its exit status, or a `ClusterTimeout`
        (and then SIGKILL) when it did not exit within `timeout` seconds."""
        assert replica.proc is not None
        code = await stop_run(replica.proc, timeout)
        if code is None:
            replica.killed = True
            what = f"replica {replica.name} to exit on SIGTERM"
            raise ClusterTimeout(what, timeout, self.logs())
        return code

    def stop_redis(self) -> None:
        self.redis.stop()

    def start_redis(self) -> None:
        self.redis.start()

    # ---- what happened -------------------------------------------------------------------------
    def prompts(self) -> list[Prompt]:
        """Every prompt any replica's agents received, in the order the agents read them."""
        found = []
        for replica in self.replicas:
            for record in replica.agent.records():
                frame = record.get("frame") or {}
                if record.get("dir") != "in" or frame.get("method") != "session/prompt":
                    continue
                params = frame.get("params") or {}
                text = "\n".join(b.get("text", "") for b in params.get("prompt") or [])
                found.append(Prompt(replica, str(params.get("sessionId")), text, record["t"]))
        return sorted(found, key=lambda prompt: prompt.at)

    def prompts_containing(self, text: str) -> list[Prompt]:
        return [prompt for prompt in self.prompts() if text in prompt.text]

    def loads(self, replica: Replica) -> list[str]:
        """The session ids `replica`'s agents were asked to `session/load`."""
        return [f["params"]["sessionId"] for f in replica.agent.frames_in("session/load")]

    def undelivered(self) -> int:
        """Replies the delivery ledger on Redis still holds (0 once every reply is delivered)."""
        client = redis.Redis.from_url(self.redis.url)
        try:
            return int(client.hlen(f"{REDIS_PREFIX}ledger"))
        finally:
            client.close()

    def chat_texts(self, chat_id: int) -> list[str]:
        """The bot's Telegram messages in a chat as people see them now, in order."""
        return [message.text for message in self.api.chat_messages(chat_id)]

    def slack_texts(self, channel: str, thread_ts: str = "") -> list[str]:
        """The bot's Slack replies in a DM or thread as people see them now (no approvals)."""
        return [message.visible for message in self.slack.replies(channel, thread_ts)]

    def slack_streaming(self, channel: str) -> bool:
        return any(message.channel == channel for message in self.slack.streaming_now())

    def logs(self) -> str:
        return "\n".join(
            f"--- replica {r.name} ({'alive' if r.alive else 'gone'}) ---\n{r.log_tail()}"
            for r in self.replicas
        )

    async def wait_for(
        self, predicate: Callable[[], object], what: str, timeout: float = 20.0
    ) -> None:
        """Poll until `predicate()` is true; fail naming `what`, with the replicas' logs."""
        with anyio.move_on_after(timeout):
            while not predicate():
                await anyio.sleep(0.05)
            return
        raise ClusterTimeout(what, timeout, self.logs())

    async def wait_text(self, chat_id: int, text: str, timeout: float = 20.0) -> None:
        """Until one of the bot's messages in a Telegram chat shows `text`."""
        await self.wait_for(
            lambda: any(text in shown for shown in self.chat_texts(chat_id)),
            f"{text!r} in Telegram chat {chat_id} (shown: {self.chat_texts(chat_id)!r})",
            timeout,
        )

    async def wait_slack_text(
        self, channel: str, text: str, thread_ts: str = "", timeout: float = 20.0
    ) -> None:
        """Until one of the bot's Slack replies there shows `text` and its stream has stopped."""

        def shown() -> bool:
            texts = self.slack_texts(channel, thread_ts)
            return any(text in t for t in texts) and not self.slack_streaming(channel)

        await self.wait_for(
            shown,
            f"{text!r} in Slack {channel}/{thread_ts} (shown: "
            f"{self.slack_texts(channel, thread_ts)!r})",
            timeout,
        )

    async def wait_prompt(self, text: str, timeout: float = 20.0) -> Prompt:
        """Until an agent of some replica received a prompt containing `text`; returns it."""
        await self.wait_for(lambda: self.prompts_containing(text), f"the prompt {text!r}", timeout)
        return self.prompts_containing(text)[0]

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start_replicas(
        self, count: int, env: dict[str, str], agent_options: Sequence[str]
    ) -> None:
        for index in range(count):
            name = f"r{index}"
            agent = FakeAgent(self.root / f"agent-{name}.jsonl", self.agent_state)
            port = free_port()
            replica_env = env | {
                "SWITCHBOARD_REPLICA_ID": name,
                "SWITCHBOARD_AGENT_COMMAND": agent.command(*agent_options),
            }
            if self.surface == "telegram":
                replica_env |= webhook_env(port, WEBHOOK_SECRET)
            else:
                replica_env |= {"SWITCHBOARD_SLACK__PORT": str(port)}
            replica = Replica(name, port, agent, self.root / f"replica-{name}.log", replica_env)
            self.replicas.append(replica)
            self._spawn(replica)
        for replica in self.replicas:
            await self._wait_receiving(replica)

    def _spawn(self, replica: Replica) -> None:
        replica.proc = spawn_run(replica.env, self.workspace, replica.log_path)

    async def _wait_receiving(self, replica: Replica) -> None:
        def receiving() -> bool:
            assert replica.alive, f"replica {replica.name} exited:\n{replica.log_tail(30)}"
            if self.surface == "telegram" and not webhook_set(self.api, replica.url):
                return False
            return port_open(replica.port)

        await self.wait_for(receiving, f"replica {replica.name} to receive", START_TIMEOUT)

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for replica in self.replicas:
                if replica.alive and replica.proc is not None:
                    replica.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT  # one bound for them all
            for replica in self.replicas:
                if replica.proc is None:
                    continue
                left = max(0.1, deadline - time.monotonic())
                try:
                    await anyio.to_thread.run_sync(replica.proc.wait, left)
                except subprocess.TimeoutExpired:
                    kill_run(replica.proc, STOP_TIMEOUT)
            for replica in self.replicas:  # agents of a killed replica that outlived it
                kill_pids([pid for pid in replica.agent.pids() if pid_alive(pid)])
            for poster in self._posters.values():
                await poster.aclose()
            if self._http is not None:
                await self._http.close()
            self.redis.stop()


def replica_env(
    cluster: Cluster, *, users: Sequence[str], approvers: Sequence[str], lease_ttl: float
) -> dict[str, str]:
    env = clean_environ("SLACK_", "PYTHON")
    env |= FAST_ENV | {
        "PYTHONPATH": str(ROOT),
        "SWITCHBOARD_STATE": cluster.redis.url,
        "SWITCHBOARD_CLUSTER_KEY": CLUSTER_KEY,
        "SWITCHBOARD_LEASE_TTL": f"{lease_ttl:g}",
        "SWITCHBOARD_WORKSPACE": str(cluster.workspace),
        "SWITCHBOARD_LOG_LEVEL": "info",
        "SWITCHBOARD_AGENT": "kiro",
    }
    if cluster.surface == "telegram":
        env |= telegram_env(cluster.api, *users)
        env["SWITCHBOARD_TELEGRAM__APPROVERS"] = ",".join(approvers)
    else:
        env |= slack_env(cluster.slack, "http", *users)  # each replica's port: start_replicas
        env["SWITCHBOARD_SLACK__APPROVERS"] = ",".join(approvers)
    return env


@asynccontextmanager
async def cluster(
    root: Path,
    surface: Surface,
    *,
    replicas: int = 3,
    users: Sequence[User | str] = (),
    approvers: Sequence[User | str] = (),
    lease_ttl: float = 2.0,
    agent_options: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> AsyncIterator[Cluster]:
    """A running cluster of `replicas` on `surface`; everything stopped on the way out."""
    workspace = root / "workspace"
    agent_state = root / "agent-state"
    for folder in (workspace, agent_state):
        folder.mkdir(exist_ok=True)
    redis_dir = root / "redis"
    redis_dir.mkdir(exist_ok=True)
    redis_server = RedisProcess(redis_dir, persistent=True)  # stop_redis / start_redis keep data
    made = Cluster(root, surface, redis_server, workspace.resolve(), agent_state)
    try:
        made.start_redis()
        await (made.api.start() if surface == "telegram" else made.slack.start())
        ids = [str(u.id) if isinstance(u, User) else u for u in users]
        approver_ids = [str(u.id) if isinstance(u, User) else u for u in approvers]
        base = replica_env(made, users=ids, approvers=approver_ids, lease_ttl=lease_ttl)
        await made.start_replicas(replicas, base | (env or {}), agent_options)
        yield made
    finally:
        with anyio.CancelScope(shield=True):
            await made.close()
            await (made.api.close() if surface == "telegram" else made.slack.close())


def slow(label: str, parts: int = 12, gap: float = 0.5) -> str:
    """A scripted reply streamed for parts x gap seconds, ending in `<label> done`."""
    steps: list[dict[str, object]] = []
    for n in range(parts):
        steps += [{"chunk": f"{label}-{n} "}, {"sleep": gap}]
    return script(*steps, {"chunk": f"{label} done"})
