"""The commands about the conversation's agent session: /new, /stop, and /sessions and /resume
(the sessions themselves are gathered and picked by bot/session_history.py)."""

from __future__ import annotations

import time

from bot.agent_plans import AgentTarget
from bot.command_context import CommandContext
from bot.notices import stop_reply
from bot.session_history import SessionListing, find, gather, listing_text


async def new(context: CommandContext, args: str) -> str:
    runner = context.runner
    await runner.stop()
    await runner.sessions.forget()
    return "Started a fresh conversation; the agent will not see earlier messages."


async def stop(context: CommandContext, args: str) -> str:
    stopped, dropped = await context.runner.stop()
    return stop_reply(stopped, dropped)


async def _listing(context: CommandContext, target: AgentTarget) -> SessionListing:
    """The sessions of this conversation in its project (`bot.session_history.gather`)."""
    runner = context.runner
    services = runner.services
    client = await services.client(target)
    binding = await services.store.get_binding(runner.key)
    current = runner.sessions.current
    return await gather(
        services.store,
        runner.key,
        client,
        project=target.project.name,
        workspace=target.spec.workspace,
        current=current.session_id if current else (binding.session_id if binding else ""),
        admin=context.asked_by_admin(),
    )


def _project_refused(context: CommandContext, target: AgentTarget) -> str:
    """One sentence when the person may not use the conversation's project, else ""."""
    who = context.asker
    runner = context.runner
    if who is not None and target.project.may_use(
        runner.services.access, runner.key.surface, who.id
    ):
        return ""
    return "You may not use this conversation's project, so its sessions are not shown."


async def sessions(context: CommandContext, args: str) -> str:
    target = await context.runner.sessions.target()
    if refused := _project_refused(context, target):
        return refused
    listing = await _listing(context, target)
    return listing_text(listing, context.prefix, time.time())


async def resume(context: CommandContext, wanted: str) -> str:
    runner = context.runner
    prefix = context.prefix
    if not wanted:
        return f"Name the session to resume: {prefix}resume ID, with an ID {prefix}sessions shows."
    if runner.running:
        return "Wait for the current reply (or stop it) before resuming another session."
    target = await runner.sessions.target()
    if refused := _project_refused(context, target):
        return refused
    client = await runner.services.client(target)
    if not client.can_resume:
        return "The agent cannot take earlier sessions up again, so none can be resumed."
    picked = find(await _listing(context, target), wanted)
    if isinstance(picked, str):
        return picked
    if picked.current:
        return "This conversation is already in that session."
    if runner.sessions.in_use_elsewhere(client, picked.session_id):
        return "Another conversation is using that session right now."
    session = await runner.sessions.resume(picked.session_id)
    if session is None:
        return "The agent could not load that session; this conversation keeps its current one."
    if not picked.ours:  # an admin took up a session another conversation recorded
        await runner.services.audit.admin(
            runner.key.surface,
            context.asker_id,
            "resume another conversation's session",
            session=picked.session_id,
            conversation=str(runner.key),
        )
    title = f" ({picked.title})" if picked.title else ""
    return f"Resumed session {picked.session_id}{title}; the next message continues it."
