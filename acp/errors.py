"""The `AcpError` family: what went wrong in a conversation with an agent, as data.

::

    AcpError                    .transient = the retry verdict, .kind = the catalogue class,
                                .retries = automatic retries the ladder spent before giving up
    ├── AcpTimeoutError         .partial_output
    ├── AcpPermissionNeeded     tool approval required and nobody can answer
    ├── AcpProcessDied          .ambiguous_delivery (died after the prompt may have been consumed)
    ├── AcpAuthRequired         non-retryable; names the backend's sign-in step
    ├── AcpToolGateUnroutable   non-retryable; wraps tool_gate.ToolGateUnroutable
    ├── AcpModelUnavailable     non-retryable
    └── AcpPromptBusy           a prompt is already in flight on this session

Each message is built from the attributes, so what a person reads and what code decides on cannot
drift apart. `acp.client` re-exports all of them; this module exists so the classifier and the
client can share them without an import cycle."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from acp.session_handle import NEXT_STEP
from acp.tool_gate import ToolGateUnroutable


def _with_request_id(text: str, request_id: str) -> str:
    """The provider's request id, shown once, so a support ticket can quote it."""
    if not request_id or request_id in text:
        return text
    return f"{text} (request id: {request_id})"


def retries_clause(retries: int) -> str:
    """Said only when the ladder really retried: the count is the ladder's own."""
    if retries <= 0:
        return ""
    return (
        f" and kept doing so through {retries} automatic {'retry' if retries == 1 else 'retries'}"
    )


class AcpError(Exception):
    """`what` says what happened; `advice`, when given, what to do. With advice, the retries the
    ladder spent (`retries`, set by whoever retried) are told between the two."""

    def __init__(
        self,
        what: str,
        *,
        advice: str = "",
        kind: str = "unknown",
        transient: bool = False,
        code: int | None = None,
        raw_error: dict[str, Any] | None = None,
        request_id: str = "",
        partial_output: str = "",
    ) -> None:
        self.what = what
        self.advice = advice
        self.retries = 0
        self.kind = kind
        self.transient = transient
        self.code = code
        self.raw_error = raw_error
        self.request_id = request_id
        self.partial_output = partial_output
        super().__init__(what)

    @property
    def text(self) -> str:
        if self.advice:
            sentence = f"{self.what}{retries_clause(self.retries)}. {self.advice}"
        else:
            sentence = self.what
        return _with_request_id(sentence, self.request_id)

    def __str__(self) -> str:
        return self.text


class AcpTimeoutError(AcpError):
    def __init__(self, timeout: float, partial_output: str = "") -> None:
        self.timeout = timeout
        shown = "what it wrote so far is above" if partial_output.strip() else "it wrote nothing"
        super().__init__(
            f"The agent did not finish within {timeout:g} s, so the turn was stopped; {shown}. "
            "Ask again, perhaps for a smaller step, or allow a longer timeout.",
            kind="timeout",
            partial_output=partial_output,
        )


class AcpPermissionNeeded(AcpError):
    def __init__(self, tool: str, partial_output: str = "") -> None:
        self.tool = tool
        super().__init__(
            f"The agent asked for approval to run a tool ({tool}), and nobody can approve tools "
            "here, so the turn was stopped without running it. Use an interactive chat to "
            "approve it.",
            kind="permission_needed",
            partial_output=partial_output,
        )


class AcpProcessDied(AcpError):
    def __init__(
        self,
        returncode: int | None,
        *,
        ambiguous_delivery: bool,
        stderr_tail: str = "",
        partial_output: str = "",
    ) -> None:
        self.returncode = returncode
        self.ambiguous_delivery = ambiguous_delivery
        self.stderr_tail = stderr_tail
        status = "" if returncode is None else f" (exit code {returncode})"
        if ambiguous_delivery:
            # Earlier respawns are not this story: the request itself was not sent again.
            super().__init__(
                f"The agent process stopped unexpectedly{status} after it had started working "
                "on the request, so it was not sent again: check what it did, then ask it to "
                "continue. If it keeps stopping, check its command with `switchboard doctor`.",
                kind="process_died",
                partial_output=partial_output,
            )
        else:
            super().__init__(
                f"The agent process stopped unexpectedly{status} before it answered",
                advice=NEXT_STEP,
                kind="process_died",
                transient=True,
                partial_output=partial_output,
            )


class AcpAuthRequired(AcpError):
    def __init__(
        self,
        backend_label: str,
        sign_in: str,
        *,
        code: int | None = None,
        raw_error: dict[str, Any] | None = None,
        request_id: str = "",
    ) -> None:
        self.backend_label = backend_label
        self.sign_in = sign_in
        super().__init__(
            f"{backend_label} is not signed in to its model service: {sign_in}, then try "
            "again. Retrying or switching models will not help.",
            kind="auth",
            code=code,
            raw_error=raw_error,
            request_id=request_id,
        )


class AcpToolGateUnroutable(AcpError):
    def __init__(self, cause: ToolGateUnroutable) -> None:
        self.cause = cause
        super().__init__(
            f"Switchboard will not start {cause.agent}, because {cause.reason}, so its tools "
            f"could run without anybody approving them; {cause.fix}, or set "
            "SWITCHBOARD_ALLOW_UNGATED_TOOLS=true to accept that risk.",
            kind="tool_gate",
        )


class AcpModelUnavailable(AcpError):
    def __init__(
        self,
        model: str,
        advertised: Sequence[str],
        *,
        code: int | None = None,
        raw_error: dict[str, Any] | None = None,
        request_id: str = "",
    ) -> None:
        self.model = model
        self.advertised = tuple(advertised)
        if model.lower() == "auto":
            lead = "Automatic model choice is not available to this account"
        elif model:
            lead = f"This account cannot use the model '{model}'"
        else:
            lead = "This account cannot use the selected model"
        if self.advertised:
            shown = ", ".join(self.advertised[:8])
            more = f" (+{len(self.advertised) - 8} more)" if len(self.advertised) > 8 else ""
            tail = f"; the agent offers {shown}{more}. Choose one of those instead."
        else:
            tail = "; choose another model the agent offers."
        super().__init__(
            lead + tail,
            kind="model_unavailable",
            code=code,
            raw_error=raw_error,
            request_id=request_id,
        )


class AcpPromptBusy(AcpError):
    def __init__(self, *, code: int | None = None, raw_error: dict[str, Any] | None = None) -> None:
        super().__init__(
            "The agent is still busy with an earlier request in this conversation",
            advice="That clears by itself, so try again in a moment; if it persists, start a new "
            "conversation.",
            kind="prompt_busy",
            transient=True,
            code=code,
            raw_error=raw_error,
        )
