"""A message that arrives while the agent works (issue 24): it waits in the conversation's queue
(`Waiting`), and `BusyControl` decides what else happens to it.

- Queue (the default): it is acknowledged ("Queued — the agent is still working.") with two
  buttons where messages carry them: **Steer now** (only when the session's agent advertises
  steering, and the message is text alone) and **Stop and send**, each a one-time token tied to
  this message (`STEER_TOKEN_PREFIX`, `INTERRUPT_TOKEN_PREFIX`; presses: bot/busy_commands.py).
- Steer: the text goes into the running turn through the agent's `_session/steering`
  (`AcpSession.steer`; never tried on an agent that did not advertise it); the live reply shows
  it as a quoted line with the person's name, kept in the final. An agent that answers that a
  new prompt is required (or that it started a turn of its own, whose output would reach nobody
  here) gets it as the next prompt, ahead of the queue.
- Interrupt: the running turn is cancelled as /stop cancels it (its partial output kept), the
  queue stays, and this message goes next, ahead of it.

Without a press, the conversation's busy mode decides (`/busy`, kept in the state store as the
conversation setting `BUSY_SETTING`; else `SWITCHBOARD_BUSY_MODE`). A message moved to the front
keeps its journal entry until a turn takes it; a steered one's entry is closed once injected."""

from __future__ import annotations

import logging
import secrets
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from acp import AGENT_ERRORS, AcpSteeringUnsupported, SteerOutcome
from bot.agent_sessions import ConversationSessions
from bot.services import ConversationServices
from bot.store import StoreError
from bot.turn_journal import TurnJournal
from bot.turn_output import LiveOutput
from surfaces.base import Choice, ConversationKey, Inbound, MessageRef, Surface, UserRef
from surfaces.errors import SurfaceError

log = logging.getLogger(__name__)

STEER_TOKEN_PREFIX = "steer:"
INTERRUPT_TOKEN_PREFIX = "interrupt:"
BUSY_SETTING = "busy_mode"  # the conversation setting /busy keeps
BUSY_MODES = ("queue", "steer", "interrupt")
QUEUED = "Queued — the agent is still working."
NO_STEERING = "This agent does not take messages mid-reply, so this one waits its turn."
STEERED = "Steered into the running reply."
GOES_NEXT = "It goes to the agent next, ahead of the queue."
SENT_ON = "Sent to the agent."
GONE = "That message has already gone to the agent."
REFUSED = "The agent did not take it mid-reply, so it waits its turn."
DROPPED = "It was dropped with the queue."
ONLY_TEXT = "Only a message of text alone can be steered, so this one waits its turn."


@dataclass(slots=True, eq=False)
class Waiting:
    """A message in the conversation's queue. `ahead`: it goes next, alone, before the rest
    (interrupted for, or steered into a new prompt); `ack` the acknowledgement carrying its
    buttons (`ack_text` what it says), `tokens` their one-time tokens by action."""

    inbound: Inbound
    done: anyio.Event
    journal_id: str = ""  # its journal entry while it waits behind a running turn
    ahead: bool = False
    ack: MessageRef | None = None
    ack_text: str = ""
    tokens: dict[str, str] | None = None  # token -> "steer" | "interrupt"


@dataclass(frozen=True, slots=True)
class Moved:
    """What a steer or an interrupt did: `sentence` says it; `queued` (nothing happened, the
    message still waits for its turn) or `injected` (it is in the running turn now)."""

    sentence: str
    queued: bool = False
    injected: bool = False


class BusyHost(Protocol):
    """What busy handling reads and calls of its conversation (`ChatRunner`)."""

    services: ConversationServices
    surface: Surface
    key: ConversationKey
    sessions: ConversationSessions
    journal: TurnJournal
    queue: deque[Waiting]

    @property
    def live_output(self) -> LiveOutput | None:
        """The running turn's live reply while it answers, else None."""
        ...

    async def say(self, text: str) -> None: ...

    @property
    def stops(self) -> int:
        """How many times /stop dropped this conversation's queue."""
        ...

    def put_ahead(self, waiting: Waiting) -> None:
        """Move (or put back) `waiting` to the front of the queue, after others put ahead."""
        ...

    def put_back(self, waiting: Waiting, at: int) -> None:
        """Put `waiting` back at its place `at` in the queue."""
        ...


def steered_text(user: UserRef, text: str) -> str:
    """The injected message as the live reply shows it: a quote, with who wrote it."""
    lines = text.strip().splitlines() or [""]
    quoted = "\n".join(f"> {line}" if line else ">" for line in lines[1:])
    first = f"> **{user.label}:** {lines[0]}"
    return "\n\n" + (f"{first}\n{quoted}" if quoted else first) + "\n\n"


class BusyControl:
    """One conversation's busy handling; see the module's doc."""

    def __init__(self, host: BusyHost) -> None:
        self.host = host
        self._mode: str | None = None  # the conversation's own mode, once read ("" = none)

    # ---- the mode ------------------------------------------------------------------------------

    async def mode(self) -> str:
        """This conversation's busy mode: its own (`/busy`), else the process's setting."""
        host = self.host
        if self._mode is None:
            try:
                stored = await host.services.store.conversation_setting(host.key, BUSY_SETTING)
            except StoreError as exc:  # not kept: the process's mode meanwhile
                log.warning("%s: could not read the busy mode: %s", host.key, exc.reason)
                return host.services.settings.busy_mode
            self._mode = stored if stored in BUSY_MODES else ""
        return self._mode or host.services.settings.busy_mode

    async def set_mode(self, mode: str | None) -> None:
        """Keep `mode` for this conversation (None: follow the process's setting again)."""
        host = self.host
        await host.services.store.set_conversation_setting(host.key, BUSY_SETTING, mode)
        self._mode = mode or ""

    # ---- a message that arrives mid-turn -------------------------------------------------------

    async def arrived(self, waiting: Waiting) -> None:
        """A message joined the queue while a turn answers: the busy mode decides."""
        mode = await self.mode()
        user = waiting.inbound.user
        if mode == "interrupt":
            await self.host.say((await self.interrupt(waiting, user)).sentence)
        elif mode == "steer" and self.steerable(waiting):
            moved = await self.steer(waiting, user)
            if moved.queued:
                await self.acknowledge(waiting, f"{QUEUED} {moved.sentence}")
            elif not moved.injected:  # the quote in the live reply says it otherwise
                await self.host.say(moved.sentence)
        elif mode == "steer":
            session = self.host.sessions.current
            why = NO_STEERING if session is None or not session.steering else ONLY_TEXT
            await self.acknowledge(waiting, f"{QUEUED} {why}")
        else:
            await self.acknowledge(waiting)

    def steerable(self, waiting: Waiting) -> bool:
        """The agent advertises steering and the message is text alone."""
        session = self.host.sessions.current
        inbound = waiting.inbound
        return session is not None and session.steering and bool(inbound.text) and not inbound.files

    async def acknowledge(self, waiting: Waiting, text: str = QUEUED) -> None:
        """Say the message waits; with its buttons where the surface has them."""
        host = self.host
        caps = host.surface.capabilities
        waiting.ack_text = text
        if not (caps.message_buttons and caps.can_edit):  # buttons that could never go
            await host.say(f"{text} {self.typed_hint(waiting, caps.command_prefixes[0])}")
            return
        actions = ["steer", "interrupt"] if self.steerable(waiting) else ["interrupt"]
        waiting.tokens = {_token(action): action for action in actions}
        choices = [
            Choice(token, "Steer now" if action == "steer" else "Stop and send", _STYLE[action])
            for token, action in waiting.tokens.items()
        ]
        try:
            waiting.ack = await host.surface.send(host.key, text, buttons=choices)
        except SurfaceError as exc:  # the message waits all the same; said without buttons
            log.warning("%s: could not show the queued message's buttons: %s", host.key, exc)
            waiting.tokens = None
            await host.say(text)

    def typed_hint(self, waiting: Waiting, prefix: str) -> str:
        """What a surface without buttons (the terminal) may type instead of pressing them."""
        stop = f"{prefix}interrupt TEXT stops the reply and sends TEXT next."
        if not self.steerable(waiting):
            return stop
        return f"{prefix}steer TEXT adds TEXT to the running reply; {stop}"

    # ---- what a press (or a typed command, or the mode) does ------------------------------------

    def find(self, token: str) -> tuple[Waiting, str] | None:
        """The waiting message a button's token belongs to, and its action."""
        for waiting in self.host.queue:
            action = (waiting.tokens or {}).get(token)
            if action is not None:
                return waiting, action
        return None

    def spend(self, waiting: Waiting) -> None:
        """A press was taken: its buttons answer no other press."""
        waiting.tokens = None

    async def steer(self, waiting: Waiting, by: UserRef) -> Moved:
        """Inject the waiting message into the running turn (`by` asked for it)."""
        host = self.host
        if waiting not in host.queue:
            return Moved(GONE)
        session = host.sessions.current
        output = host.live_output
        if output is None or session is None or not session.busy:
            host.put_ahead(waiting)  # nothing to steer into: it is the next prompt
            return Moved(f"The agent is not answering right now. {GOES_NEXT}")
        if not session.steering:
            return Moved(NO_STEERING, queued=True)
        # Out of the queue while the agent is asked, so no turn takes it meanwhile.
        at = _remove(host.queue, waiting)
        stops = host.stops
        sent_at = len(output.text)  # the quote goes here, whatever streams in meanwhile
        try:
            with output.steering():  # the turn's final waits for the answer
                outcome = await session.steer(waiting.inbound.text)
        except AcpSteeringUnsupported:
            return await self._back(waiting, at, stops, NO_STEERING)
        except AGENT_ERRORS as exc:
            log.info("%s: steering was refused: %s", host.key, exc)
            return await self._back(waiting, at, stops, REFUSED)
        except BaseException:
            host.put_back(waiting, at)
            raise
        if outcome is not SteerOutcome.INJECTED:  # the agent wants it as a prompt of its own
            if await self._dropped(waiting, stops):
                return Moved(DROPPED)
            host.put_ahead(waiting)
            return Moved(f"The agent asked for it as a new prompt. {GOES_NEXT}")
        output.insert(sent_at, steered_text(waiting.inbound.user, waiting.inbound.text))
        await self._settled(waiting)
        log.info("%s: %s steered the running turn", host.key, by.id)
        return Moved(STEERED, injected=True)

    async def _back(self, waiting: Waiting, at: int, stops: int, why: str) -> Moved:
        """A steer that moved nothing: the message waits where it was, unless /stop dropped
        the queue meanwhile."""
        if await self._dropped(waiting, stops):
            return Moved(DROPPED)
        self.host.put_back(waiting, at)
        return Moved(why, queued=True)

    async def _dropped(self, waiting: Waiting, stops: int) -> bool:
        """/stop dropped the queue while this message was out of it: it goes too."""
        if self.host.stops == stops:
            return False
        await self._settled(waiting)
        return True

    async def _settled(self, waiting: Waiting) -> None:
        """The message waits no more: done, and out of the journal."""
        waiting.done.set()
        with anyio.CancelScope(shield=True):
            await self.host.journal.close([waiting.journal_id] if waiting.journal_id else [])

    async def interrupt(self, waiting: Waiting, by: UserRef) -> Moved:
        """Stop the running turn as /stop stops it (the queue stays) and send this next (`by`
        asked for it)."""
        host = self.host
        if waiting not in host.queue:
            return Moved(GONE)
        host.put_ahead(waiting)
        session = host.sessions.current
        if host.live_output is None or session is None or not session.busy:
            return Moved(f"The agent is not answering right now. {GOES_NEXT}")
        host.services.elicitations.decline_open(host.key)  # as /stop: an open question declined
        await session.cancel()
        log.info("%s: %s stopped the running turn for a waiting message", host.key, by.id)
        return Moved("Stopping the current reply; this message goes to the agent next.")

    # ---- the acknowledgement, once its message moved on ----------------------------------------

    def sent_on(self, waiting: Waiting) -> None:
        """A turn took the message: its acknowledgement says so and loses its buttons."""
        self.close(waiting, SENT_ON)

    def dropped(self, waiting: list[Waiting], prefix: str) -> None:
        for each in waiting:
            self.close(each, f"Dropped by {prefix}stop.")

    def close(self, waiting: Waiting, outcome: str) -> None:
        """Edit the acknowledgement to say `outcome`, without buttons (in the background: a
        turn does not wait for it)."""
        ref, waiting.ack, waiting.tokens = waiting.ack, None, None
        if ref is not None:
            text = f"{waiting.ack_text}\n{outcome}"
            self.host.services.spawn(self._edit(ref, text))

    async def reacknowledge(self, waiting: Waiting, why: str) -> None:
        """A press that moved nothing: the acknowledgement says why and keeps Stop and send."""
        ref = waiting.ack
        if ref is None:
            return
        waiting.tokens = {_token("interrupt"): "interrupt"}
        waiting.ack_text = f"{QUEUED} {why}"
        (token,) = waiting.tokens
        choices = [Choice(token, "Stop and send", _STYLE["interrupt"])]
        await self._edit(ref, waiting.ack_text, choices)()

    def _edit(
        self, ref: MessageRef, text: str, buttons: list[Choice] | None = None
    ) -> Callable[[], Coroutine[Any, Any, None]]:
        surface = self.host.surface

        async def edit() -> None:
            try:
                await surface.edit(ref, text, buttons=buttons or ())
            except Exception:  # in the app's task group: the message went on regardless
                log.warning("%s: could not update a queued message's note", ref.key, exc_info=True)

        return edit


_STYLE = {"steer": "primary", "interrupt": "danger"}


def _token(action: str) -> str:
    prefix = STEER_TOKEN_PREFIX if action == "steer" else INTERRUPT_TOKEN_PREFIX
    return prefix + secrets.token_urlsafe(12)


def _remove(queue: deque[Waiting], waiting: Waiting) -> int:
    """Take `waiting` (which is there) out of `queue`; returns where it was."""
    at = queue.index(waiting)
    del queue[at]
    return at
