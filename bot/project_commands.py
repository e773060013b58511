"""The commands that choose where a conversation works: /project (list, switch, an admin's
bind of this thread or the whole chat; the list as buttons for the person who asked, where the
surface has them) and /agent (the project's agents)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from bot.chat_runner import ChatRunner
from bot.command_context import CommandContext, answer
from bot.projects import Project
from surfaces.base import Choice, ChoiceAnswer, ConversationKey, MessageRef
from surfaces.bounded import BoundedMap

_BIND_WORDS = {"bind": False, "bindchat": True}  # word -> binds the whole chat, not the thread

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


def _usable(context: CommandContext) -> list[Project]:
    who = context.asker
    if who is None:
        return []
    services = context.runner.services
    return services.plans.projects.usable(services.access, context.runner.key.surface, who.id)


async def _offer_projects(context: CommandContext, prompt: str, projects: list[Project]) -> bool:
    """The list as buttons, only for the person who asked; False where the surface has none."""
    who = context.asker
    runner = context.runner
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
    await answer(project, CommandContext(runner, press.user), offer.project)


async def _tell(runner: ChatRunner, press: ChoiceAnswer, text: str) -> None:
    if press.notify is not None:
        await press.notify(text)
    else:
        await runner.say(text)


async def project(context: CommandContext, args: str) -> str:
    """`/project` lists; `/project NAME` switches; an admin's `/project bind NAME` also binds
    this thread or topic, `/project bindchat NAME` the whole chat (group or channel)."""
    runner = context.runner
    prefix = context.prefix
    current = (await runner.sessions.target()).project
    usable = _usable(context)
    words = args.split()
    if not words:
        if not usable:
            return "There is no project you may use here."
        shown = [f"{p.name} (current)" if p is current else p.name for p in usable]
        listing = "Projects: " + ", ".join(shown) + f"\nSwitch with {prefix}project NAME."
        others = [p for p in usable if p is not current]
        if others and await _offer_projects(context, listing, others):
            return ""  # the buttons' prompt is the list
        return listing
    whole_chat = _BIND_WORDS.get(words[0].lower())
    if whole_chat is not None:
        words = words[1:]
    if len(words) != 1:
        return f"Name one project: {prefix}project NAME (or {prefix}project bind NAME)."
    wanted = words[0]
    chosen = next((p for p in usable if p.name.casefold() == wanted.casefold()), None)
    if chosen is None:  # the same sentence whether it exists or not: nothing leaks
        return f"You have no project named {wanted}; {prefix}project lists yours."
    bound = ""
    if whole_chat is not None:
        said = await _bind(context, chosen, whole_chat)
        if said is None:
            return "Only an admin can bind this place to a project."
        bound = said
    if chosen is current:
        return bound or f"Already in project {chosen.name}."
    if runner.running:
        return " ".join(
            part for part in (bound, "Wait for the current reply (or stop it) to switch.") if part
        )
    target = runner.services.plans.target(chosen)
    await runner.sessions.switch(target)
    switched = (
        f"Switched to project {chosen.name} ({chosen.workspace}, agent {target.agent.name});"
        " a new agent session starts."
    )
    return f"{switched}\n{bound}" if bound else switched


async def _bind(context: CommandContext, chosen: Project, whole_chat: bool) -> str | None:
    """An admin binds this thread (or the whole chat) to `chosen`: the sentence saying so; None
    (audited) for anyone else."""
    runner = context.runner
    services = runner.services
    action = "project bindchat" if whole_chat else "project bind"
    if not context.asked_by_admin():
        await services.audit.refused(
            runner.key.surface, context.asker_id, action, project=chosen.name
        )
        return None
    key = runner.key
    place = ConversationKey(key.surface, key.chat) if whole_chat else key
    await services.store.put_place(place, chosen.name)
    await services.audit.admin(
        key.surface, context.asker_id, action, project=chosen.name, place=str(place)
    )
    where = "this chat" if whole_chat or not key.thread else "this thread"
    return f"New conversations in {where} start in project {chosen.name}."


async def agent(context: CommandContext, wanted: str) -> str:
    runner = context.runner
    prefix = context.prefix
    target = await runner.sessions.target()
    current = target.project
    if not wanted:
        shown = [f"{a.name} (current)" if a is target.agent else a.name for a in current.agents]
        tail = f"\nSwitch with {prefix}agent NAME." if len(current.agents) > 1 else ""
        return f"Agents of project {current.name}: " + ", ".join(shown) + tail
    chosen = current.agent_named(wanted)
    if chosen is None:
        offered = ", ".join(a.name for a in current.agents)
        return f"Project {current.name} does not offer the agent {wanted}; it offers: {offered}."
    if chosen is target.agent:
        return f"Already using the agent {chosen.name}."
    if runner.running:
        return "Wait for the current reply (or stop it) before switching agents."
    await runner.sessions.switch(runner.services.plans.target(current, chosen))
    return f"Switched to the agent {chosen.name} in project {current.name}; a new session starts."
