"""`AcpSession`: one agent session on a running agent process: prompt it, cancel it, pick its
model, keep its tool gate. The `AcpClient` that opens sessions lives in `acp.agent_client`; a
session knows it only as a `SessionHost`.

Every failure leaves here as an `AcpError` built by `acp.client`, the one reader of agent errors,
or as the transport's `AcpRuntimeError`; this module only decides when to ask for one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Protocol

from acp._turn import PromptTurn
from acp.approval_cover import ApprovalCover, TurnApprovals
from acp.backends import Backend
from acp.client import (
    AcpError,
    AcpModelUnavailable,
    AcpPromptBusy,
    AcpToolGateUnroutable,
    _acp_error_from,
    _looks_like_error_text,
)
from acp.content import PromptContent, prompt_blocks
from acp.elicitation import OpenLinks
from acp.gate_watch import GateTarget, GateWatch
from acp.inbox import drain_notifications, inbox_for
from acp.runtime import AcpRuntime
from acp.session_state import SessionState
from acp.steering import (
    STEER_META,
    STEER_METHOD,
    AcpSteeringUnsupported,
    SteerOutcome,
    read_outcome,
)
from acp.subagent_control import cancel_subagent
from acp.turn_setup import SessionLine, TurnAgent, TurnHooks
from acp.types import AcpEvent, ConfigOption, PromptCapabilities, SessionCapabilities, ToolCall


class AcpModelChoiceUnsupported(AcpError):
    """The agent advertises no way to choose a model (no model config option, no `models`)."""

    def __init__(self, model: str) -> None:
        self.model = model
        super().__init__(
            f"The agent does not offer a way to choose its model, so {model!r} cannot be set",
            advice="leave the model unset to use the agent's own choice",
            kind="model_unavailable",
        )


@dataclass(frozen=True, slots=True)
class Released:
    """What a released session's next use needs of its state. Equal records are shared
    (sessions of one agent usually advertise the same models), so a released session costs its
    id and a dictionary slot."""

    model_option: ConfigOption | None  # switched with session/set_config_option (current "")
    legacy_models: tuple[str, ...]  # else with session/set_model, when it lists these
    prompted: bool  # it has run a turn (agent errors read differently on a fresh session)


class SessionHost(Protocol):
    """What an `AcpSession` uses of the `AcpClient` that opened it (`acp.agent_client`), and what
    its users reach through `session.client`: the agent process, how to name and sign it in, the
    sessions it holds. A protocol, so the session needs nothing of the client's module."""

    runtime: AcpRuntime
    cancel_grace: float
    sessions: dict[str, AcpSession]
    released: dict[str, Released]
    links: OpenLinks  # the URL elicitations asked, for `elicitation/complete`

    @property
    def backend(self) -> Backend: ...

    @property
    def busy(self) -> bool: ...

    @property
    def agent(self) -> str: ...

    @property
    def agent_name(self) -> str: ...

    @property
    def sign_in(self) -> str: ...

    @property
    def prompt_capabilities(self) -> PromptCapabilities: ...

    @property
    def session_capabilities(self) -> SessionCapabilities: ...

    @property
    def can_resume(self) -> bool: ...

    def take_early(self, session_id: str) -> list[tuple[str, Any]]: ...

    def remember_released(self, session_id: str, record: Released) -> None: ...

    def start_closing(self, session_id: str) -> Callable[[], Coroutine[Any, Any, None]]: ...

    async def close_session(self, session_id: str) -> None: ...


class AcpSession:
    """One agent session: prompt it, cancel it, pick its model."""

    def __init__(
        self,
        client: SessionHost,
        session_id: str,
        state: SessionState | None = None,
        *,
        turns: int = 0,
    ) -> None:
        self.client = client
        self.session_id = session_id
        # What the agent told us about the session, updated by the frame reader whenever it
        # says more (between turns too): commands, context, options, models, mode, title.
        self.state = state or SessionState(client.backend)
        self.turns = turns
        self.turn: PromptTurn | None = None
        # Tools must ask first here: one that runs unasked is a gate violation (see PromptTurn).
        self.gated = False
        # Keeps the agent's approval state in its asking one (None: nothing to keep).
        self.gate: GateWatch | None = None
        self.cover = ApprovalCover()  # what `allow_always` answers allowed in this session
        # Awaited in the turn when a `switch_mode` tool call completes: the approval state is
        # checked again at once (the agent may have left its asking mode without saying so).
        self.on_switch_mode: Callable[[ToolCall], Awaitable[None]] | None = self._after_switch_mode
        self.inbox = inbox = inbox_for(client.runtime.handle, session_id)
        for method, params in client.take_early(session_id):
            self.state.apply(method, params)
        drain_notifications(inbox.items, self.state.apply)  # queued while nobody read them
        # Between turns every notification is state (or nothing): read it on the reader's
        # stack. A turn puts its own taker here while it runs and this one back after.
        inbox.take_now = self._take_between_turns

    @classmethod
    def from_result(
        cls,
        client: SessionHost,
        session_id: str,
        result: dict[str, Any],
        state: SessionState | None = None,
    ) -> AcpSession:
        """The session an agent's session/new or session/load answer describes."""
        state = state or SessionState(client.backend)
        state.absorb_result(result)
        return cls(client, session_id, state)

    @property
    def models(self) -> list[str]:
        """The model ids the agent offers (its model config option's, else its `models`)."""
        return self.state.models

    @property
    def model(self) -> str:
        """The model the agent reports current ("" when it does not say)."""
        return self.state.model

    def _take_between_turns(self, method: str, params: Any) -> bool:
        self._observe(method, params)
        return True

    def _observe(self, method: str, params: Any) -> None:
        """A notification that may be state: read, and the approval state checked."""
        if method == "elicitation/complete":  # sent with our sessionId, it lands here
            self.client.links.complete(params)
            return
        self.state.apply(method, params)
        if self.gate is not None:
            self.gate.check()

    def watch_gate(self, target: GateTarget | None) -> None:
        """Keep this session in `target`'s asking state from now on."""
        if target is None:
            return
        self.gated = True
        self.gate = GateWatch(
            target,
            call=self.client.runtime.call,
            state=self.state,
            session_id=self.session_id,
            agent=self.client.agent,
        )
        self.gate.check()  # what the agent said before we watched

    @property
    def gate_line(self) -> str:
        """The tool gate as a person would say it ("" when Switchboard does not hold one)."""
        if self.gate is None:
            return ""
        return self.gate.target.describe()

    def distrust_gate(self) -> None:
        """The agent may have left its asking state unsaid (a `switch_mode` tool call, a tool
        run unasked): it is set again before the next prompt, request or state frame."""
        if self.gate is not None:
            self.gate.distrust()

    async def _after_switch_mode(self, tool: ToolCall) -> None:
        self.distrust_gate()
        await self.restore_gate()

    async def restore_gate(self) -> None:
        """Put the approval state back if the agent left it. A refused restore stops the running
        turn and raises AcpToolGateUnroutable: the agent is refused for the conversation."""
        if self.gate is None:
            return
        try:
            await self.gate.restore()
        except AcpToolGateUnroutable:
            if self.turn is not None:
                await self.turn.cancel()
            raise

    @property
    def busy(self) -> bool:
        return self.turn is not None

    @property
    def prompt_capabilities(self) -> PromptCapabilities:
        return self.client.prompt_capabilities

    @property
    def steering(self) -> bool:
        """The agent advertised steering (`acp.steering`): `steer` may be used."""
        return self.client.runtime.steering

    async def steer(self, prompt: PromptContent) -> SteerOutcome:
        """Add `prompt` to the running turn (`_session/steering`): its output streams in that
        turn, which is otherwise untouched (its text, its clock). PROMPT_REQUIRED, without
        asking the agent, when no turn runs or it is being cancelled: send it as a prompt then.
        Raises AcpSteeringUnsupported, without sending anything, when the agent does not
        advertise steering, and the agent's error as an AcpError."""
        if not self.steering:
            raise AcpSteeringUnsupported(self.client.agent_name)
        turn = self.turn
        if turn is None or turn.cancel_sent:
            return SteerOutcome.PROMPT_REQUIRED
        blocks = prompt_blocks(prompt)
        params = {"sessionId": self.session_id, "prompt": blocks, "_meta": STEER_META}
        reply = await self.client.runtime.call(STEER_METHOD, params)
        if reply.error is not None:
            raise self._error_from(reply.error, "")
        return read_outcome(reply.result)

    def prompt(
        self,
        prompt: PromptContent,
        *,
        timeout: float | None = None,
        on_text: Callable[[AcpEvent], None] | None = None,
    ) -> AsyncIterator[AcpEvent]:
        """The turn's events, ending with one TERMINAL event carrying the stats: an async
        generator, which starts (and raises AcpPromptBusy if a turn already runs) when first
        iterated. `prompt` is text or content blocks (`acp.content`; only the kinds
        `prompt_capabilities` allows). Raises an AcpError (or AcpRuntimeError) when the turn fails.

        With `on_text`, TEXT events are not yielded: each is handed to `on_text`, in order with
        the other events, often straight from the frame reader (the cheap path for a busy bot).
        It must return at once; what it raises ends the turn."""
        client = self.client
        if self.gate is not None:
            self.gate.restores = 0  # a prompt between restores: the agent is not fighting us
        backend = client.backend
        return PromptTurn(
            SessionLine(client.runtime.handle, self.inbox, self.session_id),
            TurnAgent(
                name=client.agent or backend.label,
                quirks=backend.quirks(_looks_like_error_text),
                classify=self._error_from,
                stderr_tail=client.runtime.stderr.text,
                cancel_grace=client.cancel_grace,
            ),
            TurnHooks(
                claim=self._claim,
                release=self._release,
                observe=self._observe,
                warn=self.state.warn,
                restore_gate=self.restore_gate if self.gate is not None else None,
                on_switch_mode=self.on_switch_mode,
            ),
            TurnApprovals(self.cover, client.runtime.spec.workspace),
            gated=self.gated and not backend.sandboxed_gate,
            timeout=timeout,
            on_text=on_text,
        ).run(prompt)

    def _claim(self, turn: PromptTurn) -> None:
        if self.turn is not None:
            raise AcpPromptBusy()
        self.turn = turn

    def _release(self, turn: PromptTurn) -> None:
        self.turn = None
        self.turns += 1
        if turn.cancel_ignored:
            # A hung agent would hold every later prompt: stop it; the next one respawns.
            self.client.runtime.abandon()

    def _error_from(self, error: dict[str, Any], partial_output: str) -> AcpError:
        return _acp_error_from(
            error,
            backend=self.client.backend,
            advertised_models=self.models or None,
            fresh_session=self.turns == 0,
            partial_output=partial_output,
            sign_in=self.client.sign_in,
            agent=self.client.agent_name,
        )

    async def cancel(self) -> None:
        """Ask the agent to stop the running turn (no-op when idle)."""
        if self.turn is not None:
            await self.turn.cancel()

    async def cancel_subagent(self, child_id: str) -> None:
        """Stop one subagent's current work; the turn goes on (`acp.subagent_control`). Raises
        `AcpSubagentNotRunning` unless `child_id` is a cancellable subagent of the running turn."""
        await cancel_subagent(
            self.client.runtime.handle, self.session_id, self.turn is not None, child_id
        )

    async def set_model(self, model: str) -> None:
        """Switch the model the way this agent describes: its model config option (by the
        option's own id), else the legacy session/set_model when it lists `models`."""
        state = self.state
        option = state.model_option
        params: dict[str, Any]
        if option is not None:
            method = "session/set_config_option"
            params = {"sessionId": self.session_id, "configId": option.option_id, "value": model}
        elif state.legacy_models or self.client.backend.name == "kiro":
            method = "session/set_model"
            params = {"sessionId": self.session_id, "modelId": model}
        else:
            raise AcpModelChoiceUnsupported(model)
        reply = await self.client.runtime.call(method, params)
        if reply.error is not None:
            if self.models and model not in self.models:
                raise AcpModelUnavailable(model, self.models, raw_error=reply.error)
            raise self._error_from(reply.error, "")
        result = reply.result if isinstance(reply.result, dict) else {}
        if option is None:
            state.legacy_model = model
        elif isinstance(result.get("configOptions"), list):
            state.absorb_result(result)  # the agent's word on every option, after the change
            if self.gate is not None:
                self.gate.check()  # a result that carries options: the gate's too
        else:
            state.chose(option.option_id, model)

    def close(self) -> None:
        """Stop using the session here; the agent may keep it (a binding can load it again)."""
        self.client.runtime.handle.close_inbox(self.session_id)
        self.client.runtime.client_methods.terminals.release_session(self.session_id)
        self.client.sessions.pop(self.session_id, None)
        self.client.released.pop(self.session_id, None)

    def release(self) -> None:
        """Drop our objects for an idle session the agent keeps alive: `AcpClient.reattach`
        picks it up again without session/load while this agent runs."""
        self.close()
        self.client.remember_released(
            self.session_id,
            Released(
                replace(option, current="") if (option := self.state.model_option) else None,
                self.state.legacy_models,
                prompted=self.turns > 0,
            ),
        )
