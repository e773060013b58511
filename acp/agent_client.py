"""`AcpClient`: sessions on one running agent process. The handshake (the protocol version
checked), what `initialize` advertised (`promptCapabilities`, `sessionCapabilities`), sessions
opened, listed, taken up again and let go (`SessionResumption`), the tool gate applied to each,
and the agent's requests routed: permission requests and questions (`elicitation/create`) to
the running turn, `fs/*` and `terminal/*` to `ClientMethods`.

Every failure leaves here as an `AcpError` built by `acp.client`, the one reader of agent errors,
or as the transport's `AcpRuntimeError`; this module only decides when to ask for one."""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from acp._dispatch import parse_permission_request
from acp.approval_cover import ClientAction
from acp.backends import Backend, speaks_our_version
from acp.client import (
    AcpAuthRequired,
    AcpError,
    AcpProtocolMismatch,
    AcpToolGateUnroutable,
    _acp_error_from,
    _says_sign_in_needed,
    _version_refusal,
)
from acp.client_methods import Authorize, method_not_found
from acp.elicitation import OpenLinks
from acp.elicitation_route import Asker, answer_elicitation
from acp.gate_watch import GateTarget, start_gate
from acp.runtime import AcpRuntime
from acp.session import AcpSession, Released
from acp.session_handle import AcpRuntimeDead, RpcReply
from acp.session_list import walk_pages
from acp.session_resume import KnownModes, SessionResumption
from acp.session_state import SessionState
from acp.sign_in import agent_display_name, sign_in_advice, terminal_sign_in, without_terminal
from acp.tool_gate import GatePlan, advertised_modes, describe_agent
from acp.types import (
    AgentSessionInfo,
    PendingPermission,
    PromptCapabilities,
    SessionCapabilities,
    TerminalActivity,
)
from acp.workspace_files import ClientRequestRefused

log = logging.getLogger(__name__)

# Notifications for a session we have not opened yet (an agent may speak right after its
# session/new answer, before we know the session): a few, for a few sessions.
_EARLY_SESSIONS = 8
_EARLY_FRAMES = 32


class AcpSessionListUnsupported(AcpError):
    """The agent does not advertise `sessionCapabilities.list`, so it is never asked."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        super().__init__(
            f"The agent ({agent}) does not list its sessions", kind="session_list_unsupported"
        )


class AcpClient(SessionResumption):
    """Sessions on one running agent process (taking stored ones up again and letting them go:
    `SessionResumption`)."""

    def __init__(
        self, runtime: AcpRuntime, *, gate: GatePlan | None = None, cancel_grace: float = 10.0
    ) -> None:
        self.runtime = runtime
        self.gate = gate or GatePlan()
        self.cancel_grace = cancel_grace
        self.sessions: dict[str, AcpSession] = {}
        # Sessions released while idle that the agent still holds, by id (see `reattach`).
        self.released: dict[str, Released] = {}
        self._shapes: dict[Released, Released] = {}  # one shared record per distinct shape
        # What a session of this agent was put in to ask: a released one taken up again is.
        self.gate_target: GateTarget | None = None
        # The modes each session's answers offered: a resumed session's answer may omit them.
        self.known_modes = KnownModes()
        # Sessions whose session/close is on its way: taking one up again waits for it.
        self._closing: dict[str, anyio.Event] = {}
        self._early: OrderedDict[str, list[tuple[str, Any]]] = OrderedDict()
        self.links = OpenLinks()  # the URL elicitations asked, for `elicitation/complete`
        runtime.handle.serve_requests(self._on_agent_request)
        runtime.handle.listen(self._on_notification)
        runtime.client_methods.terminals.on_activity = self._on_terminal_activity

    @property
    def backend(self) -> Backend:
        return self.runtime.backend

    @property
    def busy(self) -> bool:
        """A turn runs on one of its sessions (a pending permission is part of a turn), or a
        request to it awaits its answer (a session being opened or loaded): stopping it now
        would cut someone off."""
        return self.runtime.handle.awaiting or any(s.busy for s in self.sessions.values())

    @property
    def prompt_capabilities(self) -> PromptCapabilities:
        """What the agent takes in a prompt besides text, as `initialize` said (only a literal
        `true` counts)."""
        caps = self.runtime.agent_capabilities.get("promptCapabilities")
        caps = caps if isinstance(caps, dict) else {}
        return PromptCapabilities(
            image=caps.get("image") is True,
            audio=caps.get("audio") is True,
            embedded_context=caps.get("embeddedContext") is True,
        )

    @property
    def session_capabilities(self) -> SessionCapabilities:
        """The session methods `initialize` advertised (an entry counts when it is an object
        or a literal `true`)."""
        caps = self.runtime.agent_capabilities
        session = caps.get("sessionCapabilities")
        session = session if isinstance(session, dict) else {}

        def offered(name: str) -> bool:
            value = session.get(name)
            return value is True or isinstance(value, dict)

        return SessionCapabilities(
            load=caps.get("loadSession") is True,
            list=offered("list"),
            resume=offered("resume"),
            close=offered("close"),
            delete=offered("delete"),
        )

    async def list_sessions(self, cwd: Path | None = None) -> tuple[AgentSessionInfo, ...]:
        """The sessions the agent keeps for `cwd` (the workspace by default), through
        `session/list` pages, bounded and cleaned (`acp.session_list`). Raises
        `AcpSessionListUnsupported` when the agent does not advertise the method."""
        if not self.session_capabilities.list:
            raise AcpSessionListUnsupported(self.agent)
        workspace = str((cwd or self.runtime.workspace).resolve())

        async def fetch(params: dict[str, Any]) -> dict[str, Any]:
            return self._raise_for(await self.runtime.call("session/list", params))

        return await walk_pages(fetch, workspace)

    def _raise_for(self, reply: RpcReply) -> dict[str, Any]:
        if reply.error is not None:
            raise _acp_error_from(
                reply.error,
                backend=self.backend,
                fresh_session=True,
                sign_in=self.sign_in,
                agent=self.agent_name,
            )
        return reply.result if isinstance(reply.result, dict) else {}

    @property
    def sign_in(self) -> str:
        """How to sign the agent in: the exact command of a terminal sign-in it offers, then a
        preset's own step (it names the command and the keys, which agents' `authMethods`
        names such as "Use an API key" do not); for any other agent its other `authMethods`
        in its own words, when it gave any."""
        methods = self.runtime.auth_methods
        terminal = terminal_sign_in(methods, self.runtime.spec.argv)
        if self.backend.name != "generic":
            other = self.backend.sign_in
        else:
            other = sign_in_advice(
                without_terminal(methods), "" if terminal else self.backend.sign_in
            )
        return "; or ".join(step for step in (terminal, other) if step)

    @property
    def agent_name(self) -> str:
        """The agent as it names itself in `agentInfo`, else the preset's label."""
        return agent_display_name(self.runtime.agent_info, self.backend.label)

    async def handshake(self) -> None:
        try:
            reply = await self.runtime.initialize()
        except AcpRuntimeDead as exc:
            # An agent that exits at once often said why on stderr (e.g. not signed in).
            if _says_sign_in_needed(exc.stderr_tail):
                raise AcpAuthRequired(self.backend.label, self.backend.sign_in) from exc
            raise
        ours = self.backend.protocol_version
        if reply.error is not None:
            refusal = _version_refusal(reply.error)
            if refusal:
                raise AcpProtocolMismatch(self.agent, ours, None, refusal)
        result = self._raise_for(reply)
        theirs = result.get("protocolVersion")
        if not speaks_our_version(theirs):
            raise AcpProtocolMismatch(self.agent, ours, theirs)

    async def open_session(self, *, cwd: Path | None = None, model: str = "") -> AcpSession:
        workspace = (cwd or self.runtime.workspace).resolve()
        self.runtime.check_workspace(workspace)
        result = self._raise_for(
            await self.runtime.call("session/new", {"cwd": str(workspace), "mcpServers": []})
        )
        session_id = result.get("sessionId")
        if not isinstance(session_id, str) or not session_id:
            raise AcpError(
                "The agent started a session without giving it an id, which ACP requires; "
                "check that the agent command runs an ACP agent with `switchboard doctor`.",
                kind="protocol",
            )
        return await self._adopt(session_id, result, model)

    def remember_released(self, session_id: str, record: Released) -> None:
        self.released[session_id] = self._shapes.setdefault(record, record)

    def reattach(self, session_id: str, model: str) -> AcpSession | None:
        """The session `release` let go of, live again on this agent with `model` current (the
        model it had, which the caller stored); None when this agent never released it (it
        was started by another agent process, or closed for good)."""
        record = self.released.pop(session_id, None)
        if record is None:
            return None
        state = SessionState(self.backend)
        if record.model_option is not None:
            state.config_options = (replace(record.model_option, current=model),)
        else:
            state.legacy_models, state.legacy_model = record.legacy_models, model
        session = AcpSession(self, session_id, state, turns=1 if record.prompted else 0)
        session.watch_gate(self.gate_target)
        self.sessions[session_id] = session
        return session

    def _on_notification(self, method: str, params: Any) -> None:
        """A notification for no open session: kept a while if it may be a session's state
        that arrived before we opened it (right after its session/new answer)."""
        if method == "elicitation/complete":
            self.links.complete(params)
            return
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if isinstance(session_id, str) and (
            method == "session/update" or method.startswith("_kiro.dev/")
        ):
            frames = self._early.get(session_id)
            if frames is None:
                frames = self._early[session_id] = []
                while len(self._early) > _EARLY_SESSIONS:
                    self._early.popitem(last=False)
            if len(frames) < _EARLY_FRAMES:
                frames.append((method, params))

    def take_early(self, session_id: str) -> list[tuple[str, Any]]:
        return self._early.pop(session_id, [])

    async def _adopt(
        self,
        session_id: str,
        result: dict[str, Any],
        model: str,
        state: SessionState | None = None,
        *,
        resumed: bool = False,
    ) -> AcpSession:
        session = AcpSession.from_result(self, session_id, result, state)
        self.sessions[session_id] = session
        if resumed:  # its answer may leave the modes out: the ones known for it stand in
            result = self.known_modes.fill(session_id, result, session.state, self.gate)
            unknown = not advertised_modes(result) and not result.get("configOptions")
            if unknown and self.gate.detect and self.gate.enforced:
                await self._learn_modes(session_id)
                result = self.known_modes.fill(session_id, result, session.state, self.gate)
        try:
            await self._apply_gate(session, result)
        except AcpToolGateUnroutable:
            session.close()
            raise
        self.known_modes.remember(session_id, result)
        if model and model != session.model:
            await session.set_model(model)
        return session

    async def _learn_modes(self, session_id: str) -> None:
        """Nothing says what a resumed session's modes are (its answer left them out and this
        process never saw them: a restart): a new session of the same agent says, and is closed
        again where the agent can close sessions. Its modes then stand in for the resumed one's."""
        params = {"cwd": str(self.runtime.workspace.resolve()), "mcpServers": []}
        reply = await self.runtime.call("session/new", params)
        if reply.error is not None or not isinstance(reply.result, dict):
            return
        self.known_modes.remember(session_id, reply.result)
        probe = reply.result.get("sessionId")
        if isinstance(probe, str) and probe:
            await self.close_session(probe)

    def _on_terminal_activity(self, activity: TerminalActivity) -> None:
        """To the running turn, in order with its other events (none: nobody is watching)."""
        session = self.sessions.get(activity.session_id)
        if session is not None and session.turn is not None:
            session.turn.terminal_ran(activity)

    def _turn_of(self, session_id: str) -> Asker | None:
        session = self.sessions.get(session_id)
        return session.turn if session is not None else None

    def _session_state(self, session_id: str) -> str:
        session = self.sessions.get(session_id)
        if session is None:
            return ""
        return "turn" if session.turn is not None else "idle"

    @property
    def agent(self) -> str:
        """The configured agent, named for the operator (see `describe_agent`)."""
        name = self.runtime.agent_info.get("name")
        return describe_agent(
            self.backend, self.runtime.spec.argv, name if isinstance(name, str) else ""
        )

    async def _apply_gate(self, session: AcpSession, result: dict[str, Any]) -> None:
        """Put the session in its asking state (`acp.gate_watch.start_gate`) and watch it."""
        target = await start_gate(
            self.gate, self.agent, result, session.state, session.session_id, self.runtime.call
        )
        session.watch_gate(target)
        if target is not None:
            self.gate_target = target

    @property
    def _authorize(self) -> Authorize | None:
        """The gate on the agent's writes and commands (None: the operator turned it off)."""
        if not self.gate.enforced or self.gate.allow_ungated:
            return None
        return self._authorize_in_turn

    def _authorize_as(self, subagent: str) -> Authorize | None:
        """The gate for a request of the turn's subagent `subagent` ("": the agent's own): its
        card says whose the write or command is."""
        authorize = self._authorize
        if authorize is None or not subagent:
            return authorize

        async def as_subagent(session_id: str, action: ClientAction) -> None:
            await self._authorize_in_turn(session_id, replace(action, subagent=subagent))

        return as_subagent

    async def _authorize_in_turn(self, session_id: str, action: ClientAction) -> None:
        session = self.sessions.get(session_id)
        if session is None or session.turn is None:  # checked before: the turn just ended
            raise ClientRequestRefused(action.method, "the session is not running a prompt turn")
        await session.turn.authorize(action)

    def _as_parents(self, params: Any) -> tuple[Any, str]:
        """A request of a subagent of a session we hold is its parent's turn's: its params as
        the parent's, and the subagent's title for the card ("" for any other request). Only a
        child the parent announced counts (`SubagentRoutes`); any other id stays as it is."""
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if not isinstance(session_id, str) or not session_id or session_id in self.sessions:
            return params, ""
        route = self.runtime.handle.subagents.get(session_id)
        if route is None or route.parent_id not in self.sessions:
            return params, ""
        assert isinstance(params, dict)
        return {**params, "sessionId": route.parent_id}, route.title or "untitled"

    async def _on_agent_request(self, method: str, params: Any) -> RpcReply:
        params, subagent = self._as_parents(params)
        if method == "elicitation/create":
            return await answer_elicitation(params, self._turn_of, self.links, subagent=subagent)
        asked = method == "session/request_permission"
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is not None:
            try:
                await session.restore_gate()  # no tool before the approval state is back
            except AcpToolGateUnroutable as exc:
                if asked:
                    return RpcReply(result={"outcome": {"outcome": "cancelled"}})
                return RpcReply(error={"code": -32603, "message": str(exc)})
        if not asked:
            return await self.runtime.client_methods.answer(
                method, params, self._session_state, self._authorize_as(subagent)
            )
        if not isinstance(params, dict):
            return method_not_found(method)
        request = parse_permission_request(params)
        if subagent:
            request = replace(request, subagent=subagent)
        session = self.sessions.get(request.session_id)
        turn = session.turn if session is not None else None
        if turn is None:
            log.warning("permission request outside a turn; answering cancelled")
            return RpcReply(result={"outcome": {"outcome": "cancelled"}})
        pending = PendingPermission(request)
        try:
            answer = await turn.ask_permission(pending)
        finally:
            if not pending.answered:
                pending.withdraw()
        if answer is None:
            return RpcReply(result={"outcome": {"outcome": "cancelled"}})
        return RpcReply(result={"outcome": {"outcome": "selected", "optionId": answer}})
