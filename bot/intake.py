"""`Intake`: every event a surface (or another replica) hands the bot, from arrival to dispatch.

In order: access (strangers get nothing, and are audited once an hour: `StrangerAudit`),
de-duplication (`StateStore.claim_event`; a relayed event was claimed by the replica that
received it), routing (`ConversationRouting.take`: served here, or handed to the replica serving
the conversation; a relayed message's files are taken up again, bot/relayed_files.py), then
dispatch: a Stop button to `/stop`, a subagent's Stop to bot/subagent_stop.py, a project button
to its handler, a queued message's Steer now / Stop and send to bot/busy_commands.py, a
question's button to the elicitation broker, any other button to the approval broker, a command
row to its handler, the answer to the agent's question that waits for typed text to that question
(bot/elicitation_broker.py), everything else to the conversation's runner as prompt text. A fault
of ours fails that event only, told in one sentence to whoever may chat."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import replace

import anyio

from bot.access import AccessPolicy
from bot.approval_commands import withheld_commands
from bot.audit import AuditLog
from bot.busy import INTERRUPT_TOKEN_PREFIX, STEER_TOKEN_PREFIX
from bot.busy_commands import busy_pressed
from bot.chat_runner import ChatRunner
from bot.cluster import RelayedEvent
from bot.commands import STOP, ParsedCommand, parse_command, run_command
from bot.conversations import Conversations
from bot.delivery import Delivery
from bot.elicitation_broker import ELICIT_TOKEN_PREFIX
from bot.faults import fault_sentence, log_fault, told_without_store
from bot.permissions import ApprovalBroker
from bot.project_commands import PROJECT_TOKEN_PREFIX, project_pressed
from bot.relayed_files import files_left, reattach
from bot.routing import ConversationRouting
from bot.store import StateStore
from bot.subagent_stop import SUBSTOP_TOKEN_PREFIX, subagent_stop_pressed
from bot.turn import STOP_TOKEN_PREFIX
from config import Settings
from surfaces.abilities import RebuildsFiles
from surfaces.base import ChoiceAnswer, Inbound, Surface

__all__ = ["STRANGERS_REMEMBERED", "STRANGER_AUDIT_EVERY", "Intake", "StrangerAudit"]

log = logging.getLogger(__name__)

# A stranger's events are audited once per this many seconds per person, and this many
# strangers remembered: a group's chatter cannot flood the audit log.
STRANGER_AUDIT_EVERY = 3600.0
STRANGERS_REMEMBERED = 10_000

Event = Inbound | ChoiceAnswer


class StrangerAudit:
    """A stranger's event, audited once per person and surface per `STRANGER_AUDIT_EVERY`."""

    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit
        self._last: OrderedDict[tuple[str, str], float] = OrderedDict()

    async def record(self, event: Event) -> None:
        who = (event.key.surface, event.user.id)
        now = time.monotonic()
        last = self._last.get(who)
        if last is not None and now - last < STRANGER_AUDIT_EVERY:
            return
        self._last[who] = now
        self._last.move_to_end(who)
        if len(self._last) > STRANGERS_REMEMBERED:
            self._last.popitem(last=False)
        action = "press" if isinstance(event, ChoiceAnswer) else "message"
        await self._audit.refused(event.key.surface, event.user.id, "stranger", event=action)


class Intake:
    """See the module's doc. Built when the surfaces are known; `on_event` is what they call."""

    def __init__(
        self,
        surfaces: Mapping[str, Surface],
        *,
        settings: Settings,
        store: StateStore,
        access: AccessPolicy,
        audit: AuditLog,
        approvals: ApprovalBroker,
        routing: ConversationRouting,
        conversations: Conversations,
        delivery: Delivery,
        rebuilders: Mapping[str, RebuildsFiles],
    ) -> None:
        self._surfaces = surfaces
        self._rebuilders = rebuilders  # by surface name: a relayed message's files taken up
        self._settings = settings
        self._store = store
        self._access = access
        self._audit = audit
        self._approvals = approvals
        self._routing = routing
        self._conversations = conversations
        self._delivery = delivery
        self._strangers = StrangerAudit(audit)

    async def on_event(self, event: Event) -> None:
        """Accept one event. Returns when it is queued or answered, not when its reply is done."""
        queued = False
        try:
            queued = await self.accept_event(event)
        except Exception as exc:  # a fault of ours: this event only, the adapter goes on
            await self.event_fault(event, exc)
        finally:
            # A queued message's runner signals when its turn is done; anything else is done now.
            if not queued and isinstance(event, Inbound) and event.handled is not None:
                event.handled.set()

    async def accept_event(self, event: Event, relayed: RelayedEvent | None = None) -> bool:
        """Handle the event; True when a message was queued for a turn. A `relayed` event was
        claimed by the replica that received it."""
        surface = self._surfaces[event.key.surface]
        if not self._access.may_chat(event.key.surface, event.user):
            await self._strangers.record(event)
            return False  # strangers get nothing back
        if relayed is None and not await self._store.claim_event(
            f"{event.key.surface}:{event.event_id}", self._settings.dedupe_ttl
        ):
            log.info("dropping a redelivered event %s", event.event_id)
            return False
        if not await self._routing.take(event, relayed.hops if relayed else 0):
            return False  # handed to the replica serving this conversation
        # one runner per lease: its release lets the lease go
        runner = self._conversations.runner(surface, event.key)
        if relayed is not None and relayed.files and isinstance(event, Inbound):
            event, left = reattach(event, relayed, self._rebuilders.get(surface.name))
            if left:
                await self._delivery.deliver(surface, event.key, files_left(left))
        if isinstance(event, ChoiceAnswer):
            await self._pressed(surface, runner, event)
            return False
        parsed = parse_command(
            surface.capabilities.command_prefixes,
            event.text,
            runner.agent_commands,
            withheld_commands(runner),
        )
        if parsed is not None and parsed.command.handler is not None:
            with runner.held():
                await run_command(runner, parsed, event.user)
            return False
        if await runner.services.elicitations.take_text(event):
            return False  # the answer to the agent's open question, not a prompt
        if parsed is not None:  # the agent's (/compact), however this surface spells it
            event = replace(event, text=f"/{parsed.command.name} {parsed.args}".rstrip())
        await runner.submit(event)  # everything else is prompt text as typed
        return True

    async def _pressed(self, surface: Surface, runner: ChatRunner, press: ChoiceAnswer) -> None:
        if press.token.startswith(STOP_TOKEN_PREFIX):
            await self._stop_pressed(surface, press)
        elif press.token.startswith(SUBSTOP_TOKEN_PREFIX):

            async def tell(press: ChoiceAnswer, text: str) -> None:
                await self._tell_presser(surface, press, text)

            here = self._conversations.get(press.key)
            await subagent_stop_pressed(
                press, here, self._conversations, self._approvals, self._access, self._audit, tell
            )
        elif press.token.startswith(PROJECT_TOKEN_PREFIX):
            with runner.held():
                await project_pressed(runner, press)
        elif press.token.startswith((STEER_TOKEN_PREFIX, INTERRUPT_TOKEN_PREFIX)):
            with runner.held():
                await busy_pressed(runner, press, self._conversations)
        elif press.token.startswith(ELICIT_TOKEN_PREFIX):
            await runner.services.elicitations.answer(press)
        else:
            await self._approvals.answer(press)

    async def _stop_pressed(self, surface: Surface, press: ChoiceAnswer) -> None:
        """A live reply's Stop button: what /stop does, for the person who asked, approvers
        and admins; anyone else, or a press after the turn ended, is told why nothing happens."""
        runner = self._conversations.get(press.key)
        if runner is None or not runner.stop_token or runner.stop_token != press.token:
            # a live reply's button pressed from another conversation: audited, told the same
            shown = [r.key for r in self._conversations if r.stop_token == press.token]
            await self._approvals.refuse_misplaced(press, shown[0] if shown else None, "stop")
            await self._tell_presser(surface, press, "That reply has already finished.")
            return
        requester = runner.last_requester
        requester_id = requester.id if requester is not None else ""
        if not self._access.may_approve(press.key.surface, press.user, requester_id):
            who = requester.label if requester is not None else "the person who asked"
            await self._tell_presser(surface, press, f"Only {who} or an approver can stop this.")
            log.info("refused a stop press from %s", press.user.id)
            await self._audit.refused(
                press.key.surface, press.user.id, "stop", requester=requester_id
            )
            return
        runner.stop_token = ""  # one press stops; a second finds the turn over
        with runner.held():
            await run_command(runner, ParsedCommand(STOP, ""))

    async def _tell_presser(self, surface: Surface, press: ChoiceAnswer, text: str) -> None:
        if press.notify is not None:
            await press.notify(text)
        else:  # no way to tell only them: the chat hears it
            await self._delivery.deliver(surface, press.key, text)

    async def event_fault(self, event: Event, exc: Exception) -> None:
        runner = self._conversations.get(event.key)
        if runner is not None:
            runner.log_fault(exc, "handling an event", event=event.event_id)
        else:
            log_fault(exc, "handling an event", event.key, None, event=event.event_id)
        surface = self._surfaces.get(event.key.surface)
        try:
            if surface is not None and self._access.may_chat(event.key.surface, event.user):
                with anyio.move_on_after(self._settings.request_timeout):
                    if told_without_store(exc):  # the ledger is what failed
                        async with self._delivery.open_reply(surface, event.key) as reply:
                            await reply.finish(fault_sentence(exc))
                    else:
                        await self._delivery.deliver(surface, event.key, fault_sentence(exc))
        except Exception as again:  # already logged once; the surface may be what fails
            log.warning("could not tell %s about the fault: %r", event.key, again)
