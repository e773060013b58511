"""What went wrong in a conversation with an agent, as data: the `AcpError` family (its tree is
drawn in ARCHITECTURE.md), and the raise helper that turns a raw JSON-RPC error
`{code, message, data}` into one of them.

Each message is built from the attributes, so what a person reads and what code decides on cannot
drift apart. The error catalogue is an ordered table of error classes over `_RE_*` patterns
(`acp.error_catalogue`), read by `acp.error_reading`; `_format_acp_error` (what the person reads)
and `_is_transient_raw_error` (whether the ladder retries) both walk it, so wording and verdict
never drift apart. The session API that raises these (`acp.session`, `acp.agent_client`) needs
this module, never the other way round."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from acp.backends import Backend, get_backend
from acp.error_reading import AUTH_KINDS, classify, instruction
from acp.session_handle import NEXT_STEP
from acp.tool_gate import ToolGateUnroutable

__all__ = [
    "AcpAuthRequired",
    "AcpError",
    "AcpGateViolation",
    "AcpModelUnavailable",
    "AcpPermissionNeeded",
    "AcpProcessDied",
    "AcpPromptBusy",
    "AcpProtocolMismatch",
    "AcpTimeoutError",
    "AcpToolGateUnroutable",
]


# ---- the AcpError family -----------------------------------------------------------------
def _with_request_id(text: str, request_id: str) -> str:
    """The provider's request id, shown once, so a support ticket can quote it."""
    if not request_id or request_id in text:
        return text
    return f"{text} (request id: {request_id})"


def _retries_clause(retries: int) -> str:
    """Said only when the ladder really retried: the count is the ladder's own."""
    if retries <= 0:
        return ""
    return (
        f" and kept doing so through {retries} automatic {'retry' if retries == 1 else 'retries'}"
    )


class AcpError(Exception):
    """`what` says what happened; `advice`, when given, what to do. With advice, the retries the
    ladder spent (`retries`, set by whoever retried) and why it stopped early (`stopped_because`)
    are told between the two."""

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
        # Why the ladder stopped retrying early (e.g. the turn's time limit), set by it; told,
        # like the retries, between what happened and the advice.
        self.stopped_because = ""
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
            stopped = f"; {self.stopped_because}" if self.stopped_because else ""
            sentence = f"{self.what}{_retries_clause(self.retries)}{stopped}. {self.advice}"
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


class AcpGateViolation(AcpError):
    """A tool that changes things ran without a permission request while the gate said the
    agent asks first: the turn is stopped."""

    def __init__(self, agent: str, tool: str, partial_output: str = "") -> None:
        self.agent = agent
        self.tool = tool
        super().__init__(
            f"{agent} ran a tool ({tool}) without asking for approval although it was set to "
            "ask first, so Switchboard stopped the turn; check the agent's own permission "
            "settings before you go on.",
            kind="gate_violation",
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
    """The agent needs signing in (`rejected`: the model service refused the credentials it
    has, an HTTP 401 or an invalid API key). `agent` names it (its `agentInfo` title or name
    when it gave one, else the preset's label); `said` is its own instruction from the error,
    bounded and redacted ("" when it gave none worth quoting)."""

    def __init__(
        self,
        agent: str,
        sign_in: str,
        *,
        said: str = "",
        rejected: bool = False,
        code: int | None = None,
        raw_error: dict[str, Any] | None = None,
        request_id: str = "",
    ) -> None:
        self.backend_label = agent
        self.sign_in = sign_in
        self.said = said
        self.rejected = rejected
        quoted = f' (it said: "{said}")' if said else ""
        if rejected:
            what = (
                f"{_subject(agent)} is not signed in: its model service rejected its "
                f"credentials{quoted}. Check the API key it uses, or {sign_in}, then try again."
            )
        else:
            what = (
                f"{_subject(agent)} is not signed in to its model service{quoted}: {sign_in}, "
                "then try again."
            )
        super().__init__(
            f"{what} Retrying or switching models will not help.",
            kind="auth",
            code=code,
            raw_error=raw_error,
            request_id=request_id,
        )


class AcpProtocolMismatch(AcpError):
    """The agent speaks another version of ACP than ours (`theirs` None: it did not say which,
    only that it refused ours, in `said`)."""

    def __init__(self, agent: str, ours: int | str, theirs: object, said: str = "") -> None:
        self.agent = agent
        self.ours = ours
        self.theirs = theirs
        spoken = (
            f"speaks ACP protocol version {json.dumps(theirs)}"
            if theirs is not None
            else f"refused ACP protocol version {json.dumps(ours)} ({said})"
        )
        super().__init__(
            f"{_subject(agent)} {spoken}, but Switchboard speaks version {json.dumps(ours)}; use "
            f"a version of the agent that speaks ACP version {json.dumps(ours)}.",
            kind="protocol",
        )


# How agents word a refusal of the protocol version we asked for.
_RE_VERSION_REFUSED = re.compile(r"(unsupported|incompatible|unknown)\W+protocol\W*version", re.I)


def _version_refusal(error: dict[str, Any]) -> str:
    """The agent's words when its error to `initialize` refuses our protocol version, on one line
    ("" when the error is about something else)."""
    said = f"{error.get('message') or ''} {error.get('data') or ''}"
    return " ".join(said.split()) if _RE_VERSION_REFUSED.search(said) else ""


def _subject(agent: str) -> str:
    """An agent's name as the start of a sentence, which begins with a capital letter."""
    if agent[:4].lower() == "the ":
        return "The " + agent[4:]
    return f"The agent {agent}"


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


# ---- reading a raw error into one of them ---------------------------------------------------
def _acp_error_from(
    error: dict[str, Any],
    *,
    backend: Backend | None = None,
    advertised_models: Sequence[str] | None = None,
    fresh_session: bool = False,
    partial_output: str = "",
    sign_in: str = "",
    agent: str = "",
) -> AcpError:
    """The raise helper: a raw JSON-RPC error object -> the AcpError a caller should raise.
    `sign_in` says how to sign in when the agent said so itself (its `authMethods`); `agent`
    names it as it named itself (`agentInfo`), else the backend's label is used."""
    backend = backend or get_backend("generic")
    verdict = classify(error, advertised_models=advertised_models, fresh_session=fresh_session)
    code, request_id = verdict.code, verdict.request_id
    exc: AcpError
    if verdict.kind == "prompt_busy":
        exc = AcpPromptBusy(code=code, raw_error=error)
    elif verdict.kind in AUTH_KINDS:
        exc = AcpAuthRequired(
            agent or backend.label,
            sign_in or backend.sign_in,
            said=instruction(verdict.shown),
            rejected=verdict.kind == "auth_rejected",
            code=code,
            raw_error=error,
            request_id=request_id,
        )
    elif verdict.kind == "model_unavailable":
        exc = AcpModelUnavailable(
            verdict.model,
            advertised_models or (),
            code=code,
            raw_error=error,
            request_id=request_id,
        )
    else:
        exc = AcpError(
            verdict.text,
            advice=verdict.advice,
            kind=verdict.kind,
            transient=verdict.transient,
            code=code,
            raw_error=error,
            request_id=request_id,
        )
    exc.partial_output = partial_output
    return exc


def _format_acp_error(
    error: dict[str, Any],
    *,
    backend: Backend | None = None,
    advertised_models: Sequence[str] | None = None,
    fresh_session: bool = False,
) -> str:
    """What a person is told about a raw JSON-RPC error (surface-blind wording)."""
    return _acp_error_from(
        error, backend=backend, advertised_models=advertised_models, fresh_session=fresh_session
    ).text


def _is_transient_raw_error(
    error: dict[str, Any], *, advertised_models: Sequence[str] | None = None
) -> bool:
    """Whether the retry ladder may try this error again."""
    return classify(error, advertised_models=advertised_models).transient


def _looks_like_error_text(text: str) -> bool:
    """A streamed chunk that may merely echo the error about to arrive (claude does this)."""
    return classify({"code": -32603, "message": text}).kind != "unknown"


def _says_sign_in_needed(text: str) -> bool:
    """Whether an agent's own words (e.g. its stderr as it exits) say it is not signed in."""
    return classify({"code": -32603, "message": text}).kind in AUTH_KINDS
