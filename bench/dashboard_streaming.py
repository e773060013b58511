#!/usr/bin/env python3
"""Streaming replies to many dashboard pages at once over real WebSockets, against an in-process
surface floor in the same run.

    python bench/dashboard_streaming.py [--conversations 200] [--chars 6000] [--chunk-chars 100]
                                        [--chunk-gap 0.25] [--timeout 300]

N people, each with their own access token, sign in over HTTP, open the page's WebSocket (aiohttp's
client, no browser) and send one message at the same moment; the agent answers each with a reply
of `--chars` characters, streamed in chunks of `--chunk-chars` every `--chunk-gap` seconds.
Everything real but the agent: BotApp (access, ChatRunner, ReplyStream and its pacing, the SQLite
store), the HTTP server `switchboard run` serves (bot/http_server.py on 127.0.0.1, any free port)
and the dashboard surface with its production pacing. The agent is the benches' in-process ACP
agent (bench/_agents.py) plugged in through `BotApp(..., opener=...)`.

The server runs in a child process of its own and the clients in this one, so the server's CPU
(getrusage of the child, from the moment every page is connected to the moment every reply is
complete) is the server's alone. The floor is a second child: the same BotApp, agent and
workload into an in-process surface with the dashboard's capabilities and the dashboard's own
HTML conversion, that records when each text arrives (the console surface holds one conversation
only, so it cannot carry 200). What the dashboard costs over the floor is the HTTP server, the
WebSocket frames and the hub.

Reported per side: replies complete and exact; message sent -> first frame carrying agent text
(first visible) p50/p99/max; message sent -> the reply's final frame (whole reply) p50/p99;
server CPU per agent chunk delivered; frames and bytes per reply (dashboard); and the ratios
dashboard/floor. Latencies on the dashboard side are read by the clients, which share the
machine's cores with the server. Exit status 0 whatever the figures; human lines, then one JSON
line.

Measured on the 2-core test machine (shared), `python bench/dashboard_streaming.py` with its
defaults (200 x 6,000 characters, 60 chunks each, 15 s of streaming; the run takes ~35 s):

    dashboard  200/200 exact; first visible p50 366.5 ms, p99 493.9 ms; whole reply p50 15.49 s,
               p99 15.6 s; CPU 392.6 us per chunk; 63.0 frames (207.3 KiB) per reply
    floor      200/200 exact; first visible p50 297.7 ms, p99 353.6 ms; whole reply p50 15.41 s,
               p99 15.5 s; CPU 268.7 us per chunk
    dashboard/floor: first visible p99 1.4x, whole reply p99 1.01x, CPU per chunk 1.46x

Every frame of a live reply carries the message's whole current HTML (what makes a reconnect
simple), so the bytes per reply grow with the square of its length: ~207 KiB for 6 KB of text.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import anyio.abc  # noqa: E402

from bench._agents import agent_opener, reply_text  # noqa: E402
from bench._harness import cpu_seconds, kill_group, reply_latencies  # noqa: E402
from bench._platform import bench_settings, child_outcome, streaming_parser  # noqa: E402

AGENT_PIPE_ITEMS = 10_000  # writes the agent's pipes buffer before the writer waits
FIRST_WORD = re.compile(r"\bw0\b")  # the first word of every reply (bench/_agents.reply_text)
TAG = re.compile(r"<[^>]+>")
READY = "READY "


def token_of(conv: int) -> str:
    return f"bench-token-{conv:05d}-of-the-dashboard"


def visible_words(markup: str) -> list[str]:
    return html.unescape(TAG.sub(" ", markup)).split()


def chunks_per_reply(args: argparse.Namespace) -> int:
    return math.ceil(args.chars / args.chunk_chars)


def _opener(args: argparse.Namespace) -> Any:
    return agent_opener(
        (args.chars, args.chunk_chars, args.chunk_gap), {}, pipe_items=AGENT_PIPE_ITEMS
    )


async def _serving(app: Any, surface: Any, *, http: bool, body: Any) -> None:
    """`body()` while `app` serves `surface`; then the app is stopped."""
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            await app.serve([surface], stop, http=http, task_status=task_status)

        await tg.start(serve)
        try:
            await body()
        finally:
            stop.set()


def _app(settings: Any, opener: Any) -> Any:
    from bot.access import AccessPolicy
    from bot.app import BotApp
    from bot.store import open_store

    store = open_store(settings.state)
    return BotApp(settings, store, AccessPolicy.from_settings(settings), opener=opener), store


# ---- the dashboard server: a child process ---------------------------------------------------
async def _server(args: argparse.Namespace) -> None:
    """Serve until stdin ends. Stdin lines: `go` (every page is connected: CPU counted from
    here), `report` (every reply is complete: print the CPU spent since `go`)."""
    from surfaces.dashboard import create_surface
    from surfaces.dashboard.auth import digest_of

    users = [f"u{conv}" for conv in range(args.conversations)]
    with tempfile.TemporaryDirectory(prefix="dashboard-streaming-") as tmp:
        settings = bench_settings(
            tmp,
            args.timeout,
            dashboard={
                "enabled": True,
                "tokens": {user: digest_of(token_of(conv)) for conv, user in enumerate(users)},
                "allowed_users": users,
            },
            http={"listen": "127.0.0.1", "port": 0},
        )
        surface = create_surface(settings)  # production pacing
        app, store = _app(settings, _opener(args))

        async def body() -> None:
            assert app.http is not None and app.http.port is not None
            print(READY + json.dumps({"port": app.http.port}), flush=True)
            started = 0.0
            while line := await anyio.to_thread.run_sync(sys.stdin.readline):
                if line.strip() == "go":
                    started = cpu_seconds()
                elif line.strip() == "report":
                    spent = cpu_seconds() - started
                    print(json.dumps({"cpu_s": spent}), flush=True)

        try:
            await _serving(app, surface, http=True, body=body)
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()


# ---- the clients: this process -----------------------------------------------------------------
class Client:
    """One person's page: signed in on a session (cookie jar) of its own, one WebSocket."""

    def __init__(self, conv: int, base: str) -> None:
        self.conv = conv
        self.base = base
        self.expected = reply_text(conv, 0).split()  # replaced by the caller
        self.sent_at = 0.0
        self.first_visible: float | None = None
        self.whole: float | None = None
        self.exact = False
        self.frames = 0
        self.bytes = 0

    async def run(self, connected: Any, go: anyio.Event, timeout: float) -> None:
        import aiohttp

        origin = {"Origin": self.base}
        jar = aiohttp.CookieJar(unsafe=True)  # the server is an IP address: 127.0.0.1
        async with aiohttp.ClientSession(self.base, cookie_jar=jar) as http:
            answer = await http.post(
                "/api/sign-in", json={"token": token_of(self.conv)}, headers=origin
            )
            answer.raise_for_status()
            csrf = (await answer.json())["csrf"]
            async with http.ws_connect(f"/ws?csrf={csrf}", headers=origin) as socket:
                tab = ""
                while not tab:
                    frame = await socket.receive_json()
                    tab = frame["tab"] if frame["type"] == "tab" else ""
                connected()
                await go.wait()
                self.sent_at = time.perf_counter()
                text = f"conversation {self.conv}"
                await socket.send_json({"type": "send", "tab": tab, "text": text})
                with anyio.move_on_after(timeout):
                    await self._read(socket)

    async def _read(self, socket: Any) -> None:
        import aiohttp

        async for message in socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            at = time.perf_counter()
            self.frames += 1
            self.bytes += len(message.data)
            frame = json.loads(message.data)
            if frame.get("type") != "message" or frame.get("role") != "agent":
                continue
            if self.first_visible is None and FIRST_WORD.search(frame["html"]):
                self.first_visible = at - self.sent_at
            if frame["final"] and f"END-{self.conv}." in frame["html"]:
                self.whole = at - self.sent_at
                self.exact = visible_words(frame["html"]) == self.expected
                return


async def _clients(args: argparse.Namespace, server: subprocess.Popen[str]) -> dict[str, Any]:
    assert server.stdin is not None and server.stdout is not None
    line = await anyio.to_thread.run_sync(server.stdout.readline)
    if not line.startswith(READY):
        raise RuntimeError("the dashboard server did not start")
    base = f"http://127.0.0.1:{json.loads(line[len(READY) :])['port']}"
    clients = [Client(conv, base) for conv in range(args.conversations)]
    for client in clients:
        client.expected = reply_text(client.conv, args.chars).split()
    ready = 0
    all_connected, go = anyio.Event(), anyio.Event()

    def connected() -> None:
        nonlocal ready
        ready += 1
        if ready == len(clients):
            all_connected.set()

    def tell(command: str) -> None:
        assert server.stdin is not None
        server.stdin.write(command + "\n")
        server.stdin.flush()

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for client in clients:
            tg.start_soon(client.run, connected, go, args.timeout)
        with anyio.fail_after(args.timeout):
            await all_connected.wait()
        tell("go")
        go.set()
    finished = time.perf_counter()
    tell("report")
    report = await anyio.to_thread.run_sync(server.stdout.readline)
    cpu = json.loads(report)["cpu_s"]
    return _figures(
        args,
        cpu,
        [c.first_visible for c in clients],
        [c.whole for c in clients],
        sum(c.exact for c in clients),
        wall=finished - started,
        frames=sum(c.frames for c in clients),
        frame_bytes=sum(c.bytes for c in clients),
    )


def _dashboard(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", "server", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,
        text=True,
        cwd=ROOT,
    )
    try:
        result = anyio.run(_clients, args, server, backend="asyncio")
        assert server.stdin is not None
        server.stdin.close()  # the server stops at the end of its input
        server.wait(timeout=30)
        return {"ok": True, **result}
    except Exception as exc:  # the figures say why instead of a traceback
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            exc = exc.exceptions[0]  # type: ignore[assignment]
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        kill_group(server)


# ---- the floor: an in-process surface with the dashboard's capabilities -------------------------
class FloorSurface:
    """Every person sends one message at once; what the bot sends is converted to HTML as the
    dashboard converts it and its arrival recorded; nothing crosses a socket."""

    name = "dashboard"  # the access rules of the dashboard's users apply

    def __init__(self, conversations: int, chars: int) -> None:
        from config.settings import DashboardSettings
        from surfaces.dashboard.adapter import DashboardSurface
        from surfaces.dashboard.convert import render

        self._render = render
        self.capabilities = DashboardSurface(DashboardSettings()).capabilities  # its pacing
        self.conversations = conversations
        self.expected = [reply_text(conv, chars).split() for conv in range(conversations)]
        self.sent_at: dict[int, float] = {}
        self.first_visible: dict[int, float] = {}
        self.whole: dict[int, float] = {}
        self.exact = 0
        self._ids = 0
        self.started_cpu = 0.0
        self.done_cpu = 0.0  # when the last reply is complete

    async def run(self, on_event: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        from surfaces.base import ConversationKey, Inbound, UserRef

        async def converse(conv: int) -> None:
            key = ConversationKey(self.name, f"u{conv}", "t0")
            handled = anyio.Event()
            self.sent_at[conv] = time.perf_counter()
            text = f"conversation {conv}"
            await on_event(Inbound(key, UserRef(f"u{conv}"), text, f"e{conv}", handled))
            await handled.wait()

        task_status.started()
        self.started_cpu = cpu_seconds()
        async with anyio.create_task_group() as tg:
            for conv in range(self.conversations):
                tg.start_soon(converse, conv)

    def _arrived(self, key: Any, text: str, formatted: bool) -> None:
        from surfaces.dashboard.convert import plain_html

        at = time.perf_counter()
        conv = int(key.chat[1:])
        shown = text if formatted else plain_html(text)
        if conv not in self.first_visible and FIRST_WORD.search(shown):
            self.first_visible[conv] = at - self.sent_at[conv]
        if formatted and f"END-{conv}." in shown and conv not in self.whole:
            self.whole[conv] = at - self.sent_at[conv]
            self.exact += visible_words(shown) == self.expected[conv]
            if len(self.whole) == self.conversations:
                self.done_cpu = cpu_seconds()

    def render(self, markdown: str) -> str:
        return str(self._render(markdown))

    async def send(self, key: Any, text: str, *, formatted: bool = False, buttons: Any = ()) -> Any:
        from surfaces.base import MessageRef

        self._arrived(key, text, formatted)
        self._ids += 1
        return MessageRef(key, str(self._ids))

    async def edit(
        self, ref: Any, text: str, *, formatted: bool = False, buttons: Any = ()
    ) -> None:
        self._arrived(ref.key, text, formatted)

    def open_live(self, key: Any) -> Any:
        from surfaces.live import EditedLive

        return EditedLive(self, key)  # as the dashboard's own

    async def ask_choice(self, key: Any, prompt: str, choices: Any, *, allowed_users: Any) -> Any:
        raise AssertionError("the bench agent asks no permission")

    async def close_choice(self, ref: Any, prompt: str, outcome: str) -> None:
        return None

    async def typing(self, key: Any) -> None:
        return None

    def command_menu(self, commands: Any) -> None:
        return None

    async def close(self) -> None:
        return None


async def _floor(args: argparse.Namespace) -> dict[str, Any]:
    users = [f"u{conv}" for conv in range(args.conversations)]
    with tempfile.TemporaryDirectory(prefix="dashboard-floor-") as tmp:
        settings = bench_settings(
            tmp, args.timeout, dashboard={"enabled": True, "allowed_users": users}
        )
        surface = FloorSurface(args.conversations, args.chars)
        app, store = _app(settings, _opener(args))
        started = time.perf_counter()

        async def body() -> None:
            with anyio.move_on_after(args.timeout):
                while len(surface.whole) < args.conversations:
                    await anyio.sleep(0.05)

        try:
            await _serving(app, surface, http=False, body=body)
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()
        wall = time.perf_counter() - started
        cpu = (surface.done_cpu or cpu_seconds()) - surface.started_cpu
    return _figures(
        args,
        cpu,
        [surface.first_visible.get(conv) for conv in range(args.conversations)],
        [surface.whole.get(conv) for conv in range(args.conversations)],
        surface.exact,
        wall=wall,
    )


# ---- figures -----------------------------------------------------------------------------------
def _figures(
    args: argparse.Namespace,
    cpu: float,
    first_visible: list[float | None],
    whole: list[float | None],
    exact: int,
    *,
    wall: float,
    frames: int | None = None,
    frame_bytes: int | None = None,
) -> dict[str, Any]:
    chunks = chunks_per_reply(args) * exact
    figures: dict[str, Any] = {
        "conversations": args.conversations,
        "replies_complete": exact,
        **reply_latencies(
            [v for v in first_visible if v is not None], [v for v in whole if v is not None]
        ),
        "cpu_s": round(cpu, 3),
        "agent_chunks": chunks,
        "cpu_us_per_chunk": round(cpu / chunks * 1e6, 1) if chunks else None,
        "wall_s": round(wall, 2),
    }
    if frames is not None and frame_bytes is not None:
        figures["frames_per_reply"] = round(frames / args.conversations, 1)
        figures["kib_per_reply"] = round(frame_bytes / args.conversations / 1024, 1)
    return figures


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


def _show(result: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"{args.conversations} dashboard pages streaming at once, {args.chars} characters each "
        f"({args.chunk_chars} every {args.chunk_gap} s: {chunks_per_reply(args)} chunks)"
    )
    for side in ("dashboard", "floor"):
        figures = result[side]
        if not figures.get("ok"):
            print(f"  {side}: no figures ({figures.get('error')})")
            continue
        first, whole = figures["first_visible_ms"], figures["whole_reply_s"]
        extra = (
            f", {figures['frames_per_reply']} frames ({figures['kib_per_reply']} KiB) per reply"
            if "frames_per_reply" in figures
            else ""
        )
        print(
            f"  {side:9}  {figures['replies_complete']}/{figures['conversations']} exact; "
            f"first visible p50 {first['p50']} ms, p99 {first['p99']} ms, max {first['max']} ms; "
            f"whole reply p50 {whole['p50']} s, p99 {whole['p99']} s; "
            f"CPU {figures['cpu_us_per_chunk']} us per chunk{extra}"
        )
    ratios = result.get("ratios", {})
    if ratios:
        print(
            f"  dashboard/floor: first visible p99 {ratios['first_visible_p99']}x, "
            f"whole reply p99 {ratios['whole_reply_p99']}x, "
            f"CPU per chunk {ratios['cpu_per_chunk']}x"
        )


def main(argv: list[str]) -> int:
    parser = streaming_parser(__doc__)
    parser.add_argument("--child", choices=("server", "floor"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child == "server":
        import logging

        logging.basicConfig(level=logging.ERROR)
        anyio.run(_server, args, backend="asyncio")
        return 0
    if args.child == "floor":
        import logging

        logging.basicConfig(level=logging.ERROR)
        print(json.dumps(anyio.run(_floor, args, backend="asyncio")), flush=True)
        return 0
    result: dict[str, Any] = {"dashboard": _dashboard(args, argv)}
    result["floor"] = child_outcome(__file__, ["--child", "floor", *argv], args.timeout)
    dash, floor = result["dashboard"], result["floor"]
    if dash.get("ok") and floor.get("ok"):
        result["ratios"] = {
            "first_visible_p99": _ratio(
                dash["first_visible_ms"]["p99"], floor["first_visible_ms"]["p99"]
            ),
            "whole_reply_p99": _ratio(dash["whole_reply_s"]["p99"], floor["whole_reply_s"]["p99"]),
            "cpu_per_chunk": _ratio(dash["cpu_us_per_chunk"], floor["cpu_us_per_chunk"]),
        }
    _show(result, args)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
