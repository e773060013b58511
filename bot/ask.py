"""`switchboard ask`: one prompt in a fresh session, the reply streamed to stdout.

Ctrl-C is handled as SIGTERM is: the turn is stopped, the agent shut down, exit code 130. Only
the first SIGINT counts (`FirstInterrupt`): a person who presses Ctrl-C again while the agent is
being shut down must not break that off half-way, where a KeyboardInterrupt raised inside the
event loop's teardown left a traceback, "coroutine was never awaited" warnings and agents
behind."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType

import anyio

from acp import (
    ELICITATION_CANCEL,
    AcpClient,
    AcpError,
    AcpEvent,
    AcpPermissionNeeded,
    ElicitationAnswer,
    EventKind,
    PendingElicitation,
    PendingPermission,
    RuntimePool,
)
from bot.agent_plans import agent_plan, client_preparer
from bot.agent_sessions import FreshSession
from bot.attachments import FileLimits, prompt_for, take_in
from bot.ladder import RetryPolicy, run_turn
from bot.logs import install_loop_exception_handler
from bot.notices import refusal_card_text, stop_notice
from config import Settings, valid_text
from surfaces.base import IncomingFile

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def say(message: str) -> None:
    print(valid_text(message), file=sys.stderr, flush=True)  # it may quote the agent


async def stop_on_signals(stop: anyio.Event, signals: Sequence[signal.Signals]) -> None:
    with anyio.open_signal_receiver(*signals) as received:
        async for _ in received:
            stop.set()
            return


class FirstInterrupt:
    """The process's SIGINT handler while `ask` runs, and after it: the first SIGINT sets the
    event `watch` was given (from inside the running loop), every later one is ignored. It
    stays installed until the process ends (`ignore_from_now` then hands SIGINT to the
    interpreter's teardown as ignored)."""

    def __init__(self) -> None:
        self.seen = False
        self._wake: Callable[[], object] | None = None

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._on_sigint)

    def watch(self, event: anyio.Event) -> None:
        """Call inside the running loop; an interrupt that came before is told at once."""
        loop = asyncio.get_running_loop()
        self._wake = lambda: loop.call_soon_threadsafe(event.set)
        if self.seen:
            event.set()

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.seen:
            return
        self.seen = True
        if self._wake is None:
            return  # the loop is not running yet: `watch` tells it
        try:
            self._wake()
        except RuntimeError:  # the loop is closed: the command is ending anyway
            pass


def ignore_from_now() -> None:
    """A SIGINT during the interpreter's teardown would kill it by the signal (exit -2) after
    the command's own exit code was decided."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _AskOutput:
    """Streams the reply to stdout; nobody can approve tools or answer the agent's questions in
    a one-shot prompt."""

    def __init__(self) -> None:
        self.text = ""

    def on_text(self, text: str) -> None:
        if text:
            self.text += text
            sys.stdout.write(text)
            sys.stdout.flush()

    async def on_event(self, event: AcpEvent) -> None:
        # only the text is printed, and a line for each file in the reply (a terminal shows no
        # images): where a linked one is, or that an inline one was not shown
        file = event.file
        if event.kind is EventKind.FILE and file is not None:
            where = file.uri if file.data is None else f"{len(file.data)} bytes, not shown"
            lead = "" if not self.text or self.text.endswith("\n") else "\n"
            self.on_text(f"{lead}[file {file.name}: {where}]\n")

    async def on_permission(self, pending: PendingPermission) -> str | None:
        raise AcpPermissionNeeded(pending.request.tool.describe_with_changes(), self.text)

    async def on_elicitation(self, pending: PendingElicitation) -> ElicitationAnswer:
        # A one-shot prompt has nobody to answer: the agent hears `cancel` and goes on without
        # it (a refusal would read as the person's); the question is shown, as what it missed.
        question = " ".join(pending.request.message.split())[:300]
        say(
            f"The agent asked a question that `switchboard ask` cannot answer, so it was "
            f"cancelled: {question or '(no message)'} (`switchboard chat` answers questions)."
        )
        return ElicitationAnswer(ELICITATION_CANCEL, {})

    def on_retry(self, error: AcpError, delay: float) -> None:
        log.info("%s; retrying in %.1f s", error.kind, delay)


async def ask(
    settings: Settings,
    text: str,
    files: Sequence[IncomingFile] = (),
    interrupt: FirstInterrupt | None = None,
) -> int:
    install_loop_exception_handler()
    spec, gate = agent_plan(settings)  # before any spawn: an unroutable gate spawns nothing
    intake = await take_in([text], [files], FileLimits.of(settings))
    for refusal in intake.refusals:
        say(refusal)
    if not intake.for_agent:
        return EXIT_FAILED  # nothing left to ask
    output = _AskOutput()
    interrupted = anyio.Event()
    if interrupt is not None:
        interrupt.watch(interrupted)
    stats = None
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            await interrupted.wait()
            for runtime in pool.runtimes():  # a stopped turn: no grace to finish by itself
                runtime.abandon()
            tg.cancel_scope.cancel()

        pool: RuntimePool[AcpClient] = RuntimePool(tg, client_preparer(gate, settings))
        tg.start_soon(stop_on_signals, interrupted, (signal.SIGTERM, signal.SIGHUP))
        tg.start_soon(watch)
        try:
            source = FreshSession(pool, spec, settings.model)
            session = await source.session()
            prompt = await prompt_for(intake, session.prompt_capabilities, spec.workspace)
            stats = await run_turn(
                source,
                prompt,
                output,
                policy=RetryPolicy.from_settings(settings.retry),
                timeout=settings.prompt_timeout,
            )
        finally:
            if output.text and not output.text.endswith("\n"):
                sys.stdout.write("\n")
                sys.stdout.flush()
            await pool.aclose()
            tg.cancel_scope.cancel()
    if interrupted.is_set() or stats is None:
        say("Stopped; the agent was shut down.")
        return EXIT_INTERRUPTED
    if stats.refusal is not None:
        say(refusal_card_text(stats.refusal, output.text))
        return EXIT_FAILED
    notice = stop_notice(stats)
    if notice:
        say(notice)
    return EXIT_OK
