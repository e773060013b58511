"""The agent's own commands that would switch its approvals off (`/allow-all on`, `/yolo`,
`/permissions`, `/approval-mode yolo`; the words are `acp.switches_approvals_off`'s, and the
session withholds those whose descriptions say so): never sent on, for anyone. The person is told
in one sentence that approvals are Switchboard's to manage, the refusal is audited, and /help and
the platform menus leave them out (the session's command list already does). The agent's approval
state is watched besides (acp/gate_watch.py): this only saves the round trip."""

from __future__ import annotations

from collections.abc import Sequence

from acp import switches_approvals_off
from bot.chat_runner import ChatRunner
from bot.command_context import CommandContext, Handler
from surfaces.base import ConversationKey
from surfaces.bounded import BoundedMap

# What each released conversation's session withheld: its next message may come before the
# agent lists its commands again.
_RELEASED: BoundedMap[ConversationKey, tuple[str, ...]] = BoundedMap(2000)


def withheld_commands(runner: ChatRunner) -> tuple[str, ...]:
    """The commands the conversation's session listed that would switch approvals off."""
    session = runner.sessions.current
    state = session.state if session is not None else None
    if state is None or not (state.commands or state.withheld_commands):  # none listed yet
        return _RELEASED.get(runner.key, ())
    return state.withheld_commands


def remember_withheld(runner: ChatRunner) -> None:
    """Before an idle runner lets its session go: what it withheld stays refused."""
    withheld = withheld_commands(runner)
    if withheld:
        _RELEASED.remember(runner.key, withheld)


def approvals_off(name: str, args: str = "", withheld: Sequence[str] = ()) -> bool:
    """Whether the agent command `name args` would switch approvals off."""
    return name in withheld or switches_approvals_off(name, args=args)


def refusal(name: str) -> Handler:
    """The answer to the agent command `name`, in place of sending it on."""

    async def refuse(context: CommandContext, args: str) -> str:
        key = context.runner.key
        await context.runner.services.audit.refused(
            key.surface, context.asker_id, "agent approvals command", command=name
        )
        return (
            f"Switchboard does not send /{name} to the agent: approvals are Switchboard's to "
            f"manage ({context.prefix}trust and the approval cards' “Trust this tool for this "
            "session” let tools run without asking in this session, a project's `approvals` "
            "setting does it for a project, and an operator who wants no approvals at all sets "
            "SWITCHBOARD_ALLOW_UNGATED_TOOLS)."
        )

    return refuse
