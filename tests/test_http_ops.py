"""The HTTP server of `switchboard run` (bot/http_server.py): /healthz, /readyz, /metrics (parsed
with Prometheus's own text parser after a scripted run on the fake agent), the metrics token,
surfaces' routes mounted, `off`, and a taken port as one sentence; /metrics and /readyz while a
real redis-server holding the state is paused (it listens but says nothing): both answer in
bounded time, /metrics with the last values it read, marked stale."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from bot.access import AccessPolicy
from bot.app import BotApp
from bot.http_server import HttpServerError
from bot.store import StateStore, StoreError, open_store
from config import ConfigError, Settings, load_settings
from surfaces.errors import RateLimited
from tests.conftest import FakeAgent, script
from tests.engine_helpers import ScriptedSurface, engine_settings, finished, wait_for
from tests.store_backends import RedisProcess

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

METRICS_TOKEN = "metrics-bearer-token-for-tests"


class UnwritableStore:
    """The real store, except that its write check fails (a full disk, a read-only file)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def check_writable(self) -> None:
        raise StoreError("/state/state.db", "attempt to write a readonly database")


@asynccontextmanager
async def serving(
    settings: Settings, *surfaces: ScriptedSurface, unwritable: bool = False
) -> AsyncIterator[BotApp]:
    """A BotApp serving `surfaces` and its HTTP server (as `switchboard run` does)."""
    store = open_store(settings.state)
    used: Any = UnwritableStore(store) if unwritable else store
    app = BotApp(settings, used, AccessPolicy.from_settings(settings))
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                await app.serve(surfaces, stop, http=True, task_status=task_status)

            await tg.start(serve)
            try:
                yield app
            finally:
                stop.set()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


def ops_settings(tmp_path: Path, fake_agent: FakeAgent, **overrides: Any) -> Settings:
    http = {"port": 0, **overrides.pop("http", {})}
    return engine_settings(tmp_path, fake_agent, http=http, **overrides)


async def get(app: BotApp, path: str, **headers: str) -> tuple[int, str]:
    assert app.http is not None and app.http.port
    async with (
        aiohttp.ClientSession() as client,
        client.get(f"http://127.0.0.1:{app.http.port}{path}", headers=headers) as response,
    ):
        return response.status, await response.text()


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of the exposition, by sample name, parsed by Prometheus's own parser."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return found


def total(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(
        value
        for have, value in found.get(name, [])
        if all(have.get(key) == want for key, want in labels.items())
    )


# ---- /healthz and /readyz ---------------------------------------------------------------------


async def test_healthz_and_readyz_answer_while_serving(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with serving(ops_settings(tmp_path, fake_agent), ScriptedSurface()) as app:
        assert await get(app, "/healthz") == (200, '{"status": "ok"}')
        status, body = await get(app, "/readyz")
    assert status == 200, body
    assert json.loads(body) == {"ready": True}
    assert fake_agent.spawns() == 0  # a probe never starts an agent


async def test_readyz_fails_naming_the_store_when_it_cannot_be_written(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with serving(
        ops_settings(tmp_path, fake_agent), ScriptedSurface(), unwritable=True
    ) as app:
        status, body = await get(app, "/readyz")
        assert (await get(app, "/healthz"))[0] == 200  # alive, just not ready
    assert status == 503
    assert json.loads(body) == {
        "ready": False,
        "not_ready": {"store": "attempt to write a readonly database"},
    }


async def test_readyz_fails_naming_a_surface_that_is_not_connected(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    surface.connected = True  # type: ignore[attr-defined]  # it reports its connection, as found at start-up
    async with serving(ops_settings(tmp_path, fake_agent), surface) as app:
        surface.connected = False  # type: ignore[attr-defined]
        status, body = await get(app, "/readyz")
        surface.connected = True  # type: ignore[attr-defined]
        again = await get(app, "/readyz")
    assert status == 503
    assert json.loads(body)["not_ready"] == {"surface:telegram": "not connected"}
    assert again[0] == 200


async def test_readyz_fails_after_the_agent_failed_to_start_and_recovers_when_it_starts(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    settings = ops_settings(tmp_path, fake_agent, agent_command=str(tmp_path / "no-such-agent"))
    async with serving(settings, surface) as app:
        await finished(surface.post(surface.message("alice", "hello")))
        status, body = await get(app, "/readyz")
    assert status == 503
    assert json.loads(body)["not_ready"] == {"agent": "the last start failed (AcpSpawnFailed)"}


# ---- /metrics ---------------------------------------------------------------------------------


async def test_metrics_count_a_scripted_run_without_user_ids_or_text_in_labels(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = ScriptedSurface()
    throttled = {
        "error": {"code": -32603, "message": "Internal error", "data": "ThrottlingException: x"}
    }
    settings = ops_settings(tmp_path, fake_agent, http={"metrics_token": METRICS_TOKEN})
    async with serving(settings, surface) as app:
        await finished(surface.post(surface.message("alice", "SECRET-WORDS plain answer")))
        retried = script({"attempts": [[throttled], [throttled], [{"chunk": "made it"}]]})
        await finished(surface.post(surface.message("bob", retried)))
        died = script({"attempts": [[{"exit": 1}], [{"chunk": "second life"}]]})
        await finished(surface.post(surface.message("alice", died)))
        surface.fail_next(RateLimited(0.01), on="send")
        await finished(surface.post(surface.message("alice", "limited once")))
        status, text = await get(app, "/metrics", Authorization=f"Bearer {METRICS_TOKEN}")
    assert status == 200, text
    found = samples(text)
    assert total(found, "switchboard_turns_total", outcome="answered") == 4
    assert total(found, "switchboard_turns_total") == 4
    assert total(found, "switchboard_retries_total") == 2
    assert total(found, "switchboard_respawns_total") == 1
    assert total(found, "switchboard_platform_rate_limited_total", surface="telegram") == 1
    assert total(found, "switchboard_turn_seconds_count") == 4
    assert total(found, "switchboard_first_text_seconds_count") == 4
    assert total(found, "switchboard_live_agents") == 1
    assert total(found, "switchboard_queue_depth") == 0
    assert total(found, "switchboard_pending_approvals") == 0
    assert total(found, "switchboard_ledger_backlog") == 0
    values = {
        value for series in found.values() for labels, _ in series for value in labels.values()
    }
    allowed = {"telegram", "answered", "", "AcpError", "AcpTransientError"}
    allowed |= {key for key in values if key.replace(".", "").replace("+Inf", "").isdigit()}
    assert not {"alice", "bob", "chat-1"} & values
    assert not any("SECRET" in value or "limited once" in value for value in values)
    assert values - allowed - {"+Inf"} == set(), values


async def test_metrics_need_the_bearer_token_when_one_is_set(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    settings = ops_settings(tmp_path, fake_agent, http={"metrics_token": METRICS_TOKEN})
    async with serving(settings, ScriptedSurface()) as app:
        bare = await get(app, "/metrics")
        wrong = await get(app, "/metrics", Authorization="Bearer not-the-token")
        basic = await get(app, "/metrics", Authorization=f"Basic {METRICS_TOKEN}")
        right = await get(app, "/metrics", Authorization=f"Bearer {METRICS_TOKEN}")
        health = await get(app, "/healthz")  # probes stay open
    assert [bare[0], wrong[0], basic[0]] == [401, 401, 401]
    assert "switchboard_turns" not in bare[1]
    assert right[0] == 200 and "switchboard_turns" in right[1]
    assert health[0] == 200


async def test_metrics_are_open_without_a_token(tmp_path: Path, fake_agent: FakeAgent) -> None:
    async with serving(ops_settings(tmp_path, fake_agent), ScriptedSurface()) as app:
        status, text = await get(app, "/metrics")
    assert status == 200
    assert "switchboard_turns" in {family.name for family in text_string_to_metric_families(text)}


def gauge(text: str, name: str) -> float:
    [(_labels, value)] = samples(text)[name]
    return value


# Far longer than the 1 s the issue asks for, so a slow machine cannot fail the test; what is
# checked is that the answer does not wait out the outage (SWITCHBOARD_STATE_WAIT, 30 s here).
GENEROUS = 5.0


async def test_metrics_and_readyz_answer_during_a_store_outage_with_stale_values_marked(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    redis = RedisProcess(tmp_path)
    redis.start()
    settings = ops_settings(tmp_path, fake_agent, state=redis.url, state_wait=30)
    surface = ScriptedSurface()
    try:
        async with serving(settings, surface) as app:
            await finished(surface.post(surface.message("alice", "hello")))
            fresh = (await get(app, "/metrics"))[1]
            assert gauge(fresh, "switchboard_state_store_stale") == 0
            assert gauge(fresh, "switchboard_metrics_stale_seconds") == 0
            assert gauge(fresh, "switchboard_ledger_backlog") == 0
            redis.pause()
            try:
                for _ in range(3):  # the first scrape's read is still under way for the others
                    with anyio.fail_after(GENEROUS):
                        status, text = await get(app, "/metrics")
                    assert status == 200, text
                    assert gauge(text, "switchboard_state_store_stale") == 1
                    assert gauge(text, "switchboard_ledger_backlog") == 0  # the last value read
                    assert gauge(text, "switchboard_metrics_stale_seconds") > 0
                    assert total(samples(text), "switchboard_turns_total") == 1
                with anyio.fail_after(GENEROUS):
                    status, body = await get(app, "/readyz")
                assert status == 503
                assert json.loads(body)["not_ready"] == {"store": "no answer within 2 s"}
            finally:
                redis.resume()

            async def fresh_again() -> bool:
                text = (await get(app, "/metrics"))[1]
                return gauge(text, "switchboard_state_store_stale") == 0

            with anyio.fail_after(30):
                while not await fresh_again():
                    await anyio.sleep(0.1)
            assert (await get(app, "/readyz"))[0] == 200
    finally:
        redis.stop()


# ---- the server itself ------------------------------------------------------------------------


class PageSurface(ScriptedSurface):
    """A surface that serves a page of its own, as the dashboard does."""

    def add_routes(self, app: web.Application) -> None:
        async def hello(request: web.Request) -> web.Response:
            return web.Response(text="hello from the surface")

        app.router.add_get("/hello", hello)


async def test_a_surfaces_routes_are_served_beside_the_probes(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with serving(ops_settings(tmp_path, fake_agent), PageSurface()) as app:
        assert await get(app, "/hello") == (200, "hello from the surface")
        assert (await get(app, "/healthz"))[0] == 200


async def test_off_serves_no_http(tmp_path: Path, fake_agent: FakeAgent) -> None:
    settings = ops_settings(tmp_path, fake_agent, http={"port": "off"})
    surface = ScriptedSurface()
    async with serving(settings, surface) as app:
        assert app.http is None
        await finished(surface.post(surface.message("alice", "still answers")))
    assert "Echo: still answers" in surface.transcript()


@pytest.fixture
def taken_port() -> Any:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


async def test_a_taken_port_stops_the_start_with_one_sentence(
    tmp_path: Path, fake_agent: FakeAgent, taken_port: int
) -> None:
    settings = ops_settings(tmp_path, fake_agent, http={"port": taken_port})
    with pytest.raises(BaseException) as raised:
        async with serving(settings, ScriptedSurface()):
            pass
    error = raised.value
    while isinstance(error, BaseExceptionGroup):  # through the test's and the app's task groups
        error = error.exceptions[0]
    assert isinstance(error, HttpServerError)
    message = str(error)
    assert message.startswith(f"The HTTP server cannot listen on 127.0.0.1:{taken_port} (")
    assert "SWITCHBOARD_HTTP__PORT" in message and "\n" not in message
    assert fake_agent.spawns() == 0


def test_switchboard_run_says_a_taken_port_in_one_sentence(
    run_cli: Any, taken_port: int, fake_agent: FakeAgent
) -> None:
    result = run_cli(
        "run",
        env={
            "SWITCHBOARD_AGENT_COMMAND": fake_agent.command(),
            "SWITCHBOARD_TELEGRAM__TOKEN": "123456:" + "A" * 35,
            "SWITCHBOARD_TELEGRAM__API_URL": "http://127.0.0.1:9/",
            "SWITCHBOARD_TELEGRAM__ALLOWED_USERS": "1",
            "SWITCHBOARD_HTTP__PORT": str(taken_port),
            "SWITCHBOARD_STATE": ":memory:",  # the working directory is the workspace
        },
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"The HTTP server cannot listen on 127.0.0.1:{taken_port} (Address already in use); "
        "set SWITCHBOARD_HTTP__PORT to a free port (or off), or SWITCHBOARD_HTTP__LISTEN."
    ], result.stderr


async def test_a_stopped_turn_is_counted_as_stopped(tmp_path: Path, fake_agent: FakeAgent) -> None:
    surface = ScriptedSurface()
    async with serving(ops_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(surface.message("alice", script({"chunk": "on it"}, {"hang": True})))
        await wait_for(lambda: "on it" in surface.transcript(), "the first text")
        await finished(surface.post(surface.message("alice", "/stop")), turn)
        found = samples((await get(app, "/metrics"))[1])
    assert total(found, "switchboard_turns_total", outcome="stopped") == 1
    assert total(found, "switchboard_turns_total") == 1


def test_the_port_setting_reads_off_a_number_or_says_what_it_wants() -> None:
    assert load_settings(http={"port": "off"}).http.port is None
    assert load_settings(http={"port": " OFF "}).http.port is None
    assert load_settings(http={"port": "9100"}).http.port == 9100
    assert load_settings().http.port == 8765
    assert load_settings().http.listen == "127.0.0.1"
    with pytest.raises(ConfigError) as raised:
        load_settings(http={"port": "eighty"})
    assert str(raised.value) == (
        "Invalid setting SWITCHBOARD_HTTP__PORT: must be a port number (0 for any free port) or off"
    )
