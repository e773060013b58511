"""Taking a stored session up again and letting one go, as ACP v1 has it (`SessionResumption`,
the part of `AcpClient` that does it): `session/resume` when the agent advertises it (no
history replay), else `session/load`; `session/close` when advertised, with a session taken up
again while its close is on its way waiting for the close first.

And what a resume needs beyond the wire call: the modes of a session whose answer leaves them
out (`KnownModes`).

The spec lets those answers omit `modes` and `configOptions` (`{}` is a valid answer), but the
tool gate decides from them. So the gate-relevant part of every session answer the gate read is
kept here, per session id, in memory: a resumed session's gate is decided from what its own
earlier answer said (or what its notifications said during the replay), and the asking mode is
set again and its success accepted, rather than the session being thrown away. Nothing here
talks to the agent but `SessionResumption`."""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from acp.backends import Backend
from acp.session_handle import AcpRuntimeError, RpcReply
from acp.session_load import load_session
from acp.session_state import SessionState
from acp.tool_gate import GatePlan, advertised_modes
from acp.types import SessionCapabilities

if TYPE_CHECKING:
    from acp.runtime import AcpRuntime
    from acp.session import AcpSession

log = logging.getLogger(__name__)

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


class _Client(Protocol):
    """What `SessionResumption` uses of the `AcpClient` it is part of."""

    runtime: AcpRuntime
    sessions: dict[str, AcpSession]
    released: dict[str, Any]
    known_modes: KnownModes
    _closing: dict[str, anyio.Event]

    @property
    def backend(self) -> Backend: ...

    @property
    def session_capabilities(self) -> SessionCapabilities: ...

    def _raise_for(self, reply: RpcReply) -> dict[str, Any]: ...

    async def _adopt(
        self,
        session_id: str,
        result: dict[str, Any],
        model: str,
        state: SessionState | None = None,
        *,
        resumed: bool = False,
    ) -> AcpSession: ...

    async def load_session(
        self, session_id: str, *, cwd: Path | None = None, timeout: float = 600.0
    ) -> AcpSession: ...

    def start_closing(self, session_id: str) -> Callable[[], Coroutine[Any, Any, None]]: ...


class SessionResumption:
    """`AcpClient`'s resume and close."""

    @property
    def can_resume(self: _Client) -> bool:
        """The agent takes a stored session up again (session/resume or session/load)."""
        caps = self.session_capabilities
        return caps.resume or caps.load

    async def resume_session(
        self: _Client, session_id: str, *, cwd: Path | None = None, timeout: float = 600.0
    ) -> AcpSession:
        """Take a stored session up again: session/resume when the agent advertises it (no
        history replay), else session/load. A session/close still on its way for the id is
        waited for first, so the agent never closes what it just resumed."""
        closing = self._closing.get(session_id)
        if closing is not None:
            await closing.wait()
        if not self.session_capabilities.resume:
            return await self.load_session(session_id, cwd=cwd, timeout=timeout)
        workspace = (cwd or self.runtime.workspace).resolve()
        self.runtime.check_workspace(workspace)
        params = {"sessionId": session_id, "cwd": str(workspace), "mcpServers": []}
        result = self._raise_for(await self.runtime.call("session/resume", params))
        return await self._adopt(session_id, result, "", resumed=True)

    async def load_session(
        self: _Client, session_id: str, *, cwd: Path | None = None, timeout: float = 600.0
    ) -> AcpSession:
        """Resume a stored session. The agent replays the history first: it is not shown, but
        the state it sends meanwhile is kept. The model is the agent's: a caller restoring one
        sets it afterwards, and only one the agent says it offers."""
        workspace = (cwd or self.runtime.workspace).resolve()
        self.runtime.check_workspace(workspace)
        params: dict[str, Any] = {"sessionId": session_id, "cwd": str(workspace), "mcpServers": []}
        if self.backend.kiro_session_meta:
            session_file = Path.home() / ".kiro" / "sessions" / "cli" / f"{session_id}.json"
            params["_meta"] = {"_kiro.dev/session_file": str(session_file)}
        state = SessionState(self.backend)
        reply = await load_session(
            self.runtime.handle,
            session_id,
            params,
            idle_timeout=self.runtime.spec.request_timeout,
            hard_timeout=timeout,
            observe=state.apply,
        )
        result = self._raise_for(reply)
        return await self._adopt(session_id, result, "", state, resumed=True)

    def start_closing(self: _Client, session_id: str) -> Callable[[], Coroutine[Any, Any, None]]:
        """Let go of the session for good: our objects at once (open or released); the
        returned coroutine function sends session/close when the agent advertises it (await
        it, or hand it to a task). A failure is logged: leaving never fails."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.close()
        self.released.pop(session_id, None)
        self.known_modes.forget(session_id)
        done = self._closing[session_id] = anyio.Event()

        async def send() -> None:
            try:
                if self.session_capabilities.close and self.runtime.handle.dead is None:
                    reply = await self.runtime.call("session/close", {"sessionId": session_id})
                    if reply.error is not None:
                        log.info("the agent did not close session %s: %s", session_id, reply.error)
            except AcpRuntimeError as exc:
                log.info("session %s was not closed: %s", session_id, exc)
            finally:
                done.set()
                if self._closing.get(session_id) is done:
                    del self._closing[session_id]

        return send

    async def close_session(self: _Client, session_id: str) -> None:
        """`start_closing`, awaited."""
        await self.start_closing(session_id)()
