"""The commands about the agent at work: /status (agent, model, workspace, what runs, context
used) and /model (list or switch)."""

from __future__ import annotations

import shlex
import time

from bot.agent_commands import mode_label, model_label
from bot.command_context import CommandContext
from bot.trust import policy_line
from bot.trust_commands import session_rules


async def status(context: CommandContext, args: str) -> str:
    runner = context.runner
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
    approvals = policy_line(target.project.approvals)
    rules = len(await session_rules(runner))
    if rules:
        approvals += f"; {rules} trust rule{'s' if rules != 1 else ''} ({context.prefix}trust)"
    lines.append(approvals)
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


async def model(context: CommandContext, wanted: str) -> str:
    runner = context.runner
    if runner.running:
        return "Wait for the current reply (or stop it) before switching models."
    session = await runner.sessions.session()
    prefix = context.prefix
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
