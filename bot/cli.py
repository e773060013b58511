"""The `switchboard` command. This is the CLI boundary: whatever goes wrong, a person reads one
clear sentence on stderr and gets a non-zero exit code — never a traceback."""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import logging
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager

import anyio

from acp import (
    AGENT_ERRORS,
    AcpModelUnavailable,
    AcpRuntime,
    RuntimeOpener,
    RuntimeSpec,
    make_undumpable,
    open_runtime,
)
from bot.access import AccessPolicy
from bot.app import BotApp
from bot.ask import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    FirstInterrupt,
    ask,
    ignore_from_now,
    stop_on_signals,
)
from bot.ask import say as _say
from bot.audit import BadSince, as_line, parse_since
from bot.doctor import run_doctor
from bot.http_server import HttpServerError
from bot.logs import configure_logging, install_loop_exception_handler, secret_values
from bot.store import StoreError, open_store
from bot.store.sqlite_file import refuse_state_inside_workspaces
from bot.surface_registry import (
    configured_surfaces,
    how_to_enable,
    surfaces_nobody_can_use,
    terminal_surface,
)
from config import ConfigError, Settings, load_settings, valid_text
from surfaces.base import Surface
from surfaces.errors import SurfaceError
from surfaces.local_files import LocalFileMissing, local_file

log = logging.getLogger(__name__)

EXIT_USAGE = 2

# The agent options and the settings they set: (argparse dest, Settings field, option as typed).
_AGENT_OPTIONS = (
    ("agent", "agent", "--agent"),
    ("agent_command", "agent_command", "--agent-command"),
    ("cwd", "workspace", "--cwd"),
    ("timeout", "prompt_timeout", "--timeout"),
    ("model", "model", "--model"),
)


def _add_agent_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--agent",
        choices=["kiro", "claude", "codex", "generic"],
        help="agent preset (SWITCHBOARD_AGENT; default kiro)",
    )
    parser.add_argument(
        "--agent-command",
        metavar="CMD ARGS",
        help="command line that starts the agent; keeps the preset's dialect "
        "(SWITCHBOARD_AGENT_COMMAND)",
    )
    parser.add_argument(
        "--cwd", metavar="DIR", help="workspace the agent works in (SWITCHBOARD_WORKSPACE)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="time budget for one turn (SWITCHBOARD_PROMPT_TIMEOUT; default 600)",
    )
    parser.add_argument("--model", metavar="ID", help="model to select (SWITCHBOARD_MODEL)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchboard",
        description="Chat with ACP coding agents from chat platforms and the terminal.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"switchboard {importlib.metadata.version('switchboard')}",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser("run", help="start every configured chat surface")
    chat = commands.add_parser(
        "chat", help="chat in the terminal (reads stdin line by line when it is not a terminal)"
    )
    ask = commands.add_parser("ask", help="one prompt in a fresh session; the reply on stdout")
    doctor = commands.add_parser(
        "doctor", help="check the agent, the state store and each surface token"
    )
    for sub in (run, chat, ask, doctor):
        _add_agent_options(sub)
    token = commands.add_parser(
        "dashboard-token", help="print a new dashboard access token for USER and its digest"
    )
    token.add_argument("user", metavar="USER", help="the dashboard user id the token is for")
    audit = commands.add_parser(
        "audit", help="print the audit log (approvals, admin actions, refusals) as JSON lines"
    )
    audit.add_argument(
        "--since",
        metavar="WHEN",
        default="",
        help="a date or time (2026-12-01, UTC unless it names a zone) or a duration back from "
        "now (30m, 2h, 7d); default: every record kept (SWITCHBOARD_AUDIT_DAYS)",
    )
    ask.add_argument("text", nargs="*", metavar="TEXT", help="the prompt")
    ask.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="PATH",
        help="attach a file (repeatable; SWITCHBOARD_MAX_FILE_BYTES, _MAX_FILES, _FILE_TYPES)",
    )
    return parser


def _settings_from(args: argparse.Namespace) -> Settings:
    return load_settings(**{field: getattr(args, dest, None) for dest, field, _ in _AGENT_OPTIONS})


def _as_typed(exc: ConfigError, args: argparse.Namespace) -> ConfigError:
    """A bad value the person typed as an option is named by that option, then its setting."""
    for dest, field, option in _AGENT_OPTIONS:
        if exc.setting == f"SWITCHBOARD_{field.upper()}" and getattr(args, dest, None) is not None:
            return ConfigError(exc.setting, exc.problem, option=option)
    return exc


class _HeldRecords(logging.Handler):
    """Log records from before logging is configured (reading the settings decides the level)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def replay(self) -> None:
        for record in self.records:
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)


@contextmanager
def _holding_logs() -> Iterator[_HeldRecords]:
    held = _HeldRecords()
    root = logging.getLogger()
    root.addHandler(held)
    try:
        yield held
    finally:
        root.removeHandler(held)


# ---- chat / run -----------------------------------------------------------------------------
class _AgentStartWatch:
    """Ends `chat` when its agent cannot be started (not found, died or refused at initialize):
    every later message would fail the same way. The chat still says why, in one sentence."""

    def __init__(self, stop: anyio.Event) -> None:
        self.stop = stop
        self.failed = False

    @asynccontextmanager
    async def open(self, spec: RuntimeSpec) -> AsyncIterator[AcpRuntime]:
        try:
            async with open_runtime(spec) as runtime:
                yield runtime  # the pool prepares it (handshake) in this body
        except AGENT_ERRORS:
            self.failed = True
            self.stop.set()
            raise


async def _serve(
    settings: Settings,
    surfaces: Sequence[Surface],
    stop: anyio.Event,
    *,
    opener: RuntimeOpener = open_runtime,
    http: bool = False,
) -> None:
    install_loop_exception_handler()
    store = open_store(settings.state, wait=settings.state_wait)
    try:
        app = BotApp(settings, store, AccessPolicy.from_settings(settings), opener=opener)
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signals, stop, (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
            await app.serve(surfaces, stop, http=http)
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()


async def _chat(settings: Settings) -> int:
    surface = terminal_surface()
    if sys.stdin.isatty():
        _say(
            f"Chatting with the {settings.agent} agent in {settings.workspace}. "
            "/help lists commands; /file PATH [caption] attaches a file; Ctrl-D quits."
        )
    stop = anyio.Event()
    watch = _AgentStartWatch(stop)
    await _serve(settings, [surface], stop, opener=watch.open)
    return EXIT_FAILED if watch.failed else EXIT_OK


async def _run(settings: Settings) -> int:
    surfaces = configured_surfaces(settings)
    if not surfaces:
        _say("No chat surface is configured. Set one of:")
        for line in how_to_enable():
            _say(f"  {line}")
        return EXIT_USAGE
    for unusable in surfaces_nobody_can_use(settings):
        _say(f"Warning: {unusable.warning()}")  # loud, whatever the log level; keeps running
    refuse_state_inside_workspaces(settings)  # where the agent could read it
    await _serve(settings, surfaces, anyio.Event(), http=True)
    return EXIT_OK


async def _doctor(settings: Settings) -> int:
    install_loop_exception_handler()
    checks = await run_doctor(settings)
    for check in checks:
        print(check.line(), flush=True)
    return EXIT_OK if all(check.ok for check in checks) else EXIT_FAILED


async def _audit(settings: Settings, since: float) -> int:
    store = open_store(settings.state, wait=settings.state_wait)
    try:
        for record in await store.audit_since(since):
            print(as_line(record), flush=True)
    finally:
        with anyio.CancelScope(shield=True):
            await store.aclose()
    return EXIT_OK


# ---- the boundary ---------------------------------------------------------------------------
def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _dashboard_token(user: str) -> int:
    """A new random token and the digest SWITCHBOARD_DASHBOARD__TOKENS holds for it (the
    dashboard compares digests, so the token itself is stored nowhere)."""
    user = valid_text(user).strip()
    if not user:
        _say("Name the user the token is for: switchboard dashboard-token USER")
        return EXIT_USAGE
    token = secrets.token_urlsafe(32)
    digest = hashlib.sha256(token.encode()).hexdigest()
    print(f"Token for {user} (give it to them; it is shown only now): {token}")
    print(f"SHA-256 digest: {digest}")
    print(
        "Add it to SWITCHBOARD_DASHBOARD__TOKENS, e.g. "
        f"SWITCHBOARD_DASHBOARD__TOKENS='{json.dumps({user: digest})}', "
        f"and {user} to SWITCHBOARD_DASHBOARD__ALLOWED_USERS."
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "dashboard-token":  # needs no settings, and must not touch the agent
        return _dashboard_token(args.user)
    with _holding_logs() as held:  # e.g. the config file's warnings, told once logging is set
        try:
            settings = _settings_from(args)
        except ConfigError as exc:
            configure_logging("warning")
            held.replay()
            _say(str(_as_typed(exc, args)))
            return EXIT_FAILED
    configure_logging(
        settings.log_level,
        secrets=secret_values(settings),
        conversation=args.command == "chat",
    )
    held.replay()
    if args.command in ("run", "chat", "ask", "doctor"):  # they spawn agents: hide our memory
        make_undumpable()
    try:
        if args.command == "ask":
            # argv keeps undecodable bytes as lone surrogates (surrogateescape)
            text = valid_text(" ".join(args.text))
            if not text.strip() and not args.file:
                _say("Nothing to ask: give the prompt as TEXT, or a file with --file PATH.")
                return EXIT_USAGE
            try:
                files = [local_file(path) for path in args.file]
            except LocalFileMissing as exc:
                _say(str(exc))
                return EXIT_FAILED
            interrupt = FirstInterrupt()
            interrupt.install()  # kept to the end of the process (see bot/ask.py)
            return anyio.run(ask, settings, text, files, interrupt, backend="asyncio")
        if args.command == "chat":
            return anyio.run(_chat, settings, backend="asyncio")
        if args.command == "doctor":
            return anyio.run(_doctor, settings, backend="asyncio")
        if args.command == "audit":
            try:
                since = parse_since(args.since, time.time()) if args.since else 0.0
            except BadSince as exc:
                _say(str(exc))
                return EXIT_USAGE
            return anyio.run(_audit, settings, since, backend="asyncio")
        return anyio.run(_run, settings, backend="asyncio")
    except KeyboardInterrupt:
        _say("Interrupted; the agent was shut down.")
        return EXIT_INTERRUPTED
    except BaseException as raised:  # the CLI boundary: one sentence, never a traceback
        leaf = _first_leaf(raised)
        if isinstance(leaf, KeyboardInterrupt):
            _say("Interrupted; the agent was shut down.")
            return EXIT_INTERRUPTED
        if isinstance(leaf, SystemExit):
            raise
        if isinstance(leaf, ConfigError):
            _say(str(_as_typed(leaf, args)))
        elif isinstance(leaf, AcpModelUnavailable) and args.model and leaf.model == args.model:
            _say(f"Invalid --model (SWITCHBOARD_MODEL): {leaf}")
        elif isinstance(leaf, (*AGENT_ERRORS, StoreError, SurfaceError, HttpServerError)):
            _say(str(leaf))
        else:
            log.debug("internal error", exc_info=leaf)
            _say(
                f"Switchboard failed unexpectedly ({type(leaf).__name__}); run again with "
                "SWITCHBOARD_LOG_LEVEL=debug for details."
            )
        return EXIT_FAILED


def run() -> None:
    code = main()
    ignore_from_now()
    sys.exit(code)
