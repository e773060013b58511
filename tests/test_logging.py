"""No secret in any log line, at any level; ACP frames at debug; the asyncio loop boundary.

The surface tests run the real `switchboard run` (a subprocess at SWITCHBOARD_LOG_LEVEL=debug)
against each platform's fake server with the scripted fake agent, drive one message through to a
reply, stop it with SIGTERM and read everything it wrote on stderr."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import logging
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from pydantic import SecretStr

from acp import EventKind
from bot.logs import (
    REDACTED,
    configure_logging,
    install_loop_exception_handler,
    loop_exception_handler,
    secret_values,
)
from config import Settings, load_settings
from config.settings import SlackSettings
from surfaces.slack.adapter import SlackSurface
from tests.acp_helpers import agent_spec, collect_turn, open_test_client
from tests.conftest import CliResult, FakeAgent, script
from tests.engine_helpers import engine_settings, running_app, wait_for
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.slack_api import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    FakeSlack,
    SignedPoster,
    dm,
    envelope,
)
from tests.fakes.telegram_api import FakeBotApi, People
from tests.harness.discord import discord_env
from tests.harness.process import free_port, port_open
from tests.harness.slack import slack_env
from tests.harness.telegram import telegram_env, webhook_env

pytestmark = pytest.mark.anyio

TELEGRAM_TOKEN = "7054311198:AAF3kQ9x_Zr2mV8bLw5nT1cYpHd6sJ4uEgQ"  # the real shape: id:35 chars
WEBHOOK_SECRET = "hook-secret_5f1c9a7e3b2d"
# Discord's shape: base64 of the bot's id, a timestamp, an HMAC.
DISCORD_TOKEN = "MTA5ODc2NTQzMjEwOTg3NjU0.GhT3xQ.p8Vv2nKq7LmZr4Ws9Yt1Bc6Df0Gh3Jk5Lx8NaQe"
ALICE = People().alice


# ---- helpers ------------------------------------------------------------------------------------
@pytest.fixture
async def own_loop_handler() -> AsyncIterator[None]:
    """The test runner's loop handler is back in place after the test."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    yield
    loop.set_exception_handler(previous)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def secret_parts(secret: str) -> list[str]:
    """The secret and each long part of it (a short part, like a Telegram bot's id, is public)."""
    return [secret, *(part for part in re.split(r"[:.]", secret) if len(part) >= 12)]


def assert_nothing_of(secrets: list[str], text: str) -> None:
    for secret in secrets:
        for part in secret_parts(secret):
            assert part not in text, f"{part[:6]}… appears in the log"


@dataclass
class RunningBot:
    """`switchboard run` as a subprocess; its stderr is read as it comes, so it never blocks."""

    process: anyio.abc.Process
    stderr: bytearray = field(default_factory=bytearray)

    async def drain(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr.extend(chunk)

    @property
    def text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


@asynccontextmanager
async def switchboard_run(env: dict[str, str], cwd: Path) -> AsyncIterator[RunningBot]:
    """Yields the running bot; on exit it is stopped with SIGTERM and must exit 0."""
    command = [sys.executable, "-m", "bot", "run"]
    async with await anyio.open_process(
        command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    ) as process:
        bot = RunningBot(process)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(bot.drain)
                yield bot
                process.send_signal(signal.SIGTERM)
                with anyio.fail_after(15):
                    assert await process.wait() == 0, bot.text[-3000:]
        finally:
            if process.returncode is None:
                process.kill()


def debug_env(cli_env: dict[str, str], fake_agent: FakeAgent, tmp_path: Path) -> dict[str, str]:
    workspace = tmp_path / "workspace"  # the state file (cli_env's) beside it, never in it
    workspace.mkdir(exist_ok=True)
    return cli_env | {
        "SWITCHBOARD_LOG_LEVEL": "debug",
        "SWITCHBOARD_AGENT_COMMAND": fake_agent.command(),
        "SWITCHBOARD_WORKSPACE": str(workspace),
    }


def sdk_debug_lines(text: str, *loggers: str) -> list[dict[str, Any]]:
    return [
        record
        for record in records(text)
        if record["level"] == "debug" and record["logger"].startswith(loggers)
    ]


# ---- every surface at debug, against its fake ---------------------------------------------------
@pytest.mark.parametrize("receiving", ["polling", "webhook"])
async def test_telegram_at_debug_logs_no_token_or_webhook_secret(
    tmp_path: Path, fake_agent: FakeAgent, cli_env: dict[str, str], receiving: str
) -> None:
    env = debug_env(cli_env, fake_agent, tmp_path)
    async with FakeBotApi(token=TELEGRAM_TOKEN) as api:
        env |= telegram_env(api, ALICE)  # the fake API was made with TELEGRAM_TOKEN
        env["SWITCHBOARD_TELEGRAM__WEBHOOK_SECRET"] = WEBHOOK_SECRET
        if receiving == "webhook":
            env |= webhook_env(free_port(), WEBHOOK_SECRET)
        async with switchboard_run(env, tmp_path) as bot:
            if receiving == "webhook":
                await wait_for(lambda: api.webhook, "the webhook to be set", 20)
                update = api.take_update(api.dm(ALICE, "hello over the hook"))
                assert await api.post_webhook(update, secret=WEBHOOK_SECRET) == 200
            else:
                await wait_for(lambda: api.calls_to("getUpdates"), "the bot to poll", 20)
                api.dm(ALICE, "hello over the hook")
            await wait_for(
                lambda: "Echo: hello over the hook" in api.chat_text(ALICE.id), "the reply", 20
            )
    assert_nothing_of([TELEGRAM_TOKEN, WEBHOOK_SECRET], bot.text)
    assert sdk_debug_lines(bot.text, "telegram", "httpx", "httpcore"), "the SDKs said nothing"
    assert "/bot[redacted]/getMe" in bot.text  # httpx printed the URL: redaction was needed
    if receiving == "webhook":  # PTB printed setWebhook's parameters, secret_token among them
        assert any(
            "setWebhook" in r["msg"] and "secret_token" in r["msg"] for r in records(bot.text)
        )


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_slack_at_debug_logs_no_token_or_signing_secret(
    tmp_path: Path, fake_agent: FakeAgent, cli_env: dict[str, str], mode: str
) -> None:
    env = debug_env(cli_env, fake_agent, tmp_path)
    secrets = [BOT_TOKEN, APP_TOKEN] if mode == "socket" else [BOT_TOKEN, SIGNING_SECRET]
    async with FakeSlack() as slack:
        port = free_port()
        env |= slack_env(slack, mode, "UALICE", port=port)
        event = envelope(dm("DALICE", "UALICE", "hello slack", ts=slack.next_ts()))
        async with switchboard_run(env, tmp_path) as bot:
            if mode == "socket":
                await slack.wait_connected(timeout=20)
                envelope_id = await slack.push("events_api", event)
                await wait_for(lambda: slack.acked(envelope_id), "the envelope to be acked")
            else:
                poster = SignedPoster(f"http://127.0.0.1:{port}/slack/events")
                try:
                    await wait_for(lambda: port_open(port), "the HTTP endpoint", 20)
                    assert await poster.event(event) == 200
                finally:
                    await poster.aclose()
            await wait_for(
                lambda: "Echo: hello slack" in slack.thread_text("DALICE"), "the reply", 20
            )
    assert_nothing_of(secrets, bot.text)
    assert sdk_debug_lines(bot.text, "slack_sdk", "slack_bolt", "aiohttp"), "the SDKs said nothing"
    assert REDACTED in bot.text  # something token-bearing was logged, and redacted


async def test_discord_at_debug_logs_no_token(
    tmp_path: Path, fake_agent: FakeAgent, cli_env: dict[str, str]
) -> None:
    env = debug_env(cli_env, fake_agent, tmp_path)
    fake = FakeDiscord(token=DISCORD_TOKEN)
    alice = fake.user("Alice")
    await fake.start()
    try:
        env |= discord_env(fake, alice)  # the fake was made with DISCORD_TOKEN
        channel = fake.dm_channel(alice).id
        async with switchboard_run(env, tmp_path) as bot:
            await wait_for(lambda: fake.identifies and fake.commands, "the bot to connect", 20)
            fake.dm(alice, "hello discord")
            await wait_for(lambda: "Echo: hello discord" in fake.text_in(channel), "the reply", 20)
    finally:
        await fake.close()
    assert_nothing_of([DISCORD_TOKEN], bot.text)
    assert sdk_debug_lines(bot.text, "discord"), "discord.py said nothing"


# ---- the redaction itself -----------------------------------------------------------------------
def test_the_secrets_are_every_token_secret_key_and_password_setting() -> None:
    settings = load_settings(
        telegram={"token": TELEGRAM_TOKEN, "webhook_secret": WEBHOOK_SECRET, "api_url": "http://x"},
        slack={"bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "signing_secret": SIGNING_SECRET},
        discord={"token": DISCORD_TOKEN, "gateway_url": "ws://y"},
    )
    assert secret_values(settings) == sorted(
        [TELEGRAM_TOKEN, WEBHOOK_SECRET, BOT_TOKEN, APP_TOKEN, SIGNING_SECRET, DISCORD_TOKEN]
    )
    assert secret_values(load_settings()) == []


class _WithClusterKey(Settings):
    """The relay signing key another part of issue 21 adds, as a plain or a secret string."""

    cluster_key: str = ""
    cluster_key_secret: SecretStr = SecretStr("")


def test_the_secrets_include_the_state_urls_password_the_cluster_key_and_token_digests() -> None:
    digest = hashlib.sha256(b"alice's token").hexdigest()
    settings = _WithClusterKey(
        state="redis://switchboard:Lo9%2Fstate-pw@redis:6379/0",
        cluster_key="cluster-key-0123456789abcdefghijklmnop",
        cluster_key_secret=SecretStr("cluster-key-secret-abcdef"),
        dashboard={"tokens": {"alice": digest}},
    )
    found = secret_values(settings)
    for value in (
        "Lo9%2Fstate-pw",
        "Lo9/state-pw",
        "cluster-key-0123456789abcdefghijklmnop",
        "cluster-key-secret-abcdef",
        digest,
    ):
        assert value in found
    assert secret_values(load_settings(state="redis://:pw@redis:6379/0")) == []  # too short alone


def test_a_log_line_loses_the_state_password_the_cluster_key_and_digests(
    restore_logging: None,
) -> None:
    digest = hashlib.sha256(b"bob's token").hexdigest()
    settings = _WithClusterKey(
        state="rediss://:state-password-42@cache:6380/0",
        cluster_key="cluster-key-0123456789abcdefghijklmnop",
        dashboard={"tokens": {"bob": digest}},
    )
    out = io.StringIO()
    configure_logging("debug", out, secrets=secret_values(settings))
    said = logging.getLogger("redis.connection")
    said.info("connecting to %s", settings.state)
    said.info("AUTH default state-password-42 refused; key cluster-key-0123456789abcdefghijklmnop")
    said.warning("dashboard sign-in for bob, digest %s", digest)
    said.debug("postgres://u:other-password@db/x and webhook sha256=%s", "ab" * 20)
    text = out.getvalue()
    assert_nothing_of(
        ["state-password-42", "cluster-key-0123456789abcdefghijklmnop", digest, "other-password"],
        text,
    )
    assert "ab" * 20 not in text
    lines = [record["msg"] for record in records(text)]
    assert lines[0] == "connecting to rediss://:***@cache:6380/0"
    assert lines[3] == "postgres://u:***@db/x and webhook sha256=[redacted]"


def test_every_record_is_redacted_whoever_logged_it_message_args_exception_and_stack(
    restore_logging: None,
) -> None:
    out = io.StringIO()
    configure_logging("debug", out, secrets=[WEBHOOK_SECRET, "plain-password-value"])
    sdk = logging.getLogger("httpx")
    sdk.info('HTTP Request: POST %s "HTTP/1.1 200 OK"', f"http://h/bot{TELEGRAM_TOKEN}/getMe")
    sdk.debug("headers %r", {"Authorization": f"Bot {DISCORD_TOKEN}", "X-Secret": WEBHOOK_SECRET})
    sdk.debug("raw header line: authorization: Bearer abcdefghijklmnopqrstuvwxyz012345")
    ending_in_dash = "42424242:" + "A" * 34 + "-"
    sdk.debug("bare %s, bot%s, %s and %s", ending_in_dash, TELEGRAM_TOKEN, BOT_TOKEN, APP_TOKEN)
    sdk.debug("a configured secret: %s", "plain-password-value")
    try:
        raise RuntimeError(f"rejected {WEBHOOK_SECRET}")
    except RuntimeError:
        sdk.exception("request failed", stack_info=True, extra={"token": WEBHOOK_SECRET})
    sdk.debug("a broken format %s %s", WEBHOOK_SECRET)  # a third party's bug loses no record
    text = out.getvalue()
    assert_nothing_of([TELEGRAM_TOKEN, DISCORD_TOKEN, BOT_TOKEN, APP_TOKEN, WEBHOOK_SECRET], text)
    assert "abcdefghijklmnopqrstuvwxyz012345" not in text
    assert "plain-password-value" not in text
    assert "A" * 34 not in text
    lines = records(text)
    assert len(lines) == 7
    assert lines[0]["msg"] == 'HTTP Request: POST http://h/bot[redacted]/getMe "HTTP/1.1 200 OK"'
    failed = lines[5]
    assert "RuntimeError: rejected [redacted]" in failed["exc"]
    assert "test_logging.py" in failed["stack"]
    assert "token" not in failed  # `extra` is never written out
    assert "a broken format" in lines[6]["msg"]


def test_the_part_of_a_configured_token_after_its_colon_is_redacted_on_its_own(
    restore_logging: None,
) -> None:
    out = io.StringIO()
    configure_logging("info", out, secrets=["42:" + "s3cr3t" * 3])
    logging.getLogger("telegram.ext").info("echoing %s", "s3cr3t" * 3)
    assert records(out.getvalue())[0]["msg"] == "echoing [redacted]"


# ---- ACP frames at debug ------------------------------------------------------------------------
def test_at_debug_every_acp_frame_in_and_out_is_logged_truncated_and_redacted(
    run_cli: Any, fake_agent: FakeAgent
) -> None:
    prompt = "use sk-ant-api03-abcdefghijklmnopqrstuv then " + "x" * 900
    result: CliResult = run_cli(
        "ask",
        "--agent-command",
        fake_agent.command(),
        prompt,
        env={"SWITCHBOARD_LOG_LEVEL": "debug"},
    )
    assert result.returncode == 0, result.stderr
    frames = [r["msg"] for r in records(result.stderr) if r["logger"] == "acp.session_handle"]
    heads = [" ".join(msg.split()[:2]) for msg in frames]
    assert "-> initialize#0" in heads
    assert "<- reply#0" in heads
    assert any(head.startswith("-> session/prompt#") for head in heads)
    assert "<- session/update" in heads
    (sent,) = [msg for msg in frames if msg.startswith("-> session/prompt#")]
    assert "sk-ant-api03" not in result.stderr
    assert "[redacted]" in sent
    assert len(sent) < 600 and "bytes)" in sent  # the body was cut at 500 characters


def test_the_frame_trace_at_debug_loses_url_passwords_digests_and_the_states_password(
    run_cli: Any, fake_agent: FakeAgent
) -> None:
    digest = hashlib.sha256(b"carol's token").hexdigest()
    prompt = (
        f"REDIS_URL=redis://:Frame-pw-77@redis:6379/0 digest {digest} "
        "and the bare password state-pw-in-frame"
    )
    result: CliResult = run_cli(
        "ask",
        "--agent-command",
        fake_agent.command(),
        prompt,
        env={
            "SWITCHBOARD_LOG_LEVEL": "debug",
            "SWITCHBOARD_STATE": "redis://:state-pw-in-frame@127.0.0.1:9/0",
        },
    )
    assert result.returncode == 0, result.stderr
    frames = [r["msg"] for r in records(result.stderr) if r["logger"] == "acp.session_handle"]
    (sent,) = [msg for msg in frames if msg.startswith("-> session/prompt#")]
    echoed = [msg for msg in frames if msg.startswith("<- session/update") and "redis:" in msg]
    assert echoed, frames  # the agent's echo of the prompt came back through the trace too
    for line in [sent, *echoed]:
        assert "redis://:***@redis:6379/0" in line
    assert_nothing_of(["Frame-pw-77", digest, "state-pw-in-frame"], result.stderr)


def test_no_frame_is_logged_above_debug(run_cli: Any, fake_agent: FakeAgent) -> None:
    result = run_cli(
        "ask", "--agent-command", fake_agent.command(), "hi", env={"SWITCHBOARD_LOG_LEVEL": "info"}
    )
    assert result.returncode == 0, result.stderr
    assert not [r for r in records(result.stderr) if r["logger"] == "acp.session_handle"]


async def test_recent_frames_holds_the_methods_of_the_last_frames_in_and_out(
    fake_agent: FakeAgent, tmp_path: Path
) -> None:
    steps = script({"chunk": "a"}, {"chunk": "b"}, {"stop": "end_turn"})
    async with open_test_client(agent_spec(fake_agent, tmp_path)) as client:
        handle = client.runtime.handle
        assert list(handle.recent_frames)[:2] == ["-> initialize", "<- reply#0"]
        session = await client.open_session()
        events = await collect_turn(session, steps)
        assert [e.text for e in events if e.kind is EventKind.TEXT] == ["a", "b"]
        recent = list(handle.recent_frames)
    prompt_at = recent.index("-> session/prompt")
    assert recent[prompt_at + 1 :][:2] == ["<- session/update", "<- session/update"]
    assert recent[-1].startswith("<- reply#")
    assert handle.recent_frames.maxlen == 16


# ---- the asyncio loop boundary ------------------------------------------------------------------
class _ResetsOnClose(asyncio.Protocol):
    """Its transport's close callback meets a reset, as the Windows Proactor's does."""

    def connection_lost(self, exc: Exception | None) -> None:
        raise ConnectionResetError(10054, "An existing connection was forcibly closed")


async def test_a_reset_in_a_transport_close_callback_is_one_warning_line(
    restore_logging: None, own_loop_handler: None
) -> None:
    out = io.StringIO()
    configure_logging("debug", out)
    install_loop_exception_handler()
    accepted: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(lambda _, writer: accepted.append(writer), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, _ = await asyncio.get_running_loop().create_connection(
        _ResetsOnClose, "127.0.0.1", port
    )
    transport.close()  # the loop runs _call_connection_lost, which raises
    await anyio.sleep(0.05)
    for writer in accepted:
        writer.close()
    server.close()
    await server.wait_closed()
    (line,) = [r for r in records(out.getvalue()) if r["logger"] == "switchboard.loop"]
    assert line["level"] == "warning"
    assert "ConnectionResetError" in line["msg"] and "exc" not in line
    assert "\n" not in line["msg"]


@pytest.mark.parametrize(
    "context",
    [
        pytest.param(
            {"message": "Task exception was never retrieved", "exception": ConnectionResetError()},
            id="a task's connection reset",
        ),
        pytest.param(
            {
                "message": "Exception in callback _SelectorTransport._call_connection_lost()",
                "exception": ValueError("a bug"),
            },
            id="another exception in a transport callback",
        ),
        pytest.param({"message": "Task was destroyed but it is pending!"}, id="no exception"),
    ],
)
async def test_everything_else_the_loop_reports_is_an_error_with_breadcrumbs(
    restore_logging: None, context: dict[str, Any]
) -> None:
    out = io.StringIO()
    configure_logging("debug", out)
    loop = asyncio.get_running_loop()
    exc = context.get("exception")
    if exc is not None:
        try:
            raise exc
        except BaseException:
            pass  # gives it a traceback, as the loop's exceptions have
    if context["message"].startswith("Task"):
        context = context | {"task": asyncio.current_task()}
    loop_exception_handler(loop, context)
    (line,) = records(out.getvalue())
    assert line["level"] == "error"
    assert context["message"] in line["msg"]
    if "task" in context:
        assert "task=<Task" in line["msg"]
    if exc is not None:
        assert f"{type(exc).__name__}" in line["msg"]
        assert "Traceback" in line["exc"]


async def test_a_long_poll_connection_reset_is_one_warning_and_the_bot_still_answers(
    tmp_path: Path, workspace: Path, fake_agent: FakeAgent, cli_env: dict[str, str]
) -> None:
    env = cli_env | {
        "SWITCHBOARD_LOG_LEVEL": "info",
        "SWITCHBOARD_AGENT_COMMAND": fake_agent.command(),
        "SWITCHBOARD_WORKSPACE": str(workspace),
    }
    async with FakeBotApi(token=TELEGRAM_TOKEN) as api:
        env |= {
            "SWITCHBOARD_TELEGRAM__TOKEN": TELEGRAM_TOKEN,
            "SWITCHBOARD_TELEGRAM__API_URL": api.url,
            "SWITCHBOARD_TELEGRAM__ALLOWED_USERS": str(ALICE.id),
        }
        api.reset_next("getUpdates", count=1)
        async with switchboard_run(env, tmp_path) as bot:
            await wait_for(
                lambda: any(c.status == 0 for c in api.calls_to("getUpdates", ok=False)),
                "the reset long poll",
                20,
            )
            await wait_for(lambda: api.calls_to("getUpdates"), "a poll after the reset", 20)
            api.dm(ALICE, "still there?")
            await wait_for(lambda: "Echo: still there?" in api.chat_text(ALICE.id), "the reply", 20)
    lines = records(bot.text)
    warnings = [r for r in lines if r["level"] == "warning"]
    assert len(warnings) == 1, warnings
    assert "polling for updates failed" in warnings[0]["msg"] and "exc" not in warnings[0]
    assert not [r for r in lines if r["level"] in ("error", "critical")]
    assert "Traceback" not in bot.text


async def test_a_slack_socket_mode_reconnect_that_fails_once_is_a_warning_not_an_error(
    tmp_path: Path, fake_agent: FakeAgent, restore_logging: None
) -> None:
    out = io.StringIO()
    configure_logging("info", out)
    settings = engine_settings(tmp_path, fake_agent, slack={"allowed_users": ["UALICE"]})
    async with FakeSlack() as slack:
        surface = SlackSurface(
            SlackSettings(bot_token=BOT_TOKEN, app_token=APP_TOKEN, api_url=slack.api_url),
            ping_interval=0.3,
        )
        async with running_app(settings, surface):  # type: ignore[arg-type]
            await slack.wait_connected()
            slack.refuse_sockets(1)
            await slack.reset_connection()
            await slack.wait_connected(connections=2, timeout=20)
            assert slack.refused == 1
            event = envelope(dm("DALICE", "UALICE", "after the reset", ts=slack.next_ts()))
            envelope_id = await slack.push("events_api", event)
            await wait_for(lambda: slack.acked(envelope_id), "the envelope to be acked")
            await wait_for(
                lambda: "Echo: after the reset" in slack.thread_text("DALICE"), "the reply", 20
            )
    # aiohttp.server is the fake's side (in this process), noting the connection it reset.
    lines = [r for r in records(out.getvalue()) if r["logger"] != "aiohttp.server"]
    refused = [r for r in lines if r["msg"].startswith("slack: Failed to connect")]
    assert len(refused) == 1 and refused[0]["level"] == "warning", lines
    assert "WSServerHandshakeError" in refused[0]["msg"] and "exc" not in refused[0]
    assert not [r for r in lines if r["level"] in ("error", "critical")], lines


async def test_a_discord_gateway_reconnect_is_a_warning_not_an_error_and_the_bot_answers(
    tmp_path: Path, workspace: Path, fake_agent: FakeAgent, cli_env: dict[str, str]
) -> None:
    env = cli_env | {
        "SWITCHBOARD_LOG_LEVEL": "info",
        "SWITCHBOARD_AGENT_COMMAND": fake_agent.command(),
        "SWITCHBOARD_WORKSPACE": str(workspace),
    }
    fake = FakeDiscord(token=DISCORD_TOKEN)
    alice = fake.user("Alice")
    await fake.start()
    try:
        env |= discord_env(fake, alice.id)
        channel = fake.dm_channel(alice).id
        async with switchboard_run(env, tmp_path) as bot:
            await wait_for(lambda: fake.identifies and fake.commands, "the bot to connect", 20)
            fake.refuse_gateway(1)  # discord.py logs the failed reconnect as an ERROR
            await fake.drop_gateway()
            await wait_for(lambda: fake.resumes, "the gateway to resume", 20)
            assert fake.refused == 1
            fake.dm(alice, "after the drop")
            await wait_for(lambda: "Echo: after the drop" in fake.text_in(channel), "the reply", 20)
    finally:
        await fake.close()
    lines = records(bot.text)
    (warning,) = [r for r in lines if r["level"] == "warning"]
    assert warning["msg"].startswith("discord: Attempting a reconnect") and "exc" not in warning
    assert "WSServerHandshakeError" in warning["msg"]
    assert not [r for r in lines if r["level"] in ("error", "critical")], lines


def test_genuine_errors_on_a_tamed_sdk_logger_stay_errors_with_their_traceback(
    restore_logging: None,
) -> None:
    out = io.StringIO()
    configure_logging("info", out)
    socket_mode = logging.getLogger("surfaces.slack.adapter.socket_mode")  # as the adapter made it
    for fault in (ConnectionResetError(104, "Connection reset by peer"), ValueError("a bug")):
        try:
            raise fault
        except Exception as exc:
            socket_mode.exception(f"Failed to connect (error: {exc}); Retrying...")
    socket_mode.error("Failed to receive or enqueue a message: ClientConnectionError, gone (s_1)")
    socket_mode.error("Failed to receive or enqueue a message: KeyError, 'type' (s_1)")
    levels = [(r["level"], "exc" in r) for r in records(out.getvalue())]
    assert levels == [("warning", False), ("error", True), ("warning", False), ("error", False)]
