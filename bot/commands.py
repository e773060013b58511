"""The one command table: each row names a command, says what it does and how to answer it, so
adding a command is adding a row. Each surface declares its spellings (`command_prefixes` in its
capabilities; Slack and Discord add "!", since slash commands do not reach bots in Slack threads
and a bare "/" opens Discord's picker); help text and platform command menus are generated from
the table. /compact is the agent's, sent on only to an agent that lists it (bot/agent_commands.py).
Anything else that starts with a prefix is passed to the agent as typed, so agent-side
slash commands keep working; a doubled prefix (`//status`, `!!status`) is always the agent's,
sent on as `/status`, so an agent command named like one of ours stays reachable."""

from __future__ import annotations

import re
import secrets
import shlex
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from acp import AGENT_ERRORS
from bot.access import Role
from bot.agent_commands import compact, learn_agent_commands, mode_label, model_label
from bot.agent_plans import AgentTarget
from bot.approval_commands import approvals_off, refusal
from bot.chat_runner import ChatRunner
from bot.notices import stop_reply
from bot.projects import Project
from bot.session_history import SessionListing, find, gather, listing_text
from surfaces.base import Choice, ChoiceAnswer, ConversationKey, MessageRef, UserRef
from surfaces.bounded import BoundedMap

# Answers the command in `runner`'s conversation, given the text after the command's name.
Handler = Callable[[ChatRunner, str], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    summary: str
    args: str = ""
    handler: Handler | None = None  # None: the agent's command, sent to it as prompt text


# Who typed the command being answered (set by `run_command`), for the rows that depend on it:
# the projects a person may use, an admin's place binding, the sessions one may see and resume.
_ASKER: ContextVar[UserRef | None] = ContextVar("switchboard_command_asker", default=None)


def asker() -> UserRef | None:
    """The person whose command is being answered, or None (a Stop button press)."""
    return _ASKER.get()


async def _new(runner: ChatRunner, args: str) -> str:
    await runner.stop()
    await runner.sessions.forget()
    return "Started a fresh conversation; the agent will not see earlier messages."


async def _stop(runner: ChatRunner, args: str) -> str:
    stopped, dropped = await runner.stop()
    return stop_reply(stopped, dropped)


async def _status(runner: ChatRunner, args: str) -> str:
    services = runner.services
    session = runner.sessions.current
    target = await runner.sessions.target()
    spec = target.spec
    if session is not None:
        model = model_label(session.state) or "not reported by the agent"
    else:
        binding = await services.store.get_binding(runner.key)
        model = (binding.model if binding else "") or target.agent.model
        model = model or "the agent's default"
    agent = target.agent.name
    named = f"{agent}, " if agent != spec.backend.name else ""
    lines = [
        f"Agent: {spec.backend.name} ({named}{shlex.join(spec.argv)})",
        f"Model: {model}",
        f"Workspace: {spec.workspace}",
        f"Project: {target.project.name}",
        spec.isolation.summary(),
    ]
    state = session.state if session is not None else None
    if state is not None and state.mode:
        lines.append(f"Mode: {mode_label(state)}")
    if session is not None and session.gate_line:
        lines.append(f"Tool gate: {session.gate_line}")
    if state is not None and state.title:
        lines.append(f"Title: {state.title}")
    if runner.running:
        elapsed = time.monotonic() - runner.turn_started
        queued = f", {len(runner.queue)} queued" if runner.queue else ""
        lines.append(f"Turn: answering for {elapsed:.0f} s{queued}")
    else:
        lines.append("Turn: idle")
    usage = runner.usage
    if usage is not None:
        if usage.percent is not None:
            lines.append(f"Context: {usage.percent:.0f}% used")
        elif usage.used is not None and usage.size:
            share = 100 * usage.used / usage.size
            lines.append(f"Context: {usage.used:,} of {usage.size:,} tokens ({share:.0f}%)")
    if state is not None and state.credits is not None:
        lines.append(f"Credits used: {state.credits:.2f}")
    return "\n".join(lines)


async def _model(runner: ChatRunner, wanted: str) -> str:
    if runner.running:
        return "Wait for the current reply (or stop it) before switching models."
    session = await runner.sessions.session()
    prefix = runner.surface.capabilities.command_prefixes[0]
    if not wanted:
        if not session.models:
            return f"The agent does not list its models. Current: {session.model or 'default'}."
        shown = [f"{m} (current)" if m == session.model else m for m in session.models]
        return "Models: " + ", ".join(shown) + f"\nSwitch with {prefix}model ID."
    if session.models and wanted not in session.models:
        offered = ", ".join(session.models)
        return (
            f"The agent does not offer {wanted!r}; switch with {prefix}model and one of: {offered}."
        )
    await session.set_model(wanted)
    store = runner.services.store
    binding = await store.get_binding(runner.key)
    if binding is not None:
        await store.put_binding(runner.key, binding.with_model(wanted))
    return f"Model set to {wanted}."


# -- projects (issue 14) ---------------------------------------------------------------------

_BIND_WORDS = {"bind": False, "bindchat": True}  # word -> binds the whole chat, not the thread


def _usable(runner: ChatRunner) -> list[Project]:
    who = asker()
    if who is None:
        return []
    return runner.services.plans.projects.usable(runner.services.access, runner.key.surface, who.id)


PROJECT_TOKEN_PREFIX = "project:"


@dataclass(frozen=True, slots=True)
class _ProjectOffer:
    """Buttons `/project` showed one person: each token names a project; one press uses all."""

    key: ConversationKey
    user_id: str
    project: str
    group: str
    ref: MessageRef
    prompt: str


# Offers not pressed are forgotten past this many (an old press is then answered as expired).
_OFFERS: BoundedMap[str, _ProjectOffer] = BoundedMap(2000)


async def _offer_projects(runner: ChatRunner, prompt: str, projects: list[Project]) -> bool:
    """The list as buttons, only for the person who asked; False where the surface has none."""
    who = asker()
    if who is None or not runner.surface.capabilities.message_buttons:
        return False
    tokens = [PROJECT_TOKEN_PREFIX + secrets.token_urlsafe(12) for _ in projects]
    choices = [Choice(token, project.name) for token, project in zip(tokens, projects, strict=True)]
    ref = await runner.surface.ask_choice(runner.key, prompt, choices, allowed_users=[who.id])
    group = tokens[0]
    for token, project in zip(tokens, projects, strict=True):
        _OFFERS.remember(token, _ProjectOffer(runner.key, who.id, project.name, group, ref, prompt))
    return True


async def project_pressed(runner: ChatRunner, press: ChoiceAnswer) -> None:
    """A `/project` button: the switch, for the person it was offered to; once."""
    offer = _OFFERS.get(press.token)
    if offer is None or offer.key != press.key:
        await _tell(runner, press, "Those project buttons have expired; send /project again.")
        return
    if press.user.id != offer.user_id:
        await _tell(runner, press, "Only the person who asked can choose here.")
        return
    for token in [t for t, o in _OFFERS.items() if o.group == offer.group]:
        del _OFFERS[token]
    await runner.surface.close_choice(offer.ref, offer.prompt, f"Chose {offer.project}.")
    await run_command(runner, ParsedCommand(PROJECT, offer.project), press.user)


async def _tell(runner: ChatRunner, press: ChoiceAnswer, text: str) -> None:
    if press.notify is not None:
        await press.notify(text)
    else:
        await runner.say(text)


async def _project(runner: ChatRunner, args: str) -> str:
    """`/project` lists; `/project NAME` switches; an admin's `/project bind NAME` also binds
    this thread or topic, `/project bindchat NAME` the whole chat (group or channel)."""
    prefix = runner.surface.capabilities.command_prefixes[0]
    current = (await runner.sessions.target()).project
    usable = _usable(runner)
    words = args.split()
    if not words:
        if not usable:
            return "There is no project you may use here."
        shown = [f"{p.name} (current)" if p is current else p.name for p in usable]
        listing = "Projects: " + ", ".join(shown) + f"\nSwitch with {prefix}project NAME."
        others = [p for p in usable if p is not current]
        if others and await _offer_projects(runner, listing, others):
            return ""  # the buttons' prompt is the list
        return listing
    whole_chat = _BIND_WORDS.get(words[0].lower())
    if whole_chat is not None:
        words = words[1:]
    if len(words) != 1:
        return f"Name one project: {prefix}project NAME (or {prefix}project bind NAME)."
    wanted = words[0]
    project = next((p for p in usable if p.name.casefold() == wanted.casefold()), None)
    if project is None:  # the same sentence whether it exists or not: nothing leaks
        return f"You have no project named {wanted}; {prefix}project lists yours."
    bound = ""
    if whole_chat is not None:
        who = asker()
        services = runner.services
        action = "project bindchat" if whole_chat else "project bind"
        if who is None or services.access.role(runner.key.surface, who.id) < Role.ADMIN:
            await services.audit.refused(
                runner.key.surface, who.id if who else "", action, project=project.name
            )
            return "Only an admin can bind this place to a project."
        key = runner.key
        place = ConversationKey(key.surface, key.chat) if whole_chat else key
        await services.store.put_place(place, project.name)
        await services.audit.admin(
            key.surface, who.id, action, project=project.name, place=str(place)
        )
        where = "this chat" if whole_chat or not key.thread else "this thread"
        bound = f"New conversations in {where} start in project {project.name}."
    if project is current:
        return bound or f"Already in project {project.name}."
    if runner.running:
        return " ".join(
            part for part in (bound, "Wait for the current reply (or stop it) to switch.") if part
        )
    target = runner.services.plans.target(project)
    await runner.sessions.switch(target)
    switched = (
        f"Switched to project {project.name} ({project.workspace}, agent {target.agent.name});"
        " a new agent session starts."
    )
    return f"{switched}\n{bound}" if bound else switched


async def _agent(runner: ChatRunner, wanted: str) -> str:
    prefix = runner.surface.capabilities.command_prefixes[0]
    target = await runner.sessions.target()
    project = target.project
    if not wanted:
        shown = [f"{a.name} (current)" if a is target.agent else a.name for a in project.agents]
        tail = f"\nSwitch with {prefix}agent NAME." if len(project.agents) > 1 else ""
        return f"Agents of project {project.name}: " + ", ".join(shown) + tail
    agent = project.agent_named(wanted)
    if agent is None:
        offered = ", ".join(a.name for a in project.agents)
        return f"Project {project.name} does not offer the agent {wanted}; it offers: {offered}."
    if agent is target.agent:
        return f"Already using the agent {agent.name}."
    if runner.running:
        return "Wait for the current reply (or stop it) before switching agents."
    await runner.sessions.switch(runner.services.plans.target(project, agent))
    return f"Switched to the agent {agent.name} in project {project.name}; a new session starts."


async def _help(runner: ChatRunner, args: str) -> str:
    if not runner.agent_commands:  # none known yet: the agent lists them once a session opens
        try:
            await learn_agent_commands(runner)
        except AGENT_ERRORS:
            pass  # ours are listed all the same; the next message tells why the agent failed
    return help_text(runner.surface.capabilities.command_prefixes, runner.agent_commands)


async def _compact(runner: ChatRunner, args: str) -> str:
    return await compact(runner, args, asker())


# ---- /sessions and /resume (bot/session_history.py) --------------------------------------------
def _is_admin(runner: ChatRunner) -> bool:
    who = asker()
    return who is not None and runner.services.access.role(runner.key.surface, who.id) >= Role.ADMIN


async def _listing(runner: ChatRunner, target: AgentTarget) -> SessionListing:
    """The sessions of this conversation in its project (`bot.session_history.gather`)."""
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
        admin=_is_admin(runner),
    )


def _project_refused(runner: ChatRunner, target: AgentTarget) -> str:
    """One sentence when the person may not use the conversation's project, else ""."""
    who = asker()
    access = runner.services.access
    if who is not None and target.project.may_use(access, runner.key.surface, who.id):
        return ""
    return "You may not use this conversation's project, so its sessions are not shown."


async def _sessions(runner: ChatRunner, args: str) -> str:
    target = await runner.sessions.target()
    if refused := _project_refused(runner, target):
        return refused
    listing = await _listing(runner, target)
    prefix = runner.surface.capabilities.command_prefixes[0]
    return listing_text(listing, prefix, time.time())


async def _resume(runner: ChatRunner, wanted: str) -> str:
    prefix = runner.surface.capabilities.command_prefixes[0]
    if not wanted:
        return f"Name the session to resume: {prefix}resume ID, with an ID {prefix}sessions shows."
    if runner.running:
        return "Wait for the current reply (or stop it) before resuming another session."
    target = await runner.sessions.target()
    if refused := _project_refused(runner, target):
        return refused
    client = await runner.services.client(target)
    if not client.can_resume:
        return "The agent cannot take earlier sessions up again, so none can be resumed."
    picked = find(await _listing(runner, target), wanted)
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
        who = asker()
        await runner.services.audit.admin(
            runner.key.surface,
            who.id if who else "",
            "resume another conversation's session",
            session=picked.session_id,
            conversation=str(runner.key),
        )
    title = f" ({picked.title})" if picked.title else ""
    return f"Resumed session {picked.session_id}{title}; the next message continues it."


NEW = Command("new", "start a fresh agent session for this conversation", handler=_new)
COMPACT = Command(
    "compact", "ask the agent to summarise the conversation to free context", handler=_compact
)
AGENTS_COMPACT = Command(COMPACT.name, COMPACT.summary)  # for an agent listing it: sent on
STOP = Command(
    "stop", "stop the running reply, drop queued messages and pending approvals", handler=_stop
)
STATUS = Command(
    "status", "agent, model, workspace, what is running, context used", handler=_status
)
MODEL = Command("model", "list the agent's models, or switch to one", "[ID]", handler=_model)
PROJECT = Command(
    "project",
    "list your projects, switch to one (an admin's bind also binds this thread, bindchat the chat)",
    "[[bind|bindchat] NAME]",
    handler=_project,
)
AGENT = Command("agent", "list this project's agents, or switch to one", "[NAME]", handler=_agent)
SESSIONS = Command(
    "sessions", "this conversation's recent agent sessions, to resume one", handler=_sessions
)
RESUME = Command("resume", "continue an earlier agent session", "ID", handler=_resume)
HELP = Command("help", "this list", handler=_help)

COMMANDS: tuple[Command, ...] = (
    NEW,
    COMPACT,
    STOP,
    STATUS,
    MODEL,
    PROJECT,
    AGENT,
    SESSIONS,
    RESUME,
    HELP,
)
_BY_NAME = {command.name: command for command in COMMANDS}

_RE_COMMAND = re.compile(r"^([a-z][a-z0-9_-]*)(?:@[\w.]+)?(?:\s+(.*))?$", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    command: Command
    args: str


def parse_command(
    prefixes: Sequence[str],
    text: str,
    agent_commands: Sequence[str] = (),
    withheld: Sequence[str] = (),
) -> ParsedCommand | None:
    """Our command, or the agent's own spelled with this surface's prefix (`!review` for the
    agent's /review: `agent_commands` are the names it listed), or None (plain text, or another
    slash command for the agent). An agent command that would switch its approvals off (by its
    name and arguments, or one of `withheld`) is answered by a refusal instead."""
    stripped = text.strip()
    for prefix in prefixes:
        if stripped.startswith(prefix * 2):  # the agent's own, even when named like ours
            match = _RE_COMMAND.match(stripped[2 * len(prefix) :])
            if match is None:
                return None
            return _agents(match.group(1), (match.group(2) or "").strip(), withheld)
        if stripped.startswith(prefix):
            match = _RE_COMMAND.match(stripped[len(prefix) :])
            if match is None:
                return None
            args = (match.group(2) or "").strip()
            command = _BY_NAME.get(match.group(1).lower())
            if command is COMPACT and any(n.lower() == COMPACT.name for n in agent_commands):
                command = AGENTS_COMPACT  # sent on as typed
            if command is None:
                name = match.group(1)
                if approvals_off(name, args, withheld):
                    return _agents(name, args, withheld)
                if prefix != "/" and name in agent_commands:
                    return _agents(name, args, withheld)
                return None
            return ParsedCommand(command, args)
    return None


def _agents(name: str, args: str, withheld: Sequence[str]) -> ParsedCommand:
    """The agent's command `name`, or the refusal of one that would switch approvals off."""
    if approvals_off(name, args, withheld):
        return ParsedCommand(Command(name, "refused", handler=refusal(name, asker)), args)
    return ParsedCommand(Command(name, "the agent's own command"), args)


async def run_command(runner: ChatRunner, parsed: ParsedCommand, by: UserRef | None = None) -> None:
    """Answer one of our own commands in its conversation, typed by `by`; an agent failure is
    the answer."""
    handler = parsed.command.handler
    assert handler is not None, f"/{parsed.command.name} is the agent's to answer"
    token = _ASKER.set(by)
    try:
        answer = await handler(runner, parsed.args)
    except AGENT_ERRORS as exc:
        answer = str(exc)
    finally:
        _ASKER.reset(token)
    if answer:  # "": the handler has answered already (with buttons)
        await runner.say(answer)


def help_text(prefixes: Sequence[str], agent_commands: Sequence[str] = ()) -> str:
    prefix = prefixes[0] if prefixes else "/"
    lines = ["Commands:"]
    for command in COMMANDS:
        args = f" {command.args}" if command.args else ""
        lines.append(f"{prefix}{command.name}{args} — {command.summary}")
    if len(prefixes) > 1:
        others = " or ".join(prefixes[1:])
        lines.append(f"(each also works with {others} instead of {prefix})")
    shown = []
    for name in agent_commands:
        if approvals_off(name):
            continue  # never sent on: approvals are Switchboard's to manage
        ours = _BY_NAME.get(name.lower())
        if ours is None:  # in the surface's spelling (Slack turns `!name` into `/name`)
            shown.append(f"{prefix}{name}")
        elif ours is not COMPACT:  # ours answers /name: the agent's is reached doubled
            shown.append(f"{prefix}{prefix}{name}")
    if shown:
        lines.append("The agent also understands: " + ", ".join(shown))
    lines.append(
        f"A doubled prefix is the agent's own command: {prefix}{prefix}status sends it /status."
    )
    lines.append("Anything else is sent to the agent.")
    return "\n".join(lines)


def command_menu() -> list[tuple[str, str]]:
    """(name, description) pairs for platform command menus."""
    return [(command.name, command.summary) for command in COMMANDS]
