"""The agent's approval state, watched: what must hold for a session to ask before tools (its
asking mode and its gate options, `GateTarget`) and the putting back of whatever the agent
changes (`GateWatch`).

Every state update is read on the frame reader's stack (`check`, which must not block); the
restore is async and runs before the next prompt, before the next request the agent makes of us
(a permission, a file write, a terminal) and, mid-turn, before the turn reads its next frame (the
hook in `acp._turn.PromptTurn`). A restore sets each setting that left its asking value back
with `session/set_mode` / `session/set_config_option`, sees the agent confirm it (its answer),
tells the conversation one sentence (a `GATE_RESTORED` notice, which the bot also audits) and
logs it. An agent that refuses, or keeps switching back `MAX_RESTORES` times in a row, is refused
for the conversation (`AcpToolGateUnroutable`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from acp.client import AcpToolGateUnroutable
from acp.gate_options import GateOption, described, gate_options, wire_value
from acp.session_handle import RpcReply
from acp.session_state import SessionState
from acp.state_parsing import parse_config_options
from acp.tool_gate import (
    AdvertisedMode,
    GatePlan,
    ToolGateUnroutable,
    advertised_modes,
    choose_gate_mode,
    confirms_mode,
    current_mode,
    find_mode_switch,
    warn_ungated,
)
from acp.types import NoticeKind, SessionNotice

log = logging.getLogger(__name__)

# Restores in a row (no prompt between them) before the agent is taken to fight the gate.
MAX_RESTORES = 3

Call = Callable[[str, dict[str, Any]], Awaitable[RpcReply]]
REFUSED = "refused to switch"
UNCONFIRMED = "did not confirm"


def mode_label(mode_id: str, names: dict[str, str]) -> str:
    """A mode as a person says it: its name, else the last part of its id (modes may be URIs,
    `https://.../session-modes#agent`)."""
    name = names.get(mode_id, "")
    if name:
        return f"mode {name}"
    tail = mode_id.rstrip("/#").rsplit("#", 1)[-1].rsplit("/", 1)[-1]
    return f"mode {tail or mode_id}"


@dataclass(frozen=True, slots=True)
class GateTarget:
    """The asking state of one agent's sessions: `mode` (None: its options are the gate) and
    `options` at their asking values; `mode_names` names the modes it advertised."""

    mode: AdvertisedMode | None = None
    options: tuple[GateOption, ...] = ()
    mode_names: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def describe(self) -> str:
        """The gate as a person would say it: "asks before tools: mode Default"."""
        parts = [option.label for option in self.options]
        if self.mode is not None:
            parts.insert(0, mode_label(self.mode.id, self.mode_names))
        return "asks before tools: " + (", ".join(parts) or "by its command line")

    def left(self, state: SessionState) -> list[str]:
        """What the agent's state says now where it left the asking one ([] while it asks).
        An option the agent no longer lists is not counted: there is nothing to set back."""
        found: list[str] = []
        if self.mode is not None and state.mode and state.mode != self.mode.id:
            found.append(mode_label(state.mode, self.mode_names))
        current = {option.option_id: option.current for option in state.config_options}
        for option in self.options:
            now = current.get(option.option_id)
            if now and now != option.value:
                found.append(f"{option.option_id} {now}")
        return found


async def set_option(call: Call, session_id: str, state: SessionState, option: GateOption) -> str:
    """Set a gate option to its asking value: "" once the agent confirmed it (its answer lists
    the options, as the spec has it, or a notification since said so), else what went wrong."""
    reports = state.option_reports
    params: dict[str, Any] = {
        "sessionId": session_id,
        "configId": option.option_id,
        "value": wire_value(option),
    }
    if option.boolean:  # the v1 schema tells a boolean value by its `type`
        params["type"] = "boolean"
    reply = await call("session/set_config_option", params)
    if reply.error is not None:
        return REFUSED
    result = reply.result if isinstance(reply.result, dict) else {}
    if isinstance(result.get("configOptions"), list):
        listed = {o.option_id: o.current for o in parse_config_options(result["configOptions"])}
        if listed.get(option.option_id) != option.value:
            return UNCONFIRMED
        state.absorb_result(result)
        return ""
    if state.option_reports != reports and any(
        o.option_id == option.option_id and o.current == option.value for o in state.config_options
    ):
        return ""
    return UNCONFIRMED


async def set_mode(call: Call, session_id: str, state: SessionState, mode: AdvertisedMode) -> str:
    """Put the session in `mode`: "" once the agent confirmed it (`tool_gate.confirms_mode`),
    else what went wrong."""
    switch = find_mode_switch(session_id, mode)
    reports = state.mode_reports
    reply = await call(switch.method, switch.params)
    reported = [state.mode] if state.mode_reports != reports else []
    if reply.error is not None:
        return REFUSED
    if not confirms_mode(switch, mode, reply.result, reported):
        return UNCONFIRMED
    if isinstance(reply.result, dict) and isinstance(reply.result.get("configOptions"), list):
        state.absorb_result(reply.result)
    if state.mode != mode.id:  # confirmed by the answer alone (set_mode's `{}`)
        state.now_in_mode(mode.id)
    return ""


class GateWatch:
    """One session's approval state, kept in its asking one (see the module docstring)."""

    def __init__(
        self,
        target: GateTarget,
        *,
        call: Call,
        state: SessionState,
        session_id: str,
        agent: str,
    ) -> None:
        self.target = target
        self.call = call
        self.state = state
        self.session_id = session_id
        self.agent = agent
        self.stale = False  # the agent's state left the asking one and is not put back yet
        self.restores = 0  # in a row, since the last prompt
        self._distrusted = False  # set everything again, whatever the state says (`distrust`)
        self._lock = anyio.Lock()

    def check(self) -> None:
        """After a state update (on the reader's stack: no waiting here)."""
        if not self.stale and self.target.left(self.state):
            self.stale = True
            log.warning(
                "tool gate: session %s of %s left its asking state (%s)",
                self.session_id,
                self.agent,
                ", ".join(self.target.left(self.state)),
            )

    def distrust(self) -> None:
        """The agent may have left its asking state without saying so (a `switch_mode` tool
        call, a tool that ran unasked): the next restore sets all of it again, whatever the
        state says."""
        self._distrusted = self.stale = True

    async def restore(self) -> None:
        """Put the asking state back if the agent left it; returns at once when it did not."""
        if not self.stale:
            return
        async with self._lock:
            left = self.target.left(self.state)
            force, self._distrusted = self._distrusted, False
            if not left and not force:
                self.stale = False
                return
            if left:
                self.restores += 1
            if self.restores > MAX_RESTORES:
                raise self._refused(f"it switched its approvals off again ({', '.join(left)})")
            if not await self._set_back(force):
                raise self._refused(
                    f"it did not go back to asking before tools ({self.target.describe()})"
                )
            self.stale = False
        if not left:
            log.info("tool gate: set session %s of %s again", self.session_id, self.agent)
            return
        restored = self.target.describe().removeprefix("asks before tools: ")
        log.warning(
            "tool gate: put session %s of %s back to %s (the agent had set %s)",
            self.session_id,
            self.agent,
            restored,
            ", ".join(left),
        )
        self.state.tell(
            SessionNotice(NoticeKind.GATE_RESTORED, detail=restored, previous=", ".join(left))
        )

    async def _set_back(self, force: bool) -> bool:
        target, state = self.target, self.state
        mode = target.mode
        if mode is not None and (force or (state.mode and state.mode != mode.id)):
            if await set_mode(self.call, self.session_id, state, mode):
                return False
        current = {option.option_id: option.current for option in state.config_options}
        for option in target.options:
            now = current.get(option.option_id)
            if (force and now is not None) or (now and now != option.value):
                if await set_option(self.call, self.session_id, state, option):
                    return False
        return True

    def _refused(self, reason: str) -> AcpToolGateUnroutable:
        log.error("tool gate: session %s of %s: %s", self.session_id, self.agent, reason)
        return AcpToolGateUnroutable(
            ToolGateUnroutable(
                self.agent,
                reason,
                "approvals are Switchboard's to manage: leave the agent's own approval "
                "settings as they are",
            )
        )


# ---- at session start -------------------------------------------------------------------------
def choose_target(
    agent: str, plan: GatePlan, result: dict[str, Any], state: SessionState
) -> GateTarget:
    """What must hold for a session opened with `result` to ask: its asking mode and its gate
    options (`acp.gate_options`). An agent whose options alone ask (Copilot: modes as URIs,
    `allow_all` off) is gated by them. Raises ToolGateUnroutable when nothing asks."""
    found, unknown = gate_options(state.config_options)
    if unknown:
        raise ToolGateUnroutable(
            agent,
            f"its options {described(unknown)} decide whether it asks before tools, and none "
            "of their values is known to ask",
            "use a version of the agent whose permission options can be set to ask",
        )
    names = {mode.id: mode.name for mode in advertised_modes(result) if mode.name}
    try:
        mode: AdvertisedMode | None = choose_gate_mode(agent, plan, result)
    except ToolGateUnroutable:
        if not found or plan.explicit:
            raise
        mode = None
    return GateTarget(mode, tuple(found), names)


async def start_gate(
    plan: GatePlan,
    agent: str,
    result: dict[str, Any],
    state: SessionState,
    session_id: str,
    call: Call,
) -> GateTarget | None:
    """Put a new or loaded session in its asking state and see the agent confirm it: the
    target to keep it in, or None when the operator let it run ungated. Raises
    AcpToolGateUnroutable."""
    if not plan.enforced:
        return None
    if not plan.needs_mode:
        return GateTarget()  # gated by its command line (kiro)
    try:
        target = choose_target(agent, plan, result, state)
    except ToolGateUnroutable as exc:
        if not plan.allow_ungated:
            raise AcpToolGateUnroutable(exc) from exc
        warn_ungated(exc)
        return None
    mode = target.mode
    if mode is not None and current_mode(result) != mode.id:
        failed = await set_mode(call, session_id, state, mode)
        if failed:
            raise AcpToolGateUnroutable(
                ToolGateUnroutable(
                    agent,
                    f"it {failed} to the session mode {mode.id!r}, the one that asks before "
                    "every tool call",
                    "check the agent's own settings for what blocks that mode",
                )
            )
    current = {option.option_id: option.current for option in state.config_options}
    for option in target.options:
        if current.get(option.option_id) == option.value:
            continue
        failed = await set_option(call, session_id, state, option)
        if failed:
            raise AcpToolGateUnroutable(
                ToolGateUnroutable(
                    agent,
                    f"it {failed} its option {option.option_id!r} to {option.value!r}, the "
                    "value that asks before every tool call",
                    "check the agent's own settings for what blocks that value",
                )
            )
    log.info("tool gate: session %s of %s %s", session_id, agent, target.describe())
    return target
