"""`AcpClient`: the session API the bot uses, and the reading of agent errors.

Every backend reports failures differently (kiro: a string in `data`; claude: text after
"Internal error: " plus `data.errorKind`; codex: `data.message`/`codexErrorInfo`, or a text chunk
after a `systemError` thread status). `_format_acp_error` (what the person reads) and
`_is_transient_raw_error` (whether the ladder retries) both come from one `_classify` over the
module-level `_RE_*` patterns, so wording and verdict never drift apart."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acp._dispatch import parse_permission_request, redact_links
from acp._turn import PromptTurn
from acp.backends import Backend, get_backend
from acp.errors import (
    AcpAuthRequired,
    AcpError,
    AcpModelUnavailable,
    AcpPermissionNeeded,
    AcpProcessDied,
    AcpPromptBusy,
    AcpTimeoutError,
    AcpToolGateUnroutable,
)
from acp.runtime import AcpRuntime
from acp.session_handle import AcpRuntimeDead, RpcReply
from acp.tool_gate import GatePlan, ToolGateUnroutable, describe_agent, find_mode_switch
from acp.types import AcpEvent, PendingPermission

__all__ = [
    "AcpAuthRequired",
    "AcpClient",
    "AcpError",
    "AcpModelUnavailable",
    "AcpPermissionNeeded",
    "AcpProcessDied",
    "AcpPromptBusy",
    "AcpSession",
    "AcpTimeoutError",
    "AcpToolGateUnroutable",
]

log = logging.getLogger(__name__)

# ---- the catalogue's patterns ------------------------------------------------------------
_RE_ENVELOPE = re.compile(r"^\s*Encountered an error in the response stream:\s*", re.I)
_RE_REQUEST_ID = re.compile(
    r"\s*[\(\[]?\s*request[ _-]?id\s*[:=]\s*([A-Za-z0-9][A-Za-z0-9\-_]{3,})\s*[\)\]]?\.?\s*$", re.I
)
_RE_INTERNAL_PREFIX = re.compile(r"^\s*Internal error:\s*", re.I)
_RE_PROMPT_BUSY = re.compile(r"already in progress", re.I)
_RE_OUTPUT_LIMIT = re.compile(r"\bmax_output_tokens\b|output token maximum", re.I)
_RE_SESSION_LOST = re.compile(
    r"\bSession (?:\S+ )?not found\b|Session is active in another process|invalid session id",
    re.I,
)
_RE_MODEL_NOT_AVAILABLE = re.compile(
    r"The model ['\"‘’]([^'\"‘’]+)['\"‘’] is not available|Invalid model ID:\s*['\"]?([\w.:/\-]+)",
    re.I,
)
_RE_MODEL_NOT_FOUND = re.compile(
    r"issue with the selected model \(([^)]*)\)|The model [`'\"]([^`'\"]+)[`'\"] does not exist"
    r"|\bmodel_not_found\b|\bmodel_not_supported\b",
    re.I,
)
_RE_USAGE_LIMIT = re.compile(
    r"usage limit|(?:reached|hit) your (?!rate )(?:\w+ )?limit|(?:monthly|daily|weekly) limit"
    r"|\b\d+-hour limit|MonthlyLimitError|exceeded your current quota"
    r"|FreeTierLimitExceeded|quota exceeded|insufficient_quota|usageLimitExceeded"
    r"|sessionBudgetExceeded|credit balance is too low|\bbilling_error\b|\baccount_on_hold\b"
    r"|\bquota_exhausted\b|out of credits",
    re.I,
)
_RE_MALFORMED = re.compile(r"Improperly formed request|malformed request", re.I)
_RE_CONTEXT_OVERFLOW = re.compile(
    r"context window (?:overflowed|exceeded)|prompt is too long|input is too long"
    r"|context_length_exceeded|contextWindowExceeded|maximum context length"
    r"|exceeds? the context (?:window|limit)",
    re.I,
)
_RE_IMAGE = re.compile(
    r"IMAGE_FORMAT_UNSUPPORTED|ImageValidationError|Could not process image"
    r"|image exceeds \d+ ?MB maximum|unsupported image",
    re.I,
)
# An HTTP status counts only when something says it is one (HTTP/status/code/error, or in
# parentheses): a bare "500" in provider text is just a number.
_RE_OVERSIZED = re.compile(
    r"message is too large to send|request entity too large|payload too large"
    r"|\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?: code)?|code|error)\"?:?\s?413\b|\(413\)",
    re.I,
)
_RE_MODEL_CAPACITY = re.compile(
    r"model you(?:'|’)ve selected is temporarily unavailable|model is (?:currently )?unavailable",
    re.I,
)
_RE_THROTTLE = re.compile(
    r"ThrottlingException|TooManyRequestsException|ServiceQuotaExceededException"
    r"|rate[ _-]?limit|throttl|too many requests|\(429\)|status:? 429|\bHTTP 429\b",
    re.I,
)
_RE_CREDENTIAL_PROPAGATION = re.compile(
    r"UnrecognizedClientException:? The security token included in the request is invalid"
    r"(?! or)(?!\s+or expired)",
    re.I,
)
_RE_AUTH = re.compile(
    r"Authentication required|AccessDeniedException|UnauthorizedException|ExpiredToken"
    r"|InvalidSignatureException|UnrecognizedClientException|\bHTTP 401\b|\bstatus:? 40[13]\b"
    r"|session (?:has )?expired|not logged in|not authenticated|not signed in|login required"
    r"|re-?authenticate|bearer token included in the request is invalid|invalid api key"
    r"|invalid x-api-key|\bauthentication_failed\b|\boauth_org_not_allowed\b"
    r"|\bverification_required\b|\bcloud_credential_error\b|\bunauthorized\b"
    r"|security token included in the request is (?:expired|invalid or expired)",
    re.I,
)
_RE_CONNECTION = re.compile(
    r"ECONNREFUSED|ECONNRESET|ECONNABORTED|ETIMEDOUT|EPIPE|EHOSTUNREACH|EAI_AGAIN"
    r"|socket hang up|fetch failed|connection (?:refused|reset|closed|error|timed out|failed)"
    r"|DispatchFailure|\btransport_lost\b|stream disconnected|responseStreamDisconnected"
    r"|network (?:error|is unreachable)|error sending request|Reconnecting\.\.\.",
    re.I,
)
_RE_SERVER = re.compile(
    r"InternalServerError|internal server error|internal failure|ServiceUnavailable"
    r"|service unavailable|\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?: code)?|code|error)\"?:?\s?5\d\d\b"
    r"|\(5\d\d\)|server-side issue"
    r"|overloaded|\bserver_error\b|server error|unexpected error during processing"
    r"|please try again|try your request again|high demand|temporar(?:il)?y unavailable"
    r"|bad gateway|gateway time-?out|serverOverloaded",
    re.I,
)
_RE_GENERATE_FAILED = re.compile(
    r"failed to generate a response|failed to process the request|\bno_result\b"
    r"|\bworker_shutdown\b|\bincomplete_tool_call\b",
    re.I,
)
# A chat slash command in quoted provider text (kiro's `/model`, claude's `/upgrade`, `/login`):
# surfaces understand only /compact. A path such as /home/x is not one.
_RE_SLASH_COMMAND = re.compile(r"(?<![\w/.~-])/(?!compact\b)[A-Za-z][\w-]*(?![\w/.])")
_RE_CLAUSE_BREAK = re.compile(r"(\s+·\s+|(?<=[.!?;])\s+)")
_RE_POLICY = re.compile(r"\bcyberPolicy\b|misalignmentPolicyViolation", re.I)
# Not a class we know, so the agent's words are quoted as its own and not retried.
_UNKNOWN_ADVICE = "Send the message again; if the error repeats, start a new conversation."


@dataclass(frozen=True, slots=True)
class _Parts:
    code: int | None
    match_text: str
    shown_text: str
    request_id: str


@dataclass(frozen=True, slots=True)
class _Verdict:
    kind: str
    transient: bool
    text: str  # what happened; with `advice`, without its final full stop
    model: str = ""
    advice: str = ""  # what to do, when the retries spent are to be told between the two


def _split_error(error: dict[str, Any]) -> _Parts:
    code = error.get("code") if isinstance(error.get("code"), int) else None
    raw_message = error.get("message")
    message: str = raw_message if isinstance(raw_message, str) else ""
    data = error.get("data")
    match_text: str
    carried = ""  # the text `data` carries, if any
    if isinstance(data, str) and data.strip():
        # kiro: the real text is the data string; match on it alone so a phrase echoed only
        # in `message` cannot flip the verdict.
        match_text = carried = data
    elif isinstance(data, dict) and data:
        match_text = f"{message} {json.dumps(data, ensure_ascii=False)}"
        carried = next(
            (str(data[k]) for k in ("message", "details", "error") if isinstance(data.get(k), str)),
            "",
        )
    else:
        match_text = message
    # `message` leads the shown text unless it is the boilerplate "Internal error" (claude puts
    # its text after "Internal error: ", so that prefix goes and the rest is the text).
    lead = _RE_INTERNAL_PREFIX.sub("", _RE_ENVELOPE.sub("", message.strip())).strip()
    if lead.rstrip(".").lower() == "internal error":
        lead = ""
    shown = _RE_INTERNAL_PREFIX.sub("", _RE_ENVELOPE.sub("", carried.strip())).strip()
    if shown.rstrip(".").lower() == "internal error":
        shown = ""
    if not shown:
        shown = lead
    elif lead and lead.lower() not in shown.lower():
        shown = f"{lead}: {shown}"
    request_id = ""
    found = _RE_REQUEST_ID.search(shown)
    if found:
        request_id = found.group(1)
        shown = shown[: found.start()].rstrip()
    shown = redact_links(shown)
    if _RE_SLASH_COMMAND.search(shown):
        # Drop the clauses that name an agent's own chat command (surfaces understand only
        # /compact); if every clause does, blank the commands out instead.
        pieces = _RE_CLAUSE_BREAK.split(shown)
        kept = ""
        for index in range(0, len(pieces), 2):
            if not _RE_SLASH_COMMAND.search(pieces[index]):
                kept += (pieces[index - 1] if kept else "") + pieces[index]
        shown = kept.strip() or _RE_SLASH_COMMAND.sub("[command removed]", shown)
    return _Parts(code, match_text, shown, request_id)


def _advertised_lacks(model: str, advertised: Sequence[str] | None) -> bool:
    return bool(advertised) and model.lower() not in {m.lower() for m in advertised or ()}


def _classify(
    error: dict[str, Any],
    *,
    advertised_models: Sequence[str] | None = None,
    fresh_session: bool = False,
) -> _Verdict:
    parts = _split_error(error)
    text, shown = parts.match_text, parts.shown_text
    said = f" ({shown})" if shown else ""
    message = error.get("message")
    if _RE_PROMPT_BUSY.search(text) or (
        isinstance(message, str) and _RE_PROMPT_BUSY.search(message)
    ):  # catalogue row 13: in `data` or `message`, whoever the backend
        return _Verdict("prompt_busy", True, "")
    if _RE_OUTPUT_LIMIT.search(text):
        return _Verdict(
            "output_limit",
            False,
            "The answer hit the model's output limit and was cut off; ask for smaller steps.",
        )
    if _RE_SESSION_LOST.search(text) or parts.code == -32002:
        return _Verdict(
            "session_lost",
            False,
            "The agent no longer has this conversation's session; the next message starts "
            "without the earlier context.",
        )
    # kiro's "The model 'x' is not available" / "Invalid model ID: x": not entitled (6b, first
    # in the chain) only when a non-empty advertised list lacks x; else capacity (6a, after
    # the structural classes).
    not_available = _RE_MODEL_NOT_AVAILABLE.search(text)
    unavailable_model = ""
    if not_available:
        unavailable_model = (not_available.group(1) or not_available.group(2) or "").rstrip(".:,;")
        if _advertised_lacks(unavailable_model, advertised_models):
            return _Verdict("model_unavailable", False, "", model=unavailable_model)
    not_found = _RE_MODEL_NOT_FOUND.search(text)
    if not_found:
        return _Verdict(
            "model_unavailable", False, "", model=(not_found.group(1) or not_found.group(2) or "")
        )
    if _RE_USAGE_LIMIT.search(text):
        return _Verdict(
            "usage_limit",
            False,
            f"The agent's model account has reached its usage limit{said}. Retrying will not "
            "help until the allowance resets: check the plan, or switch to a model or tier with "
            "capacity left.",
        )
    if _RE_MALFORMED.search(text):
        return _Verdict(
            "malformed",
            False,
            "The model service rejected the request as malformed, so sending it again "
            "unchanged would fail the same way. Send /compact to shrink and repair the "
            "conversation, or start a new conversation.",
        )
    if _RE_CONTEXT_OVERFLOW.search(text):
        if fresh_session:
            hint = (
                "Even a brand-new conversation is too big, so the agent's standing tools, rules "
                "or resources must be reduced."
            )
        else:
            hint = "Send /compact to summarise the conversation, or start a new conversation."
        return _Verdict(
            "context_overflow",
            False,
            f"The conversation no longer fits in the model's context window, and a retry "
            f"cannot fix that. {hint}",
        )
    if _RE_IMAGE.search(text):
        return _Verdict(
            "image_rejected",
            False,
            f"The model service refused an image{said}, and the conversation would replay it "
            "every turn. Resend it as a PNG or JPEG under 5 MB, or start a new conversation.",
        )
    if _RE_OVERSIZED.search(text):
        return _Verdict(
            "oversized",
            False,
            shown or "The request is too large to send; remove or reduce the attached content.",
        )
    if not_available:
        return _Verdict(
            "model_capacity",
            True,
            f"The model '{unavailable_model}' is temporarily unavailable",
            advice="Try again shortly, or choose another model.",
        )
    if _RE_MODEL_CAPACITY.search(text):
        return _Verdict(
            "model_capacity",
            True,
            "The selected model is temporarily unavailable",
            advice="Try again shortly, or choose another model.",
        )
    if _RE_THROTTLE.search(text):
        return _Verdict(
            "throttled",
            True,
            "The model service is throttling requests (rate limit)",
            advice="Wait a minute and try again, or choose another model.",
        )
    if _RE_CREDENTIAL_PROPAGATION.search(text):
        return _Verdict(
            "credential_propagation",
            True,
            "The model service rejected the agent's credentials",
            advice="That usually passes shortly after they are issued: try again in a minute, "
            "and if it persists, refresh the agent's credentials.",
        )
    if parts.code == -32000 or _RE_AUTH.search(text):
        return _Verdict("auth", False, "")
    if _RE_CONNECTION.search(text):
        return _Verdict(
            "connection",
            True,
            "The agent could not reach its model service (connection failure)",
            advice="Check the agent host's network or the model endpoint, then try again.",
        )
    if _RE_GENERATE_FAILED.search(text):
        return _Verdict(
            "generate_failed",
            True,
            "The model service failed to produce a response",
            advice="Try again.",
        )
    if _RE_SERVER.search(text):
        return _Verdict(
            "server_error",
            True,
            "The model service had a temporary server error (5xx or overloaded)",
            advice="Try again later; if it recurs, choose another model.",
        )
    if _RE_POLICY.search(text):
        return _Verdict(
            "policy_blocked",
            False,
            "The model service blocked this request under its usage policy; rephrase it, or "
            "start a new conversation.",
        )
    if shown:
        return _Verdict(
            "unknown",
            False,
            f'The agent reported an error: "{shown}"',
            advice=_UNKNOWN_ADVICE,
        )
    shown_error = dict(error)
    if isinstance(error.get("data"), dict):  # coded kinds are for us, not for people
        coded = ("errorKind", "codexErrorInfo")
        shown_error["data"] = {k: v for k, v in error["data"].items() if k not in coded}
    raw = _RE_SLASH_COMMAND.sub(
        "[command removed]", redact_links(json.dumps(shown_error, ensure_ascii=False))
    )[:500]
    return _Verdict(
        "unknown",
        False,
        f"The agent reported an error it did not explain: {raw}",
        advice=_UNKNOWN_ADVICE,
    )


def _acp_error_from(
    error: dict[str, Any],
    *,
    backend: Backend | None = None,
    advertised_models: Sequence[str] | None = None,
    fresh_session: bool = False,
    partial_output: str = "",
) -> AcpError:
    """The raise helper: a raw JSON-RPC error object -> the AcpError a caller should raise."""
    backend = backend or get_backend("generic")
    verdict = _classify(error, advertised_models=advertised_models, fresh_session=fresh_session)
    parts = _split_error(error)
    code = parts.code
    exc: AcpError
    if verdict.kind == "prompt_busy":
        exc = AcpPromptBusy(code=code, raw_error=error)
    elif verdict.kind == "auth":
        exc = AcpAuthRequired(
            backend.label,
            backend.sign_in,
            code=code,
            raw_error=error,
            request_id=parts.request_id,
        )
    elif verdict.kind == "model_unavailable":
        exc = AcpModelUnavailable(
            verdict.model,
            advertised_models or (),
            code=code,
            raw_error=error,
            request_id=parts.request_id,
        )
    else:
        exc = AcpError(
            verdict.text,
            advice=verdict.advice,
            kind=verdict.kind,
            transient=verdict.transient,
            code=code,
            raw_error=error,
            request_id=parts.request_id,
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
    return _classify(error, advertised_models=advertised_models).transient


def _looks_like_error_text(text: str) -> bool:
    """A streamed chunk that may merely echo the error about to arrive (claude does this)."""
    verdict = _classify({"code": -32603, "message": text})
    return verdict.kind != "unknown"


# ---- sessions ----------------------------------------------------------------------------
def _advertised_models(result: dict[str, Any]) -> list[str]:
    for option in result.get("configOptions") or ():
        if isinstance(option, dict) and (
            option.get("category") == "model" or option.get("id") == "model"
        ):
            values = [c.get("value") for c in option.get("options") or () if isinstance(c, dict)]
            return [v for v in values if isinstance(v, str)]
    models = result.get("models")
    if isinstance(models, dict):
        ids = [m.get("modelId") for m in models.get("availableModels") or () if isinstance(m, dict)]
        return [i for i in ids if isinstance(i, str)]
    return []


def _current_model(result: dict[str, Any]) -> str:
    for option in result.get("configOptions") or ():
        if isinstance(option, dict) and option.get("id") == "model":
            value = option.get("currentValue")
            return value if isinstance(value, str) else ""
    models = result.get("models")
    if isinstance(models, dict) and isinstance(models.get("currentModelId"), str):
        return str(models["currentModelId"])
    return ""


class AcpSession:
    """One agent session: prompt it, cancel it, pick its model."""

    def __init__(self, client: AcpClient, session_id: str, result: dict[str, Any]) -> None:
        self.client = client
        self.session_id = session_id
        self.result = result
        self.models = _advertised_models(result)
        self.model = _current_model(result)
        self.turns = 0
        self.turn: PromptTurn | None = None
        self.inbox = client.runtime.handle.open_inbox(session_id)

    @property
    def busy(self) -> bool:
        return self.turn is not None

    async def prompt(self, text: str, *, timeout: float | None = None) -> AsyncIterator[AcpEvent]:
        """Yield the turn's events, ending with one TERMINAL event carrying the stats.

        Raises an AcpError (or AcpRuntimeError) when the turn fails."""
        if self.turn is not None:
            raise AcpPromptBusy()
        client = self.client
        turn = PromptTurn(
            handle=client.runtime.handle,
            inbox=self.inbox,
            session_id=self.session_id,
            backend=client.backend,
            timeout=timeout,
            cancel_grace=client.cancel_grace,
            classify=self._error_from,
            looks_like_error=_looks_like_error_text,
            stderr_tail=client.runtime.stderr.text,
        )
        self.turn = turn
        try:
            async for event in turn.run(text):
                yield event
        finally:
            self.turn = None
            self.turns += 1
            if turn.cancel_ignored:
                # A hung agent would hold every later prompt: stop it; the next one respawns.
                client.runtime.abandon()

    def _error_from(self, error: dict[str, Any], partial_output: str) -> AcpError:
        return _acp_error_from(
            error,
            backend=self.client.backend,
            advertised_models=self.models or None,
            fresh_session=self.turns == 0,
            partial_output=partial_output,
        )

    async def cancel(self) -> None:
        """Ask the agent to stop the running turn (no-op when idle)."""
        if self.turn is not None:
            await self.turn.cancel()

    async def set_model(self, model: str) -> None:
        params: dict[str, Any]
        has_option = any(
            isinstance(o, dict) and o.get("id") == "model"
            for o in self.result.get("configOptions") or ()
        )
        if has_option:
            method = "session/set_config_option"
            params = {"sessionId": self.session_id, "configId": "model", "value": model}
        else:
            method = "session/set_model"
            params = {"sessionId": self.session_id, "modelId": model}
        reply = await self.client.runtime.call(method, params)
        if reply.error is not None:
            if self.models and model not in self.models:
                raise AcpModelUnavailable(model, self.models, raw_error=reply.error)
            raise self._error_from(reply.error, "")
        self.model = model

    def close(self) -> None:
        self.client.runtime.handle.close_inbox(self.session_id)
        self.client.sessions.pop(self.session_id, None)


class AcpClient:
    """Sessions on one running agent process."""

    def __init__(
        self, runtime: AcpRuntime, *, gate: GatePlan | None = None, cancel_grace: float = 10.0
    ) -> None:
        self.runtime = runtime
        self.gate = gate or GatePlan()
        self.cancel_grace = cancel_grace
        self.sessions: dict[str, AcpSession] = {}
        runtime.handle.on_request = self._on_agent_request

    @property
    def backend(self) -> Backend:
        return self.runtime.backend

    def _raise_for(self, reply: RpcReply) -> dict[str, Any]:
        if reply.error is not None:
            raise _acp_error_from(reply.error, backend=self.backend, fresh_session=True)
        return reply.result if isinstance(reply.result, dict) else {}

    async def handshake(self) -> None:
        try:
            reply = await self.runtime.initialize()
        except AcpRuntimeDead as exc:
            # An agent that exits at once often said why on stderr (e.g. not signed in).
            said = _classify({"code": -32603, "message": exc.stderr_tail})
            if said.kind == "auth":
                raise AcpAuthRequired(self.backend.label, self.backend.sign_in) from exc
            raise
        self._raise_for(reply)

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

    async def load_session(
        self, session_id: str, *, cwd: Path | None = None, model: str = "", timeout: float = 600.0
    ) -> AcpSession:
        """Resume a stored session. The agent replays the history first: it is not shown."""
        workspace = (cwd or self.runtime.workspace).resolve()
        self.runtime.check_workspace(workspace)
        params: dict[str, Any] = {"sessionId": session_id, "cwd": str(workspace), "mcpServers": []}
        if self.backend.kiro_session_meta:
            session_file = Path.home() / ".kiro" / "sessions" / "cli" / f"{session_id}.json"
            params["_meta"] = {"_kiro.dev/session_file": str(session_file)}
        reply = await PromptTurn.load(
            self.runtime.handle,
            session_id,
            params,
            idle_timeout=self.runtime.spec.request_timeout,
            hard_timeout=timeout,
        )
        result = self._raise_for(reply)
        return await self._adopt(session_id, result, model)

    async def _adopt(self, session_id: str, result: dict[str, Any], model: str) -> AcpSession:
        session = AcpSession(self, session_id, result)
        self.sessions[session_id] = session
        if self.gate.enforced and self.gate.mode:
            agent = describe_agent(self.backend, self.runtime.spec.argv)
            try:
                switch = find_mode_switch(agent, session_id, result, self.gate.mode)
            except ToolGateUnroutable as exc:
                raise AcpToolGateUnroutable(exc) from exc
            reply = await self.runtime.call(switch.method, switch.params)
            if reply.error is not None:
                raise AcpToolGateUnroutable(
                    ToolGateUnroutable(
                        agent,
                        f"it refused to switch to the session mode {self.gate.mode!r}, the one "
                        "that asks before every tool call",
                        "check the agent's own settings for what blocks that mode",
                    )
                )
        if model and model != session.model:
            await session.set_model(model)
        return session

    async def _on_agent_request(self, method: str, params: Any) -> RpcReply:
        if method != "session/request_permission" or not isinstance(params, dict):
            return RpcReply(error={"code": -32601, "message": "Method not found"})
        request = parse_permission_request(params)
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
