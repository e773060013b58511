"""What people do about a message sent while the agent works (bot/busy.py): the queued
acknowledgement's buttons (`busy_pressed`: **Steer now**, **Stop and send**), the typed
`/steer TEXT` and `/interrupt TEXT`, and `/busy [MODE]` (what happens without a press here).

Who may press: the person who wrote the message, approvers and admins (`AccessPolicy.may_approve`,
as for the live reply's Stop); anyone else is told and audited. A press counts once; a press from
another conversation is refused through `ApprovalBroker.refuse_misplaced`; a press after the
message went to the agent is told so. `/busy` may be set by anyone allowed to chat here: it is
their conversation, and every mode only moves their own messages or stops a turn /stop could."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from bot.busy import BUSY_MODES, GONE, QUEUED, STEER_TOKEN_PREFIX, Moved
from bot.chat_runner import ChatRunner
from bot.command_context import CommandContext
from surfaces.base import ChoiceAnswer, Inbound

log = logging.getLogger(__name__)

_MEANS = {
    "queue": "a message sent while the agent works waits for its reply",
    "steer": "a message sent while the agent works goes into its running reply",
    "interrupt": "a message sent while the agent works stops its reply and goes next",
}


async def busy_pressed(
    runner: ChatRunner, press: ChoiceAnswer, runners: Iterable[ChatRunner]
) -> None:
    """A queued message's Steer now / Stop and send, pressed in `runner`'s conversation."""
    services = runner.services
    found = runner.busy.find(press.token)
    action = "steer" if press.token.startswith(STEER_TOKEN_PREFIX) else "interrupt"
    if found is None:
        shown = next((r.key for r in runners if r.busy.find(press.token) is not None), None)
        await services.approvals.refuse_misplaced(press, shown, action)
        await _tell(runner, press, GONE)
        return
    waiting, action = found
    writer = waiting.inbound.user
    if not services.access.may_approve(press.key.surface, press.user, writer.id):
        await _tell(runner, press, f"Only {writer.label} or an approver can do this.")
        log.info("refused a %s press from %s", action, press.user.id)
        await services.audit.refused(press.key.surface, press.user.id, action, requester=writer.id)
        return
    control = runner.busy
    control.spend(waiting)  # one press; a second finds the message moved on
    if action == "steer":
        moved = await control.steer(waiting, press.user)
    else:
        moved = await control.interrupt(waiting, press.user)
    if moved.queued:
        await _tell(runner, press, moved.sentence)
        await control.reacknowledge(waiting, moved.sentence)
    else:
        control.close(waiting, moved.sentence)


async def steer(context: CommandContext, text: str) -> str:
    """/steer TEXT: into the running turn; with none running, an ordinary prompt."""
    return await _typed(context, text, "steer")


async def interrupt(context: CommandContext, text: str) -> str:
    """/interrupt TEXT: stop the running turn and send TEXT next; with none, a prompt."""
    return await _typed(context, text, "interrupt")


async def _typed(context: CommandContext, text: str, action: str) -> str:
    runner = context.runner
    who = context.asker
    if not text:
        return f"Write the message after it: {context.prefix}{action} TEXT."
    if who is None:  # typed commands always have someone who typed them
        return ""
    inbound = Inbound(runner.key, who, text, f"{action}-{uuid.uuid4().hex}")
    if not runner.answering:
        await runner.submit(inbound)  # nothing to steer into or stop: it is the next prompt
        return ""
    waiting = await runner.enqueue(inbound)
    if waiting is None:
        return ""  # the queue is full (said)
    moved: Moved
    if action == "steer":
        moved = await runner.busy.steer(waiting, who)
    else:
        moved = await runner.busy.interrupt(waiting, who)
    if moved.queued:  # says why in the acknowledgement, which offers Stop and send
        await runner.busy.acknowledge(waiting, f"{QUEUED} {moved.sentence}")
        return ""
    return "" if moved.injected else moved.sentence


async def busy(context: CommandContext, args: str) -> str:
    """/busy shows this conversation's busy mode; /busy MODE sets it; /busy default forgets it."""
    runner = context.runner
    wanted = args.strip().lower()
    default = runner.services.settings.busy_mode
    if not wanted:
        mode = await runner.busy.mode()
        return (
            f"Busy mode here: {mode} ({_MEANS[mode]}). "
            f"{context.prefix}busy {'|'.join(BUSY_MODES)} changes it; "
            f"{context.prefix}busy default follows the setting ({default})."
        )
    if wanted == "default":
        await runner.busy.set_mode(None)
        return f"Busy mode here follows the setting again: {default} ({_MEANS[default]})."
    if wanted not in BUSY_MODES:
        return f"Busy mode is one of {', '.join(BUSY_MODES)} (or default)."
    await runner.busy.set_mode(wanted)
    said = f"Busy mode here is now {wanted}: {_MEANS[wanted]}."
    session = runner.sessions.current
    if wanted == "steer" and session is not None and not session.steering:
        said += " This agent does not take messages mid-reply, so they wait in the queue."
    return said


async def _tell(runner: ChatRunner, press: ChoiceAnswer, text: str) -> None:
    if press.notify is not None:
        await press.notify(text)
    else:  # no way to tell only them: the chat hears it
        await runner.say(text)
