"""/trust: what this conversation's agent session runs without asking (bot/trust.py), and who
allowed it. `/trust revoke N` and `/trust clear` take rules back: a rule may be taken back by the
person who made it, by an approver and by an admin; `/trust clear` clears every rule for an
approver or an admin, and a person's own rules for anyone else. Each is audited."""

from __future__ import annotations

import time

from bot.access import Role
from bot.audit import APPROVAL
from bot.chat_runner import ChatRunner
from bot.command_context import CommandContext
from bot.trust import ASK, TRUST_LABEL, TrustRule, policy_line

USAGE = (
    "{p}trust lists what runs without asking; {p}trust revoke N or {p}trust clear takes it back."
)


async def session_id_of(runner: ChatRunner) -> str:
    """The conversation's current agent session ("" before it has one): its rules' owner."""
    session = runner.sessions.current
    if session is not None:
        return session.session_id
    binding = await runner.services.store.get_binding(runner.key)
    return binding.session_id if binding is not None else ""


async def session_rules(runner: ChatRunner) -> list[TrustRule]:
    trust = runner.services.approvals.trust
    return trust.rules(runner.key, await session_id_of(runner))


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


def _listed(rule: TrustRule) -> str:
    return f"{rule.number}. {rule.describe()} — {rule.source} by {rule.by.label}, {_when(rule.at)}"


async def trust(context: CommandContext, args: str) -> str:
    words = args.split()
    if not words:
        return await _list(context)
    verb, rest = words[0].lower(), words[1:]
    if verb == "revoke" and len(rest) == 1 and rest[0].isdigit():
        return await _revoke(context, int(rest[0]))
    if verb == "clear" and not rest:
        return await _clear(context)
    return USAGE.format(p=context.prefix)


async def _list(context: CommandContext) -> str:
    runner = context.runner
    target = await runner.sessions.target()
    policy = target.project.approvals
    rules = await session_rules(runner)
    lines = [] if policy == ASK else [policy_line(policy) + " — the project's setting."]
    if not rules:
        lines.append(
            "Nothing is trusted in this session: every tool asks. An approval card's "
            f"“{TRUST_LABEL}”, or the agent's own always-option, adds a rule here."
        )
        return "\n".join(lines)
    lines.append("Runs without asking in this session:")
    lines += [_listed(rule) for rule in rules]
    lines.append(
        f"Take one back with {context.prefix}trust revoke N, all with {context.prefix}trust clear."
    )
    return "\n".join(lines)


def _may_take_back(context: CommandContext, rule: TrustRule) -> bool:
    if context.asker is None:
        return False
    runner = context.runner
    role = runner.services.access.role(runner.key.surface, context.asker.id)
    return role >= Role.APPROVE or (role >= Role.CHAT and context.asker.id == rule.by.id)


async def _taken_back(context: CommandContext, rules: list[TrustRule], action: str) -> None:
    runner = context.runner
    for rule in rules:
        await runner.services.audit.record(
            APPROVAL,
            runner.key.surface,
            context.asker_id,
            action,
            rule=f"trust rule {rule.number} ({rule.source}): {rule.describe()}",
            made_by=rule.by.id,
            chat=runner.key.chat,
        )


async def _revoke(context: CommandContext, number: int) -> str:
    runner = context.runner
    session_id = await session_id_of(runner)
    book = runner.services.approvals.trust
    rule = next((r for r in book.rules(runner.key, session_id) if r.number == number), None)
    if rule is None:
        return f"There is no trust rule {number} in this session; {context.prefix}trust lists them."
    if not _may_take_back(context, rule):
        return f"Only {rule.by.label}, an approver or an admin can revoke trust rule {number}."
    book.remove(runner.key, session_id, {number})
    await _taken_back(context, [rule], "trust revoked")
    return f"Revoked trust rule {number}: {rule.describe()} asks again."


async def _clear(context: CommandContext) -> str:
    runner = context.runner
    session_id = await session_id_of(runner)
    book = runner.services.approvals.trust
    rules = book.rules(runner.key, session_id)
    if not rules:
        return "Nothing is trusted in this session."
    mine = [rule for rule in rules if _may_take_back(context, rule)]
    book.remove(runner.key, session_id, {rule.number for rule in mine})
    await _taken_back(context, mine, "trust cleared")
    left = len(rules) - len(mine)
    said = f"Cleared {len(mine)} trust rule{'s' if len(mine) != 1 else ''}"
    if left:
        return f"{said}; {left} made by others stay (only they, approvers or admins clear those)."
    return f"{said}: every tool asks again."
