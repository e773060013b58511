"""What taking a stored session up again needs beyond the wire call: the modes of a session
whose `session/load` / `session/resume` answer leaves them out.

The spec lets those answers omit `modes` and `configOptions` (`{}` is a valid answer), but the
tool gate decides from them. So the gate-relevant part of every session answer the gate read is
kept here, per session id, in memory: a resumed session's gate is decided from what its own
earlier answer said (or what its notifications said during the replay), and the asking mode is
set again and its success accepted, rather than the session being thrown away. Nothing here
talks to the agent."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

from acp.session_state import SessionState
from acp.tool_gate import GatePlan, advertised_modes

# Sessions whose modes are remembered (the most recently used ones); distinct shapes are
# shared, so a remembered session costs its id and a dictionary slot.
KNOWN_SESSIONS = 512

# Config options the gate may read: the mode, and the agent's own approval switches.
_GATE_CATEGORIES = frozenset({"mode", "permissions"})


def _gate_options(result: dict[str, Any]) -> list[dict[str, Any]]:
    options = result.get("configOptions")
    return [
        option
        for option in (options if isinstance(options, list) else ())
        if isinstance(option, dict)
        and (
            option.get("category") in _GATE_CATEGORIES
            or (option.get("category") is None and option.get("id") == "mode")
        )
    ]


def _without_current(result: dict[str, Any]) -> dict[str, Any]:
    """The modes and gate options of `result`, not saying which is current: after a resume the
    agent did not say, so the gate sets its mode again rather than trusting an old answer."""
    kept: dict[str, Any] = {}
    modes = result.get("modes")
    if isinstance(modes, dict) and modes.get("availableModes"):
        kept["modes"] = {"availableModes": modes["availableModes"]}
    options = [
        {key: value for key, value in option.items() if key != "currentValue"}
        for option in _gate_options(result)
    ]
    if options:
        kept["configOptions"] = options
    return kept


def _from_notifications(state: SessionState) -> dict[str, Any]:
    """The mode options the session's notifications described (e.g. during the replay)."""
    options = [
        {
            "id": option.option_id,
            "name": option.name,
            "category": option.category,
            "type": option.kind or "select",
            "options": [{"value": c.value, "name": c.name} for c in option.choices],
        }
        for option in state.config_options
        if option.category in _GATE_CATEGORIES and option.choices
    ]
    return {"configOptions": options} if options else {}


def _from_plan(plan: GatePlan) -> dict[str, Any]:
    """The mode the plan names (a preset's, or SWITCHBOARD_AGENT_MODE): set it and accept a
    success, as for any `session/set_mode`."""
    if not plan.mode:
        return {}
    return {"modes": {"availableModes": [{"id": plan.mode, "name": plan.mode}]}}


class KnownModes:
    """The gate-relevant part of each session's last answer, by session id (bounded)."""

    def __init__(self, limit: int = KNOWN_SESSIONS) -> None:
        self._limit = limit
        self._by_session: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._shapes: dict[str, dict[str, Any]] = {}

    def remember(self, session_id: str, result: dict[str, Any]) -> None:
        kept = _without_current(result)
        if not kept:
            return
        shape = json.dumps(kept, sort_keys=True, default=str)
        self._by_session[session_id] = self._shapes.setdefault(shape, kept)
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self._limit:
            self._by_session.popitem(last=False)
        if len(self._shapes) > self._limit:  # rebuilt from the sessions still remembered
            live = {id(v) for v in self._by_session.values()}
            self._shapes = {k: v for k, v in self._shapes.items() if id(v) in live}

    def forget(self, session_id: str) -> None:
        self._by_session.pop(session_id, None)

    def fill(
        self, session_id: str, result: dict[str, Any], state: SessionState, plan: GatePlan
    ) -> dict[str, Any]:
        """`result` as the gate should read it: as it is when it offers modes; else with the
        modes known for the session (its earlier answer, else its notifications, else the
        mode the plan names) added."""
        if advertised_modes(result):
            return result
        known = self._by_session.get(session_id) or _from_notifications(state) or _from_plan(plan)
        filled = dict(result)
        if "modes" in known and not isinstance(result.get("modes"), dict):
            filled["modes"] = known["modes"]
        if "configOptions" in known:
            present = _gate_options(result)
            ids = {option.get("id") for option in present}
            raw = result.get("configOptions")
            others = [o for o in (raw if isinstance(raw, list) else ()) if o not in present]
            filled["configOptions"] = [
                *others,
                *present,
                *(option for option in known["configOptions"] if option.get("id") not in ids),
            ]
        return filled
