"""What went wrong in a conversation with an agent, as data: the `AcpError` family, and the
catalogue that reads a raw JSON-RPC error `{code, message, data}` into one of them.

::

    AcpError                    .transient = the retry verdict, .kind = the catalogue class,
                                .retries = automatic retries the ladder spent before giving up
    ├── AcpTimeoutError         .partial_output
    ├── AcpPermissionNeeded     tool approval required and nobody can answer
    ├── AcpGateViolation        a changing tool ran unasked while the gate held; non-retryable
    ├── AcpProcessDied          .ambiguous_delivery (died after the prompt may have been consumed)
    ├── AcpAuthRequired         non-retryable; names the backend's sign-in step
    ├── AcpToolGateUnroutable   non-retryable; wraps tool_gate.ToolGateUnroutable
    ├── AcpModelUnavailable     non-retryable
    └── AcpPromptBusy           a prompt is already in flight on this session

Each message is built from the attributes, so what a person reads and what code decides on cannot
drift apart. Every backend reports failures differently (kiro: a string in `data`; claude: text
after "Internal error: " plus `data.errorKind`; codex: `data.message`/`codexErrorInfo`, or a text
chunk after a `systemError` thread status). `_CATALOGUE` is an ordered table of error classes over
the module-level `_RE_*` patterns; `_format_acp_error` (what the person reads) and
`_is_transient_raw_error` (whether the ladder retries) both walk it, so wording and verdict never
drift apart. The session API that raises these lives in `acp.session`, which this module does not
need."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from acp._dispatch import redact_links
from acp.backends import Backend, get_backend
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


def _subject(agent: str) -> str:
    """An agent's name as the start of a sentence, which begins with a capital letter."""
    if agent[:4].lower() == "the ":
        return "The " + agent[4:]
    return f"The agent {agent}"


def sign_in_advice(auth_methods: Sequence[dict[str, Any]], fallback: str) -> str:
    """How to sign in, in the agent's own words (its `authMethods`) when it gave any."""
    said = []
    for method in auth_methods[:3]:
        text = method.get("description") or method.get("name") or ""
        if isinstance(text, str) and text.strip():
            said.append(" ".join(text.split())[:200].rstrip("."))
    return "; or ".join(said) if said else fallback


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
    r"|security token included in the request is (?:expired|invalid or expired)"
    # a bad or missing key, as model APIs say it (OpenAI, Gemini, their compatibles), also
    # inside a JSON string in `message` (gemini-cli passes the API's error object on as text)
    r"|incorrect api key|api key not valid|api[ _-]?key (?:is )?(?:missing|required|not set)"
    r"|missing api[ _-]?key|no api[ _-]?key|\bUNAUTHENTICATED\b|\"code\\?\":\s*401\b",
    re.I,
)
# The model service refused the key or token it was given (HTTP 401, an invalid API key): said
# as rejected credentials rather than a missing sign-in.
_RE_KEY_REJECTED = re.compile(
    r"invalid (?:x-)?api[ _-]?key|incorrect api[ _-]?key|api[ _-]?key (?:is )?(?:not valid|invalid)"
    r"|\binvalid_api_key\b|\bauthentication_error\b|\b401\b\W{0,3}unauthori[sz]ed"
    r"|\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?: code)?|code|error)\"?:?\s?401\b|\(401\)",
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


# ---- the catalogue -----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Clue:
    """What a row's extra condition may look at once its pattern matched."""

    model: str
    shown: str
    advertised_models: Sequence[str] | None
    fresh_session: bool


@dataclass(frozen=True, slots=True)
class _Row:
    """One class of agent error: the pattern that recognises it, the retry verdict, and what a
    person reads. `text` may name `{said}` (the provider's words in parentheses, when it gave
    any), `{shown}` (those words bare) and `{model}` (the model the match names). With `advice`,
    `text` has no final full stop: the retries spent are told between the two. An empty `text`
    means the class has its own exception, which builds its message from data."""

    kind: str
    transient: bool
    pattern: re.Pattern[str]
    text: str = ""
    advice: str = ""
    code: int | None = None  # a JSON-RPC code that means this class whatever the words
    also_in_message: bool = False  # match `message` too when `data` carries the text
    model: Callable[[re.Match[str]], str] | None = None  # the model the match names
    when: Callable[[_Clue], bool] | None = None  # a further condition, else the next row


@dataclass(frozen=True, slots=True)
class _Verdict:
    kind: str
    transient: bool
    text: str  # what happened; with `advice`, without its final full stop
    model: str = ""
    advice: str = ""  # what to do, when the retries spent are to be told between the two
    code: int | None = None
    request_id: str = ""
    shown: str = ""  # the agent's own words, as a person may read them


def _captured_model(found: re.Match[str]) -> str:
    return found.group(1) or found.group(2) or ""


def _quoted_model(found: re.Match[str]) -> str:
    """kiro quotes the model and may end the sentence right after the quote."""
    return _captured_model(found).rstrip(".:,;")


def _advertised_lacks(model: str, advertised: Sequence[str] | None) -> bool:
    return bool(advertised) and model.lower() not in {m.lower() for m in advertised or ()}


def _not_entitled(clue: _Clue) -> bool:
    """kiro's "The model 'x' is not available" means the account may not use x only when the
    agent's non-empty model list lacks x; otherwise x is out of capacity for now."""
    return _advertised_lacks(clue.model, clue.advertised_models)


def _provider_explained(clue: _Clue) -> bool:
    return bool(clue.shown)


def _fresh(clue: _Clue) -> bool:
    return clue.fresh_session


_TRY_SHORTLY = "Try again shortly, or choose another model."
_OVERFLOW = (
    "The conversation no longer fits in the model's context window, and a retry cannot fix that. "
)

# First match wins, so the order is the precedence: structural facts (busy, output limit, lost
# session, unentitled model) first, then account and request facts (usage limit, malformed,
# context, image, size), then capacity, throttling and credential propagation, then sign-in, then
# connection, generation and server failures (words a provider also uses for the classes above),
# and the policy block last. A message matching no row is quoted as the agent's own (`_unknown`).
_CATALOGUE: tuple[_Row, ...] = (
    # The phrase counts in `data` or in `message`, whichever the backend uses.
    _Row("prompt_busy", True, _RE_PROMPT_BUSY, also_in_message=True),
    _Row(
        "output_limit",
        False,
        _RE_OUTPUT_LIMIT,
        "The answer hit the model's output limit and was cut off; ask for smaller steps.",
    ),
    _Row(
        "session_lost",
        False,
        _RE_SESSION_LOST,
        "The agent no longer has this conversation's session; the next message starts without "
        "the earlier context.",
        code=-32002,
    ),
    _Row(
        "model_unavailable",
        False,
        _RE_MODEL_NOT_AVAILABLE,
        model=_quoted_model,
        when=_not_entitled,
    ),
    _Row("model_unavailable", False, _RE_MODEL_NOT_FOUND, model=_captured_model),
    _Row(
        "usage_limit",
        False,
        _RE_USAGE_LIMIT,
        "The agent's model account has reached its usage limit{said}. Retrying will not help "
        "until the allowance resets: check the plan, or switch to a model or tier with capacity "
        "left.",
    ),
    _Row(
        "malformed",
        False,
        _RE_MALFORMED,
        "The model service rejected the request as malformed, so sending it again unchanged "
        "would fail the same way. Send /compact to shrink and repair the conversation, or start "
        "a new conversation.",
    ),
    _Row(
        "context_overflow",
        False,
        _RE_CONTEXT_OVERFLOW,
        _OVERFLOW + "Even a brand-new conversation is too big, so the agent's standing tools, "
        "rules or resources must be reduced.",
        when=_fresh,
    ),
    _Row(
        "context_overflow",
        False,
        _RE_CONTEXT_OVERFLOW,
        _OVERFLOW + "Send /compact to summarise the conversation, or start a new conversation.",
    ),
    _Row(
        "image_rejected",
        False,
        _RE_IMAGE,
        "The model service refused an image{said}, and the conversation would replay it every "
        "turn. Resend it as a PNG or JPEG under 5 MB, or start a new conversation.",
    ),
    _Row("oversized", False, _RE_OVERSIZED, "{shown}", when=_provider_explained),
    _Row(
        "oversized",
        False,
        _RE_OVERSIZED,
        "The request is too large to send; remove or reduce the attached content.",
    ),
    # The same kiro wording as the unentitled row above, when the account may use the model.
    _Row(
        "model_capacity",
        True,
        _RE_MODEL_NOT_AVAILABLE,
        "The model '{model}' is temporarily unavailable",
        advice=_TRY_SHORTLY,
        model=_quoted_model,
    ),
    _Row(
        "model_capacity",
        True,
        _RE_MODEL_CAPACITY,
        "The selected model is temporarily unavailable",
        advice=_TRY_SHORTLY,
    ),
    _Row(
        "throttled",
        True,
        _RE_THROTTLE,
        "The model service is throttling requests (rate limit)",
        advice="Wait a minute and try again, or choose another model.",
    ),
    _Row(
        "credential_propagation",
        True,
        _RE_CREDENTIAL_PROPAGATION,
        "The model service rejected the agent's credentials",
        advice="That usually passes shortly after they are issued: try again in a minute, and "
        "if it persists, refresh the agent's credentials.",
    ),
    _Row("auth_rejected", False, _RE_KEY_REJECTED),
    _Row("auth", False, _RE_AUTH, code=-32000),
    _Row("auth", False, _RE_AUTH, code=401),  # the HTTP status as the JSON-RPC code (gemini-cli)
    _Row(
        "connection",
        True,
        _RE_CONNECTION,
        "The agent could not reach its model service (connection failure)",
        advice="Check the agent host's network or the model endpoint, then try again.",
    ),
    _Row(
        "generate_failed",
        True,
        _RE_GENERATE_FAILED,
        "The model service failed to produce a response",
        advice="Try again.",
    ),
    _Row(
        "server_error",
        True,
        _RE_SERVER,
        "The model service had a temporary server error (5xx or overloaded)",
        advice="Try again later; if it recurs, choose another model.",
    ),
    _Row(
        "policy_blocked",
        False,
        _RE_POLICY,
        "The model service blocked this request under its usage policy; rephrase it, or start a "
        "new conversation.",
    ),
)


# ---- reading one raw error ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Parts:
    """A raw error as the catalogue reads it: its code, the text the patterns match, the text a
    person may be shown (redacted, without the request id or the agent's own chat commands), and
    the provider's request id."""

    code: int | None
    match_text: str
    shown_text: str
    request_id: str


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


# ---- walking the catalogue ---------------------------------------------------------------
def _classify(
    error: dict[str, Any],
    *,
    advertised_models: Sequence[str] | None = None,
    fresh_session: bool = False,
) -> _Verdict:
    """Walk `_CATALOGUE` for the first row the error matches."""
    parts = _split_error(error)
    text, shown = parts.match_text, parts.shown_text
    message = error.get("message")
    for row in _CATALOGUE:
        found = row.pattern.search(text)
        if found is None and row.also_in_message and isinstance(message, str):
            found = row.pattern.search(message)
        if found is None and (row.code is None or parts.code != row.code):
            continue
        model = row.model(found) if row.model is not None and found is not None else ""
        if row.when is not None and not row.when(
            _Clue(model, shown, advertised_models, fresh_session)
        ):
            continue
        said = f" ({shown})" if shown else ""
        return _Verdict(
            row.kind,
            row.transient,
            row.text.format(said=said, shown=shown, model=model),
            model=model,
            advice=row.advice,
            code=parts.code,
            request_id=parts.request_id,
            shown=shown,
        )
    return _unknown(error, parts)


_UNKNOWN_ADVICE = "Send the message again; if the error repeats, start a new conversation."


def _unknown(error: dict[str, Any], parts: _Parts) -> _Verdict:
    """Not a class we know: the agent's words are quoted as its own, and not retried."""
    if parts.shown_text:
        what = f'The agent reported an error: "{parts.shown_text}"'
    else:
        shown_error = dict(error)
        if isinstance(error.get("data"), dict):  # coded kinds are for us, not for people
            coded = ("errorKind", "codexErrorInfo")
            shown_error["data"] = {k: v for k, v in error["data"].items() if k not in coded}
        raw = _RE_SLASH_COMMAND.sub(
            "[command removed]", redact_links(json.dumps(shown_error, ensure_ascii=False))
        )[:500]
        what = f"The agent reported an error it did not explain: {raw}"
    return _Verdict(
        "unknown",
        False,
        what,
        advice=_UNKNOWN_ADVICE,
        code=parts.code,
        request_id=parts.request_id,
    )


_AUTH_KINDS = frozenset({"auth", "auth_rejected"})
# The agent's own words in a sign-in error are quoted when they say more than a label would
# ("Authentication required", "Not logged in"), and at most this long.
_INSTRUCTION_WORDS = 4
_INSTRUCTION_CHARS = 200


def _instruction(shown: str) -> str:
    """The agent's own words about signing in, worth quoting: bounded (already redacted and
    without chat commands, see `_split_error`)."""
    words = shown.split()
    if len(words) < _INSTRUCTION_WORDS:
        return ""
    text = " ".join(words).replace('"', "'")
    if len(text) > _INSTRUCTION_CHARS:
        text = text[: _INSTRUCTION_CHARS - 1].rstrip() + "…"
    return text


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
    verdict = _classify(error, advertised_models=advertised_models, fresh_session=fresh_session)
    code, request_id = verdict.code, verdict.request_id
    exc: AcpError
    if verdict.kind == "prompt_busy":
        exc = AcpPromptBusy(code=code, raw_error=error)
    elif verdict.kind in _AUTH_KINDS:
        exc = AcpAuthRequired(
            agent or backend.label,
            sign_in or backend.sign_in,
            said=_instruction(verdict.shown),
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
    return _classify(error, advertised_models=advertised_models).transient


def _looks_like_error_text(text: str) -> bool:
    """A streamed chunk that may merely echo the error about to arrive (claude does this)."""
    return _classify({"code": -32603, "message": text}).kind != "unknown"


def _says_sign_in_needed(text: str) -> bool:
    """Whether an agent's own words (e.g. its stderr as it exits) say it is not signed in."""
    return _classify({"code": -32603, "message": text}).kind in _AUTH_KINDS


def __getattr__(name: str) -> Any:
    """`acp.client.AcpClient` / `AcpSession`, where the design names the session API, without an
    import cycle: the session module needs this one, so it is imported only when asked for."""
    if name in ("AcpClient", "AcpSession"):
        from acp import session

        return getattr(session, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
