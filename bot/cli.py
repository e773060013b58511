"""The `switchboard` command. This is the CLI boundary: whatever goes wrong, a person reads one
clear sentence on stderr and gets exit code 1 (130 when interrupted) — never a traceback."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from acp import (
    AcpClient,
    AcpError,
    AcpEvent,
    AcpPermissionNeeded,
    AcpRuntimeError,
    EventKind,
    PendingPermission,
)
from acp.runtime import RuntimePool
from bot.agent_sessions import FreshSession, agent_plan, client_preparer
from bot.chat_runner import RetryPolicy, refusal_card_text, run_turn, stop_notice
from bot.logs import configure_logging
from config import ConfigError, Settings, load_settings

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


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
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ask = commands.add_parser("ask", help="one prompt in a fresh session; the reply on stdout")
    _add_agent_options(ask)
    ask.add_argument("text", nargs="+", metavar="TEXT", help="the prompt")
    return parser


def _settings_from(args: argparse.Namespace) -> Settings:
    return load_settings(
        agent=args.agent,
        agent_command=args.agent_command,
        workspace=args.cwd,
        prompt_timeout=args.timeout,
        model=args.model,
    )


class _AskOutput:
    """Streams the reply to stdout; nobody can approve tools in a one-shot prompt."""

    def __init__(self) -> None:
        self.text = ""

    async def on_event(self, event: AcpEvent) -> None:
        if event.kind is EventKind.TEXT and event.text:
            self.text += event.text
            sys.stdout.write(event.text)
            sys.stdout.flush()

    async def on_permission(self, pending: PendingPermission) -> str | None:
        raise AcpPermissionNeeded(pending.request.tool.describe(), self.text)

    async def on_retry(self, error: AcpError, delay: float) -> None:
        log.info("%s; retrying in %.1f s", error.kind, delay)


def _end_line(output: _AskOutput) -> None:
    if output.text and not output.text.endswith("\n"):
        sys.stdout.write("\n")
        sys.stdout.flush()


async def _watch_signals(scope: anyio.CancelScope, state: dict[str, Any]) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for _ in signals:
            state["interrupted"] = True
            scope.cancel()
            return


async def _ask(settings: Settings, text: str) -> int:
    spec, gate = agent_plan(settings)  # before any spawn: an unroutable gate spawns nothing
    output = _AskOutput()
    state: dict[str, Any] = {"interrupted": False}
    stats = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch_signals, tg.cancel_scope, state)
        pool: RuntimePool[AcpClient] = RuntimePool(tg, client_preparer(gate, settings))
        try:
            stats = await run_turn(
                FreshSession(pool, spec, settings.model),
                text,
                output,
                policy=RetryPolicy.from_settings(settings.retry),
                timeout=settings.prompt_timeout,
            )
        finally:
            _end_line(output)
            await pool.aclose()
            tg.cancel_scope.cancel()
    if state["interrupted"] or stats is None:
        _say("Stopped; the agent was shut down.")
        return EXIT_INTERRUPTED
    if stats.refusal is not None:
        _say(refusal_card_text(stats.refusal, output.text))
        return EXIT_FAILED
    notice = stop_notice(stats)
    if notice:
        _say(notice)
    return EXIT_OK


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = _settings_from(args)
    except ConfigError as exc:
        _say(str(exc))
        return EXIT_FAILED
    configure_logging(settings.log_level)
    try:
        return anyio.run(_ask, settings, " ".join(args.text), backend="asyncio")
    except KeyboardInterrupt:
        _say("Interrupted; the agent was shut down.")
        return EXIT_INTERRUPTED
    except BaseException as raised:  # the CLI boundary: one sentence, never a traceback
        leaf = _first_leaf(raised)
        if isinstance(leaf, KeyboardInterrupt):
            _say("Interrupted; the agent was shut down.")
            return EXIT_INTERRUPTED
        if isinstance(leaf, AcpError | AcpRuntimeError | ConfigError):
            _say(str(leaf))
        elif isinstance(leaf, SystemExit):
            raise
        else:
            log.debug("internal error", exc_info=leaf)
            _say(
                f"Switchboard failed unexpectedly ({type(leaf).__name__}); run again with "
                "SWITCHBOARD_LOG_LEVEL=debug for details."
            )
        return EXIT_FAILED


def run() -> None:
    sys.exit(main())
