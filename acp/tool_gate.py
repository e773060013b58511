"""The tool gate: before an agent is spawned, decide whether every tool call it makes, as
configured, will reach us as `session/request_permission` — the only way a person can approve it.

kiro asks unless its command line trusts tools; claude asks for everything only in mode `default`;
codex only in mode `read-only`; for an unknown agent nothing is known, so it is refused unless the
operator opted out with `allow_ungated_tools`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp.backends import Backend, GateRoute

log = logging.getLogger(__name__)


class ToolGateUnroutable(Exception):
    """This agent, as configured, can run tools that nobody approved. `agent` names it as the
    operator configured it, `reason` says why, `fix` what the operator can change."""

    def __init__(self, agent: str, reason: str, fix: str) -> None:
        self.agent = agent
        self.reason = reason
        self.fix = fix
        super().__init__(f"{agent}: {reason}")


def describe_agent(backend: Backend, argv: Sequence[str]) -> str:
    """The agent as the operator configured it: its executable and the preset it is run as."""
    executable = Path(argv[0]).name if argv and argv[0] else backend.label
    return f"{executable} (the {backend.name} preset)"


@dataclass(frozen=True, slots=True)
class GatePlan:
    """What must happen after session/new for the gate to hold ("" = nothing)."""

    mode: str = ""
    enforced: bool = True


def plan_tool_gate(backend: Backend, argv: Sequence[str], *, allow_ungated: bool) -> GatePlan:
    """Decide before spawning. Raises ToolGateUnroutable unless the operator opted out."""
    try:
        return _plan(backend, argv)
    except ToolGateUnroutable as exc:
        if not allow_ungated:
            raise
        log.warning(
            "tool approval is OFF for %s (%s): the agent may run tools nobody approved, "
            "because allow_ungated_tools is set",
            exc.agent,
            exc.reason,
        )
        return GatePlan(enforced=False)


def _plan(backend: Backend, argv: Sequence[str]) -> GatePlan:
    agent = describe_agent(backend, argv)
    if backend.gate_route is GateRoute.FLAGS:
        for arg in argv[1:]:
            flag = arg.split("=", 1)[0]
            if flag in backend.trusting_flags:
                raise ToolGateUnroutable(
                    agent,
                    f"its command line has {flag}",
                    f"remove {flag} from the agent command",
                )
        return GatePlan()
    if backend.gate_route is GateRoute.MODE:
        return GatePlan(mode=backend.gate_mode)
    raise ToolGateUnroutable(
        agent,
        "that preset cannot be made to ask before every tool call",
        "use a preset that can be (--agent kiro, claude or codex) if the agent is one of those",
    )


@dataclass(frozen=True, slots=True)
class ModeSwitch:
    """How to put a session in the gating mode: a config option or the legacy modes API."""

    method: str
    params: dict[str, Any]


def find_mode_switch(
    agent: str, session_id: str, session_result: dict[str, Any], mode: str
) -> ModeSwitch:
    """Read the session/new result; raise ToolGateUnroutable when the agent lacks `mode`."""
    for option in session_result.get("configOptions") or ():
        if not isinstance(option, dict) or option.get("id") != "mode":
            continue
        values = {
            choice.get("value")
            for choice in option.get("options") or ()
            if isinstance(choice, dict)
        }
        if mode in values:
            return ModeSwitch(
                "session/set_config_option",
                {"sessionId": session_id, "configId": "mode", "value": mode},
            )
    modes = session_result.get("modes")
    if isinstance(modes, dict):
        ids = {m.get("id") for m in modes.get("availableModes") or () if isinstance(m, dict)}
        if mode in ids:
            return ModeSwitch("session/set_mode", {"sessionId": session_id, "modeId": mode})
    raise ToolGateUnroutable(
        agent,
        f"it does not offer the session mode {mode!r}, the one that asks before every tool call",
        "use a version of the agent that offers that mode",
    )
