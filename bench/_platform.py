"""What the chat-surface streaming benches (Telegram, Slack, Discord) share around the bot: the
fake platform server on an event loop of its own, settings that point the bot at it, a serving
`BotApp`, and the parent's report of a child run.

The fake runs in its own thread so that its clock, which stamps every call and enforces the rate
limits, is not held up by the bot's loop under load: a 429 then means the bot really called too
soon, not that the fake noticed late."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.abc

from bench._harness import run_child

if TYPE_CHECKING:
    from acp.runtime import RuntimeOpener
    from bot.app import BotApp
    from config import Settings
    from surfaces.base import Surface
    from tests.fakes.loopback import LoopbackServer

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


F = TypeVar("F", bound="LoopbackServer")  # FakeBotApi, FakeSlack or FakeDiscord


class FakeInThread(Generic[F]):
    """`make()`'s fake, built, started and closed on an event loop in a daemon thread named
    `name`. That loop owns the fake's state: read or change it through `call` and `submit`."""

    def __init__(self, make: Callable[[], F], name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

        async def build() -> F:
            fake = make()
            await fake.start()
            return fake

        self.api: F = self._wait(build(), 30)

    def _wait(self, coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    async def submit(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the fake's loop; the caller's loop waits without blocking."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    async def call(self, func: Callable[[], T]) -> T:
        """Run `func` on the fake's loop and return its result."""

        async def run() -> T:
            return func()

        return await self.submit(run())

    def close(self) -> None:
        try:
            self._wait(self.api.close(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            if not self.thread.is_alive():
                self.loop.close()


def streaming_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every streaming bench takes, with the same defaults, under the first paragraph
    of the bench's docstring `doc`; each bench adds its own."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--chars", type=int, default=6000)
    parser.add_argument("--chunk-chars", type=int, default=100)
    parser.add_argument("--chunk-gap", type=float, default=0.25)
    parser.add_argument("--rate-interval", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    return parser


def run_beside(
    make: Callable[[], F],
    name: str,
    bench: Callable[[FakeInThread[F]], Awaitable[dict[str, Any]]],
) -> None:
    """A child's whole run: only errors logged, `make()`'s fake started in its thread (`name`),
    `bench(fake)` run on an asyncio loop of its own, the fake closed, and the figures printed as
    the one JSON line the parent reads."""
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("aiohttp.server").addFilter(_not_abandoned)
    fake = FakeInThread(make, name)
    try:
        result = anyio.run(bench, fake, backend="asyncio")
    finally:
        fake.close()
    print(json.dumps(result), flush=True)


def _not_abandoned(record: logging.LogRecord) -> bool:
    """False for the fake server's report of a request whose client hung up while it was read:
    the bot abandons its long polls when it stops, which is no error of the run."""
    error = record.exc_info[1] if record.exc_info else None
    return not isinstance(error, ConnectionResetError)


def bench_settings(tmp: str, prompt_timeout: float, **surface: dict[str, Any]) -> Settings:
    """Settings for a bench run in the folder `tmp`, with one surface's settings (for example
    `telegram={...}`). The agent command is never spawned: the bench's opener replaces it."""
    from config import load_settings

    return load_settings(
        agent="kiro",
        agent_command="kiro-cli acp",
        workspace=Path(tmp),
        state=str(Path(tmp) / "state.db"),
        prompt_timeout=prompt_timeout,
        **surface,
    )


@asynccontextmanager
async def serving_app(
    settings: Settings, surface: Surface, opener: RuntimeOpener
) -> AsyncIterator[BotApp]:
    """A `BotApp` serving `surface` with its own store and the bench's agents (`opener`); on exit
    it is stopped (turns cancelled, agents shut down) and the store closed."""
    from bot.access import AccessPolicy
    from bot.app import BotApp
    from bot.store import open_store

    store = open_store(settings.state)
    app = BotApp(settings, store, AccessPolicy.from_settings(settings), opener=opener)
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:

            async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                await app.serve([surface], stop, task_status=task_status)

            await tg.start(serve)
            try:
                yield app
            finally:
                stop.set()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


def child_outcome(script: str, argv: list[str], timeout: float) -> dict[str, Any]:
    """Run the bench's child (`python script *argv`) for at most `timeout` + 60 s: its JSON
    result after `"ok": true`, or `"ok": false` and the `error` (`timed_out` says which)."""
    limit = timeout + 60
    run = run_child(script, argv, limit, cwd=ROOT)
    if run.timed_out:
        return {"ok": False, "error": f"timed out after {limit} s", "timed_out": True}
    result = run.result() if run.returncode == 0 else None
    if result is None:
        return {"ok": False, "error": f"child exited {run.returncode}", "timed_out": False}
    return {"ok": True, **result}


def report_child(
    script: str, argv: list[str], timeout: float, show: Callable[[dict[str, Any]], None]
) -> int:
    """The parent of a one-run bench: runs the child, prints its figures through `show` (or why
    there are none), then the one JSON line. Exit status 0 whatever the figures."""
    result = child_outcome(script, argv, timeout)
    if result["ok"]:
        show(result)
    elif result.pop("timed_out"):
        print("the benchmark did not finish in time")
    else:
        print("the benchmark failed; see stderr")
    print(json.dumps(result))
    return 0
