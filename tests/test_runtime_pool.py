"""The runtime pool (acp/runtime_pool.py `RuntimePool`) serving many (agent, workspace) runtimes
against real fake-agent processes: many workspaces at once, one runtime per command line, the
agent cap (the least recently used idle runtime stopped; with none idle a `get` waits and says so
once, and the bot says it in the conversation), a lock per key (a slow start holds up nobody
else), idle reaping per runtime, and one runtime's crash leaving the others alone."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from acp import AcpClient, AcpSession, PendingPermission, RuntimeSpec
from acp.runtime_pool import RuntimePool, pool_key
from bot.access import AccessPolicy
from bot.app import BotApp
from bot.store import open_store
from surfaces.base import ConversationKey
from tests.acp_helpers import agent_spec, collect_turn, prepare_client, texts
from tests.conftest import FakeAgent, pid_alive, script
from tests.engine_helpers import (
    CHAT,
    SURFACE,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

WAIT = 30  # seconds: an upper bound on every test here, never a measurement
HELD = script({"permission": {}})  # a turn that runs until its permission is answered


def agent(tmp_path: Path, name: str) -> tuple[FakeAgent, Path]:
    """A fake agent of its own (its own log and state) and a workspace of its own."""
    root = tmp_path / name
    (root / "state").mkdir(parents=True)
    (root / "ws").mkdir()
    return FakeAgent(log_path=root / "log.jsonl", state_dir=root / "state"), root / "ws"


def spec_of(tmp_path: Path, name: str, *options: str) -> tuple[FakeAgent, RuntimeSpec]:
    fake, workspace = agent(tmp_path, name)
    return fake, agent_spec(fake, workspace, *options)


@asynccontextmanager
async def pool_of(**options: Any) -> AsyncIterator[tuple[RuntimePool[AcpClient], Any]]:
    async with anyio.create_task_group() as tg:
        pool: RuntimePool[AcpClient] = RuntimePool(
            tg, prepare_client, is_idle=lambda client: not client.busy, **options
        )
        try:
            yield pool, tg
        finally:
            await pool.aclose()
            tg.cancel_scope.cancel()


class HeldTurn:
    """A turn on `session` that waits on its permission until `release()`."""

    def __init__(self, session: AcpSession) -> None:
        self.session = session
        self.asked = anyio.Event()
        self._go = anyio.Event()
        self.done = anyio.Event()
        self.texts: list[str] = []

    async def _answer(self, _pending: PendingPermission) -> str:
        self.asked.set()
        await self._go.wait()
        return "allow_once"

    async def run(self) -> None:
        self.texts = texts(await collect_turn(self.session, HELD, self._answer))
        self.done.set()

    def release(self) -> None:
        self._go.set()


async def held_turn(tg: anyio.abc.TaskGroup, session: AcpSession) -> HeldTurn:
    turn = HeldTurn(session)
    tg.start_soon(turn.run)
    await turn.asked.wait()
    return turn


async def until(condition: Callable[[], object]) -> None:
    while not condition():
        await anyio.sleep(0.02)


# ---- the bot on two projects, one agent allowed -------------------------------------------------
BOB_CHAT = ConversationKey(SURFACE, "chat-2")
WAIT_LINE = "The agent is busy in another conversation; your message waits for it."


def shown_in(surface: ScriptedSurface, key: ConversationKey) -> str:
    messages: dict[str, str] = {}
    for call in surface.ops("send", "edit"):
        if call.key == key:
            messages[call.message] = call.text
    return "\n".join(messages.values())


@asynccontextmanager
async def two_projects(
    tmp_path: Path,
) -> AsyncIterator[tuple[BotApp, ScriptedSurface, FakeAgent, FakeAgent]]:
    """A serving bot with projects `main` (the default) and `other`, each its own scripted
    agent in its own workspace, and SWITCHBOARD_MAX_AGENTS=1."""
    main, main_ws = agent(tmp_path, "main")
    other, other_ws = agent(tmp_path, "other")
    projects = {
        name: {"workspace": str(ws), "agent": "kiro", "agent_command": fake.command()}
        for name, fake, ws in (("main", main, main_ws), ("other", other, other_ws))
    }
    settings = engine_settings(
        tmp_path, main, max_agents=1, projects=projects, default_project="main"
    )
    surface = ScriptedSurface()
    with anyio.fail_after(WAIT):
        async with running_app(settings, surface) as app:
            yield app, surface, main, other


# ---- many runtimes ------------------------------------------------------------------------------
async def test_many_workspaces_are_served_at_once_each_by_its_own_agent(tmp_path: Path) -> None:
    agents = [spec_of(tmp_path, f"p{i}") for i in range(5)]
    replies: dict[int, list[str]] = {}
    with anyio.fail_after(WAIT):
        async with pool_of() as (pool, _tg):

            async def converse(i: int) -> None:
                client = await pool.get(agents[i][1])
                session = await client.open_session()
                replies[i] = texts(await collect_turn(session, f"hello {i}"))

            async with anyio.create_task_group() as tg:
                for i in range(len(agents)):
                    tg.start_soon(converse, i)
            assert pool.live == 5
            pids = {runtime.pid for runtime in pool.runtimes()}
            assert len(pids) == 5
    for i, (fake, spec) in enumerate(agents):
        assert "".join(replies[i]) == f"Echo: hello {i}"
        assert fake.spawns() == 1
        (new,) = fake.frames_in("session/new")
        assert new["params"]["cwd"] == str(spec.workspace)


async def test_one_runtime_per_command_line_and_workspace(tmp_path: Path) -> None:
    """Two agents of one preset started by different commands are two runtimes, in one folder
    as in two; the same command in the same folder (spelled another way) is one."""
    fake, workspace = agent(tmp_path, "a")
    plain = agent_spec(fake, workspace)
    other_command = agent_spec(fake, workspace, "--models", "m1,m2")
    link = tmp_path / "link"
    link.symlink_to(workspace)
    same_via_link = agent_spec(fake, link)
    assert pool_key(plain) != pool_key(other_command)
    assert pool_key(plain) == pool_key(same_via_link)
    with anyio.fail_after(WAIT):
        async with pool_of() as (pool, _tg):
            first = await pool.get(plain)
            second = await pool.get(other_command)
            assert first is not second
            assert await pool.get(same_via_link) is first
            assert pool.live == 2
    assert fake.spawns() == 2


# ---- the cap ------------------------------------------------------------------------------------
async def test_at_the_cap_the_least_recently_used_idle_agent_is_stopped_and_resumes_later(
    tmp_path: Path,
) -> None:
    (fake_a, a), (fake_b, b), (fake_c, c) = (spec_of(tmp_path, n) for n in "abc")
    stopped: list[AcpClient] = []
    with anyio.fail_after(WAIT):
        async with pool_of(max_live=2, on_stop=stopped.append) as (pool, _tg):
            client_a = await pool.get(a)
            client_b = await pool.get(b)
            session_b = await client_b.open_session()
            await collect_turn(session_b, "remember me")
            assert await pool.get(a) is client_a  # a is used again: b is now the older one
            client_c = await pool.get(c)
            assert stopped == [client_b]
            assert not client_b.runtime.alive and not pid_alive(client_b.runtime.pid)
            assert client_a.runtime.alive and client_c.runtime.alive
            assert pool.live == 2
            # b's conversation comes back: a new agent (a is now the least recently used),
            # and its session resumed with session/load
            again = await pool.get(b)
            assert again is not client_b
            assert stopped == [client_b, client_a]
            resumed = await again.load_session(session_b.session_id)
            assert "".join(texts(await collect_turn(resumed, "again"))) == "Echo: again"
    assert fake_b.spawns() == 2 and fake_a.spawns() == 1 and fake_c.spawns() == 1
    (loaded,) = fake_b.frames_in("session/load")
    assert loaded["params"]["sessionId"] == session_b.session_id


async def test_at_the_cap_with_every_agent_busy_gets_wait_each_says_so_once_and_go_on(
    tmp_path: Path,
) -> None:
    """Two conversations want b while a busy a fills the cap: the one starting b and the one
    queued behind it are each told once, and both get b once a's turn ends."""
    (fake_a, a), (fake_b, b) = (spec_of(tmp_path, n) for n in "ab")
    told: list[str] = []
    got: list[AcpClient] = []
    with anyio.fail_after(WAIT):
        async with pool_of(max_live=1) as (pool, tg):
            client_a = await pool.get(a)
            turn = await held_turn(tg, await client_a.open_session())

            async def wanted(who: str) -> None:
                async def say() -> None:
                    told.append(who)

                got.append(await pool.get(b, on_wait=say))

            tg.start_soon(wanted, "first")
            tg.start_soon(wanted, "second")
            await until(lambda: len(told) == 2)
            await anyio.lowlevel.checkpoint()  # back to waiting: it must not spawn b yet
            assert got == [] and fake_b.spawns() == 0
            assert client_a.runtime.alive and pool.live == 1
            turn.release()
            await turn.done.wait()
            await until(lambda: len(got) == 2)
            assert sorted(told) == ["first", "second"]  # each once, however long it waited
            assert turn.texts == ["permission:allow_once"]
            assert not client_a.runtime.alive  # a, idle once its turn ended, made room
            assert got[0] is got[1] and got[0].runtime.alive and pool.live == 1
    assert fake_a.spawns() == 1 and fake_b.spawns() == 1


async def test_the_bot_says_the_wait_line_in_the_waiting_conversation_and_then_answers(
    tmp_path: Path,
) -> None:
    """Two projects, one agent allowed: while bob's turn runs in `other`, alice's message in
    `main` waits; the line is said once in her conversation, and her answer follows once bob's
    turn ends."""
    async with two_projects(tmp_path) as (app, surface, main, other):
        await app.store.put_place(BOB_CHAT, "other")
        bobs = surface.post(surface.message("bob", script({"sleep": 60}), key=BOB_CHAT))
        await wait_for(lambda: other.frames_in("session/prompt"), "bob's turn to start")
        alices = surface.post(surface.message("alice", "hello"))
        await wait_for(lambda: WAIT_LINE in shown_in(surface, CHAT), "the wait line")
        assert main.spawns() == 0
        assert WAIT_LINE not in shown_in(surface, BOB_CHAT)
        await finished(surface.post(surface.message("bob", "/stop", key=BOB_CHAT)), bobs)
        await finished(alices)
        shown = shown_in(surface, CHAT)
    assert shown.count(WAIT_LINE) == 1
    assert "Echo: hello" in shown
    assert other.spawns() == 1 and main.spawns() == 1


async def test_the_wait_line_names_the_cap(tmp_path: Path, fake_agent: FakeAgent) -> None:
    settings = engine_settings(tmp_path, fake_agent)
    assert settings.max_agents == 8  # the default
    store = open_store(settings.state)
    said: list[str] = []
    try:
        app = BotApp(settings, store, AccessPolicy.from_settings(settings))

        async def say(text: str) -> None:
            said.append(text)

        hook = app._wait_line(say)
        assert hook is not None
        await hook()
    finally:
        await store.aclose()
    assert said == ["All 8 agents are busy; your message waits for one to finish."]


# ---- a lock per key -----------------------------------------------------------------------------
async def test_a_slow_start_of_one_agent_does_not_hold_up_another(tmp_path: Path) -> None:
    release = tmp_path / "release-a"
    fake_a, a = spec_of(tmp_path, "a", "--init-wait-file", str(release))
    fake_b, b = spec_of(tmp_path, "b")
    order: list[str] = []
    with anyio.fail_after(WAIT):
        async with pool_of() as (pool, tg):

            async def get(name: str, spec: RuntimeSpec) -> None:
                await pool.get(spec)
                order.append(name)

            tg.start_soon(get, "a", a)
            await until(lambda: fake_a.frames_in("initialize"))  # a is starting, held
            await get("b", b)
            assert order == ["b"]
            release.touch()
            await until(lambda: len(order) == 2)
    assert order == ["b", "a"]
    assert fake_a.spawns() == 1 and fake_b.spawns() == 1


async def test_concurrent_gets_for_one_agent_start_it_once(tmp_path: Path) -> None:
    fake, spec = spec_of(tmp_path, "a")
    got: list[AcpClient] = []
    with anyio.fail_after(WAIT):
        async with pool_of() as (pool, _tg):
            async with anyio.create_task_group() as tg:
                for _ in range(4):

                    async def get() -> None:
                        got.append(await pool.get(spec))

                    tg.start_soon(get)
    assert len({id(client) for client in got}) == 1
    assert fake.spawns() == 1


# ---- idle reaping -------------------------------------------------------------------------------
async def test_idle_agents_are_reaped_each_on_its_own_and_a_busy_one_is_kept(
    tmp_path: Path,
) -> None:
    (_fa, a), (_fb, b) = (spec_of(tmp_path, n) for n in "ab")
    stopped: list[AcpClient] = []
    with anyio.fail_after(WAIT):
        async with pool_of(on_stop=stopped.append) as (pool, tg):
            # b first: unused for longer than a, so a pass that finds a idle long enough
            # looks at b before it (and would stop it, were its turn not counted as use)
            client_b = await pool.get(b)
            client_a = await pool.get(a)
            turn = await held_turn(tg, await client_b.open_session())
            tg.start_soon(pool.reap_idle, 0.2)
            await until(lambda: not client_a.runtime.alive)
            assert stopped == [client_a]
            assert client_b.runtime.alive  # its turn runs: in use, however long
            turn.release()
            await turn.done.wait()
            await until(lambda: not client_b.runtime.alive)
            assert stopped == [client_a, client_b]
            # counted until its shutdown ladder is over, a moment after the process is gone
            await until(lambda: pool.live == 0)
            fresh = await pool.get(a)  # the next message starts it again
            assert fresh is not client_a and fresh.runtime.alive


# ---- fault isolation ----------------------------------------------------------------------------
async def test_one_agent_crashing_leaves_the_others_serving(tmp_path: Path) -> None:
    (fake_a, a), (fake_b, b) = (spec_of(tmp_path, n) for n in "ab")
    with anyio.fail_after(WAIT):
        async with pool_of(max_live=2) as (pool, _tg):
            client_a = await pool.get(a)
            client_b = await pool.get(b)
            session_b = await client_b.open_session()
            os.kill(client_a.runtime.pid, signal.SIGKILL)
            await until(lambda: not client_a.runtime.alive)
            assert "".join(texts(await collect_turn(session_b, "still here"))) == (
                "Echo: still here"
            )
            again = await pool.get(a)  # the dead one is replaced, within the cap
            assert again is not client_a and again.runtime.alive
            assert await pool.get(b) is client_b
            assert pool.live == 2
    assert fake_a.spawns() == 2 and fake_b.spawns() == 1


async def test_the_bot_drops_the_sessions_of_an_agent_the_pool_stopped(tmp_path: Path) -> None:
    """Stopped for another project's room: the conversation lets go of its session objects, and
    its next message resumes the same session on a new agent with session/load."""
    async with two_projects(tmp_path) as (app, surface, main, other):
        await finished(surface.post(surface.message("alice", "first")))
        session = app.runners[CHAT].sessions.current
        assert session is not None
        await app.store.put_place(BOB_CHAT, "other")
        await finished(surface.post(surface.message("bob", "hi", key=BOB_CHAT)))
        assert not session.client.runtime.alive  # alice's agent was idle: it made room
        assert app.runners[CHAT].sessions.current is None
        await finished(surface.post(surface.message("alice", "second")))
        shown = shown_in(surface, CHAT)
    assert "Echo: second" in shown and "Echo: hi" in shown_in(surface, BOB_CHAT)
    assert "could not be restored" not in shown
    (loaded,) = main.frames_in("session/load")
    assert loaded["params"]["sessionId"] == session.session_id
    assert main.spawns() == 2 and other.spawns() == 1


async def test_a_conversation_whose_turn_runs_or_waits_keeps_its_agent_at_the_cap(
    tmp_path: Path,
) -> None:
    """Between taking its agent and prompting it a turn looks idle to the agent: the runner's
    hold is what keeps the pool from stopping that agent for another's room."""
    async with two_projects(tmp_path) as (app, surface, _main, _other):
        await finished(surface.post(surface.message("alice", "first")))
        session = app.runners[CHAT].sessions.current
        assert session is not None and not session.client.busy
        release = app.hold_agent(app.plans.default)  # as ChatRunner._work holds it
        await app.store.put_place(BOB_CHAT, "other")
        bobs = surface.post(surface.message("bob", "hi", key=BOB_CHAT))
        await wait_for(lambda: WAIT_LINE in shown_in(surface, BOB_CHAT), "the wait line")
        assert session.client.runtime.alive
        release()
        await finished(bobs)
        assert not session.client.runtime.alive
    assert "Echo: hi" in shown_in(surface, BOB_CHAT)
