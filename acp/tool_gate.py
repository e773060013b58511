"""The tool gate: make sure every tool call the agent makes reaches us as
`session/request_permission` — the only way a person can approve it — or refuse the agent.

Before spawning (`plan_tool_gate`): kiro asks unless its command line trusts tools (a flag
refuses it at once); claude asks for everything only in mode `default`, codex only in
`read-only`; any other agent's gate is decided from what it advertises. `SWITCHBOARD_AGENT_MODE`
names the mode explicitly and overrides the preset's mode and the detection.

After `session/new` / `session/load` (`choose_gate_mode`, `find_mode_switch`, `confirms_mode`):
the modes come from `modes.availableModes` and from config options with category `mode` (any
id, flat or grouped values). The detection rule, in order:

1. A mode whose id, name or description has a word that means tools run unasked is never chosen:
   auto, autopilot, automatic(ally), autonomous, unattended, yolo, accept, bypass, trust, skip,
   never, nothing, without, unrestricted, dangerous, "full access". Such words also appear in
   asking descriptions ("nothing runs without your approval"); losing that mode only refuses the
   agent (the operator can name it in SWITCHBOARD_AGENT_MODE), the safe way to be wrong.
2. Of the rest, a mode whose id is one known to ask (`default` as gemini and claude use it,
   `ask` as Vibe does, `manual`) wins, first in the agent's order.
3. Else a mode whose id, name or description has an asking word: ask, asks, approval, approve,
   confirm, confirmation, permission, permissions, manual.
4. Else there is no asking mode: the agent is refused with one sentence naming it and its modes.

Words are split at anything not a letter or digit and at camelCase humps (`acceptEdits` ->
accept, edits), so "tasks" is not "ask" and "automatically" is not "auto".

The mode is set (skipped when already current) and must be confirmed: the config option's
`currentValue` in the `session/set_config_option` result, or a `current_mode_update` /
`currentModeId`; `session/set_mode` answers `{}` by the spec, so a success that nothing
contradicts counts as confirmed there. `allow_ungated_tools` is the operator's opt-out: an agent
with no asking mode then starts with a warning, and nothing is enforced."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from acp.backends import Backend, GateRoute

log = logging.getLogger(__name__)

_UNGATED_WORDS = frozenset(
    {
        "auto",
        "autopilot",
        "automatic",
        "automatically",
        "autonomous",
        "unattended",
        "yolo",
        "accept",
        "accepts",
        "bypass",
        "bypasses",
        "trust",
        "trusted",
        "skip",
        "skips",
        "never",
        "nothing",
        "without",
        "unrestricted",
        "dangerous",
        "dangerously",
    }
)
_UNGATED_PAIRS = frozenset({("full", "access")})
_ASKING_IDS = ("default", "ask", "manual")
_ASKING_WORDS = frozenset(
    {
        "ask",
        "asks",
        "approval",
        "approve",
        "confirm",
        "confirmation",
        "permission",
        "permissions",
        "manual",
    }
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_INTERPRETERS = frozenset({"python", "python3", "node", "npx", "uv", "uvx", "bun", "deno", "tsx"})


class ToolGateUnroutable(Exception):
    """This agent, as configured, can run tools that nobody approved. `agent` names it as the
    operator configured it, `reason` says why, `fix` what the operator can change."""

    def __init__(self, agent: str, reason: str, fix: str) -> None:
        self.agent = agent
        self.reason = reason
        self.fix = fix
        super().__init__(f"{agent}: {reason}")


def describe_agent(backend: Backend, argv: Sequence[str], agent_name: str = "") -> str:
    """The agent as the operator configured it: the name it gave in `initialize` (when known),
    its command (an interpreter with the script it runs) and the preset it is run as."""
    parts = [Path(arg).name for arg in argv[:2] if arg]
    command = parts[0] if parts else backend.label
    if len(parts) == 2 and Path(parts[0]).name.rstrip("0123456789.") in _INTERPRETERS:
        command = " ".join(parts)
    if agent_name and agent_name != command:
        return f"{agent_name} ({command}, the {backend.name} preset)"
    return f"{command} (the {backend.name} preset)"


@dataclass(frozen=True, slots=True)
class GatePlan:
    """What must happen after session/new for the gate to hold. `mode` is a mode id that must
    be set ("" = none named); `detect` chooses one from what the agent advertises; `explicit`:
    the operator named `mode` (an unknown one is refused naming the modes offered);
    `allow_ungated`: no asking mode found starts ungated instead of refusing."""

    mode: str = ""
    enforced: bool = True
    detect: bool = False
    explicit: bool = False
    allow_ungated: bool = False

    @property
    def needs_mode(self) -> bool:
        return self.enforced and bool(self.mode or self.detect)


def plan_tool_gate(
    backend: Backend, argv: Sequence[str], *, allow_ungated: bool, mode: str = ""
) -> GatePlan:
    """Decide before spawning. Raises ToolGateUnroutable unless the operator opted out."""
    try:
        return _plan(backend, argv, mode.strip(), allow_ungated)
    except ToolGateUnroutable as exc:
        if not allow_ungated:
            raise
        warn_ungated(exc)
        return GatePlan(enforced=False, allow_ungated=True)


def warn_ungated(exc: ToolGateUnroutable) -> None:
    log.warning(
        "tool approval is OFF for %s (%s): the agent may run tools nobody approved, "
        "because allow_ungated_tools is set",
        exc.agent,
        exc.reason,
    )


def _plan(backend: Backend, argv: Sequence[str], mode: str, allow_ungated: bool) -> GatePlan:
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
        return GatePlan(mode=mode, explicit=bool(mode), allow_ungated=allow_ungated)
    if mode:
        return GatePlan(mode=mode, explicit=True, allow_ungated=allow_ungated)
    if backend.gate_route is GateRoute.MODE:
        return GatePlan(mode=backend.gate_mode, allow_ungated=allow_ungated)
    return GatePlan(detect=True, allow_ungated=allow_ungated)


# ---- what the agent advertises --------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AdvertisedMode:
    """One mode the agent offers; `option` is the config option id carrying it ("" = the
    legacy modes API)."""

    id: str
    name: str = ""
    description: str = ""
    option: str = ""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _choices(options: Any) -> Iterable[dict[str, Any]]:
    """A select option's values, flat or in groups (`{group, name, options: [...]}`)."""
    for choice in options if isinstance(options, list) else ():
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("options"), list):
            yield from (c for c in choice["options"] if isinstance(c, dict))
        else:
            yield choice


def _mode_options(result: dict[str, Any]) -> Iterable[dict[str, Any]]:
    for option in result.get("configOptions") or ():
        if not isinstance(option, dict) or not isinstance(option.get("id"), str):
            continue
        category = option.get("category")
        # an option without a category but with the id `mode` is how older agents spelled it
        if category == "mode" or (category is None and option["id"] == "mode"):
            yield option


def advertised_modes(result: dict[str, Any]) -> list[AdvertisedMode]:
    """Every mode of a session/new or session/load result: config options first (the newer
    API, which agents offering both keep in step), then `modes.availableModes`."""
    found: list[AdvertisedMode] = []
    seen: set[str] = set()
    for option in _mode_options(result):
        for choice in _choices(option.get("options")):
            value = _text(choice.get("value"))
            if value and value not in seen:
                seen.add(value)
                found.append(
                    AdvertisedMode(
                        value,
                        _text(choice.get("name")),
                        _text(choice.get("description")),
                        option["id"],
                    )
                )
    modes = result.get("modes")
    if isinstance(modes, dict):
        for mode in modes.get("availableModes") or ():
            if isinstance(mode, dict):
                mode_id = _text(mode.get("id"))
                if mode_id and mode_id not in seen:
                    seen.add(mode_id)
                    found.append(
                        AdvertisedMode(
                            mode_id, _text(mode.get("name")), _text(mode.get("description"))
                        )
                    )
    return found


def current_mode(result: dict[str, Any]) -> str:
    """The mode the agent reports current ("" when it does not say)."""
    for option in _mode_options(result):
        value = _text(option.get("currentValue"))
        if value:
            return value
    modes = result.get("modes")
    return _text(modes.get("currentModeId")) if isinstance(modes, dict) else ""


def _words(text: str) -> list[str]:
    return [word.lower() for word in _WORD.findall(text)]


def _runs_unasked(mode: AdvertisedMode) -> bool:
    words = _words(f"{mode.id} {mode.name} {mode.description}")
    if _UNGATED_WORDS.intersection(words):
        return True
    return any(pair in _UNGATED_PAIRS for pair in pairwise(words))


def asking_mode(modes: Sequence[AdvertisedMode]) -> AdvertisedMode | None:
    """The mode that asks before tools, by the rule in the module docstring; None if none."""
    candidates = [mode for mode in modes if not _runs_unasked(mode)]
    for mode in candidates:
        if mode.id.lower() in _ASKING_IDS:
            return mode
    for mode in candidates:
        if _ASKING_WORDS.intersection(_words(f"{mode.id} {mode.name} {mode.description}")):
            return mode
    return None


def offered(modes: Sequence[AdvertisedMode]) -> str:
    if not modes:
        return "it offers no session modes"
    return "it offers the modes " + ", ".join(repr(mode.id) for mode in modes)


def choose_gate_mode(agent: str, plan: GatePlan, result: dict[str, Any]) -> AdvertisedMode:
    """The mode to set for `plan`. Raises ToolGateUnroutable when there is none."""
    modes = advertised_modes(result)
    if plan.mode:
        for mode in modes:
            if mode.id == plan.mode:
                return mode
        if plan.explicit:
            raise ToolGateUnroutable(
                agent,
                f"SWITCHBOARD_AGENT_MODE names the mode {plan.mode!r}, which it does not offer "
                f"({offered(modes)})",
                "set SWITCHBOARD_AGENT_MODE to one of its modes that asks before tools",
            )
        raise ToolGateUnroutable(
            agent,
            f"it does not offer the session mode {plan.mode!r}, the one that asks before every "
            f"tool call ({offered(modes)})",
            "use a version of the agent that offers that mode, or name an asking mode in "
            "SWITCHBOARD_AGENT_MODE",
        )
    chosen = asking_mode(modes)
    if chosen is None:
        raise ToolGateUnroutable(
            agent,
            f"none of its session modes asks before tool calls ({offered(modes)})",
            "name the mode that asks in SWITCHBOARD_AGENT_MODE if one does",
        )
    return chosen


@dataclass(frozen=True, slots=True)
class ModeSwitch:
    """How to put a session in the gating mode: a config option or the legacy modes API."""

    method: str
    params: dict[str, Any]


def find_mode_switch(session_id: str, mode: AdvertisedMode) -> ModeSwitch:
    if mode.option:
        return ModeSwitch(
            "session/set_config_option",
            {"sessionId": session_id, "configId": mode.option, "value": mode.id},
        )
    return ModeSwitch("session/set_mode", {"sessionId": session_id, "modeId": mode.id})


def confirms_mode(
    switch: ModeSwitch, mode: AdvertisedMode, result: Any, reported: list[str]
) -> bool:
    """Whether the agent confirmed `mode` current after `switch` succeeded with `result`, with
    `reported` the modes its notifications since reported current."""
    if reported:
        return reported[-1] == mode.id
    if switch.method == "session/set_config_option":
        if isinstance(result, dict) and isinstance(result.get("configOptions"), list):
            return current_mode(result) == mode.id
        return False  # the spec's answer carries the options: without them nothing confirms
    if isinstance(result, dict) and current_mode(result):
        return current_mode(result) == mode.id
    return True  # set_mode answers `{}`; a success nothing contradicts is the confirmation
