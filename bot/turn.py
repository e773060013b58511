"""`Turn`: one batch of a conversation's messages taken to its answer. Take-in (the project's
check, the attached files), the journal, the run (the retry ladder, `bot.ladder`, with the live
reply as its output), the final (the answer, a notice, the footer; a long one as a file) and
after it (the agent's files, the agent's command menu). A fault of the turn's own ends it with a
sentence; the conversation (`ChatRunner`) keeps the queue and runs one turn at a time."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import anyio

from acp import (
    AGENT_ERRORS,
    STOP_REASON_CANCELLED,
    AcpGateViolation,
    AcpProcessDied,
    AcpPromptStats,
    AcpRuntimeError,
    UsageInfo,
)
from bot.agent_sessions import ConversationSessions
from bot.attachments import FileLimits, Intake, prompt_for, take_in
from bot.faults import fault_sentence
from bot.ladder import run_turn
from bot.markdown_split import split_message
from bot.metrics import AGENT_ERROR, ANSWERED, FAULT, REFUSED, SHUTDOWN, STOPPED
from bot.notices import (
    SHUTDOWN_NOTE,
    approvals_footer,
    compact_hint,
    compact_level,
    context_percent,
    join_paragraphs,
    refusal_card_text,
    stop_notice,
    usage_footer,
)
from bot.outbound_files import deliver_files, reply_as_file
from bot.permissions import audit_violation
from bot.services import ConversationServices
from bot.subagent_stop import SubagentStops
from bot.turn_journal import TurnJournal
from bot.turn_output import LiveOutput
from config import ConfigError, valid_text
from surfaces.base import Choice, ConversationKey, Inbound, OutgoingFile, Surface, UserRef
from surfaces.errors import SurfaceError

log = logging.getLogger(__name__)

# The live reply's Stop button hands back a token with this prefix (approval tokens have none).
STOP_TOKEN_PREFIX = "stop:"
NO_REPLY = "The agent finished without writing a reply."


class TurnHost(Protocol):
    """What a turn reads and sets of its conversation (`ChatRunner`)."""

    services: ConversationServices
    surface: Surface
    key: ConversationKey
    sessions: ConversationSessions
    journal: TurnJournal
    tick_interval: float  # how often a quiet turn refreshes its elapsed time
    last_requester: UserRef | None  # set: whose message started this turn
    turn_started: float  # set when the turn starts answering
    stop_token: str  # set while the live reply carries a Stop button
    subagent_stops: SubagentStops  # its subagents' Stop buttons beside it
    compact_told: int  # the context threshold last suggested /compact for

    @property
    def usage(self) -> UsageInfo | None: ...

    async def say(self, text: str) -> None: ...

    def log_fault(self, exc: Exception, doing: str, **crumbs: str) -> None: ...

    def sync_agent_menu(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Ending:
    """How the run ended, for the final and /metrics (bounded labels only)."""

    outcome: str
    notice: str
    error: type[BaseException] | None = None


class Turn:
    """One batch through take-in, journal, run, final and after-final. `waiting` holds the
    journal entries of its messages that waited behind an earlier turn (closed once the turn's
    own entry covers them, or when it ends early); `answered` turns true once the final is out."""

    def __init__(
        self, host: TurnHost, batch: list[Inbound], turn_id: str, waiting: list[str]
    ) -> None:
        self.host = host
        self.batch = batch
        self.turn_id = turn_id
        self.waiting = waiting
        self.answered = False
        self.output: LiveOutput | None = None  # its live reply while it answers (a steer quotes in)
        self.approvals = ""  # the project's approvals policy (bot/trust.py), once known

    async def close_waiting(self) -> None:
        ids, self.waiting = self.waiting, []
        await self.host.journal.close(ids)

    async def run(self) -> None:
        host = self.host
        requester = self.batch[0].user
        if not await self._may_use_project(requester):
            return
        intake = await self._take_in()
        if intake is None:
            return  # every file was refused (and said so), and there was nothing else
        host.last_requester = requester
        host.turn_started = time.monotonic()
        services = host.services
        async with host.journal.turn(self.turn_id, requester):
            await self.close_waiting()  # the turn's own entry covers its messages from now on
            async with services.open_reply(host.surface, host.key) as reply:
                output = LiveOutput(services, host.surface, host.key, reply, requester)
                self.output = output
                self._show_live(output)
                try:
                    ending = await self._answer(intake, output)
                except anyio.get_cancelled_exc_class():
                    services.metrics.turn_ended(SHUTDOWN, time.monotonic() - output.started)
                    self._end_live(output)
                    with anyio.CancelScope(shield=True):
                        final = join_paragraphs(output.text, SHUTDOWN_NOTE)
                        await services.finish_reply(reply, host.key, final, turn_id=self.turn_id)
                    raise
                self._end_live(output)
                answer = join_paragraphs(output.text, ending.notice) or NO_REPLY
                final, whole = self._as_file(join_paragraphs(answer, self._footer(output)))
                await services.finish_reply(reply, host.key, final, turn_id=self.turn_id)
                elapsed = time.monotonic() - output.started
                services.metrics.turn_ended(ending.outcome, elapsed, ending.error)
                self.answered = True
                await self._after_final(output, whole)

    # ---- take-in ---------------------------------------------------------------------------

    async def _may_use_project(self, user: UserRef) -> bool:
        """A conversation that landed in a project (its place's, or the default) is only worked
        on by the people that project is open to; the rest are told, without its name."""
        host = self.host
        target = await host.sessions.target()
        if target.project.may_use(host.services.access, host.key.surface, user.id):
            self.approvals = target.project.approvals
            host.services.approvals.trust.set_policy(host.key, self.approvals)
            return True
        await host.services.audit.refused(
            host.key.surface, user.id, "project", project=target.project.name
        )
        prefix = host.surface.capabilities.command_prefixes[0]
        await host.say(
            "This conversation works in a project you may not use; "
            f"{prefix}project lists the ones you may."
        )
        return False

    async def _take_in(self) -> Intake | None:
        """The batch's text and files (`bot.attachments`); each refused file is said here."""
        host = self.host
        limits = FileLimits.of(host.services.settings, host.surface.capabilities.max_download_bytes)
        batch = self.batch
        intake = await take_in(
            [inbound.text for inbound in batch], [inbound.files for inbound in batch], limits
        )
        if intake.refusals:
            await host.say("\n".join(intake.refusals))
        return intake if intake.for_agent else None

    # ---- the run ---------------------------------------------------------------------------

    async def _answer(self, intake: Intake, output: LiveOutput) -> _Ending:
        """Run the turn; an agent's failure or a fault of ours is the notice it ends with."""
        host = self.host
        try:
            stats = await self._run(intake, output)
        except (*AGENT_ERRORS, ConfigError) as exc:
            if isinstance(exc, AcpProcessDied | AcpRuntimeError):
                host.sessions.drop()
            if isinstance(exc, AcpGateViolation):
                # the next message loads the session again, which puts it back in the mode
                # that asks (acp's gate, confirmed by the agent) or refuses the agent
                host.sessions.drop()
                await audit_violation(host.services.audit, host.key, output.requester.id, exc)
            return _Ending(AGENT_ERROR, valid_text(str(exc)), type(exc))  # may quote the agent
        except Exception as exc:  # a fault of ours ends this turn, not the process
            host.log_fault(exc, "answering")
            return _Ending(FAULT, fault_sentence(exc), type(exc))
        if stats.refusal is not None:
            return _Ending(REFUSED, refusal_card_text(stats.refusal, output.text))
        outcome = STOPPED if stats.stop_reason == STOP_REASON_CANCELLED else ANSWERED
        return _Ending(outcome, stop_notice(stats))

    async def _run(self, intake: Intake, output: LiveOutput) -> AcpPromptStats:
        host = self.host
        session = await host.sessions.session()
        prompt = await prompt_for(
            intake, session.prompt_capabilities, session.client.runtime.workspace
        )
        return await run_turn(
            host.sessions,
            prompt,
            output,
            policy=host.services.policy,
            timeout=host.services.settings.prompt_timeout,
            renew=host.sessions.forget,  # a fresh session for an agent that stays busy
        )

    def _show_live(self, output: LiveOutput) -> None:
        """The live text and elapsed time, and the Stop button where the live message can carry
        one. (A live preview that is a draft bubble, Telegram's private chats, cannot: the
        surface leaves the button out there, and /stop is the way.)"""
        host = self.host
        output.show_live(host.tick_interval)
        caps = host.surface.capabilities
        if caps.message_buttons and caps.can_edit:
            host.stop_token = f"{STOP_TOKEN_PREFIX}{uuid.uuid4().hex}"
            host.subagent_stops.start(output.reply, Choice(host.stop_token, "Stop", "danger"))
            output.subagent_stops = host.subagent_stops

    def _end_live(self, output: LiveOutput) -> None:
        output.stop_live()
        self.host.stop_token = ""  # a press from now on finds the turn over
        self.host.subagent_stops.end()

    # ---- the final -------------------------------------------------------------------------

    def _footer(self, output: LiveOutput) -> str:
        """The lines under the answer: a /compact suggestion when the context crossed 80% or 90%
        (once per crossing), then the tools used and the context and cost, one line each. (The
        prompt result's `usage` counts the turn's tokens but not the window they fill, so the
        context share comes from the session's `usage_update`s.)"""
        host = self.host
        usage = host.usage
        percent = context_percent(usage)
        level = compact_level(percent)
        hint = ""
        if level > host.compact_told:
            hint = compact_hint(level, host.surface.capabilities.command_prefixes[0])
        if percent is not None:  # unknown context use leaves what was said in force
            host.compact_told = level
        lines = [
            output.progress.final_notes(),  # what the agent warned of, a compaction
            output.progress.tool_summary() if host.services.settings.tool_summary else "",
            usage_footer(usage),
            approvals_footer(self.approvals),
        ]
        return join_paragraphs(hint, "\n".join(line for line in lines if line))

    def _as_file(self, final: str) -> tuple[str, OutgoingFile | None]:
        """A reply longer than `reply_file_after` messages, where the surface takes uploads, is
        a short summary here and the whole reply as a .md file after it."""
        after = self.host.services.settings.reply_file_after
        caps = self.host.surface.capabilities
        if not after or not caps.max_upload_bytes:
            return final, None
        if len(split_message(final, caps.max_chars, caps.count)) <= after:
            return final, None
        summary, whole = reply_as_file(final)
        if len(whole.data) > caps.max_upload_bytes:
            return final, None
        return summary, whole

    async def _after_final(self, output: LiveOutput, whole: OutgoingFile | None) -> None:
        """After the answer is out: the long reply's file, the agent's files, and the agent's
        command menu. Nothing here can undo the answer: a failure is a line, or a log line."""
        host = self.host
        notes: list[str] = []
        if whole is not None:
            try:
                await host.surface.send_file(host.key, whole)
            except SurfaceError as exc:
                log.warning("%s: the reply as a file was refused: %s", host.key, exc)
                # the summary alone would lose the answer
                said = "The full reply could not be attached; here it is as text."
                await host.say(join_paragraphs(said, whole.data.decode()))
        if output.files:
            try:
                workspace = (await host.sessions.target()).spec.workspace
                notes = await deliver_files(host.surface, host.key, output.files, workspace)
            except Exception as exc:  # a fault of ours: the files, not the turn
                host.log_fault(exc, "delivering the agent's files")
                notes = [fault_sentence(exc)]
        if notes:
            await host.say("\n".join(notes))
        host.sync_agent_menu()
