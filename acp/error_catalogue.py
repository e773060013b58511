"""The error catalogue: every class of agent error Switchboard recognises, as an ordered table.

Each `Row` is one class: the `_RE_*` pattern that recognises it (in the text `data` carries, or
in `message`), the retry verdict, and what a person reads. First match wins, so the order is
the precedence. Every backend reports failures differently (kiro: a string in `data`; claude:
text after "Internal error: " plus `data.errorKind`; codex: `data.message`/`codexErrorInfo`, or
a text chunk after a `systemError` thread status); the rows hold all of their wordings.
`acp.error_reading` walks the table; `acp.client` turns what it finds into an `AcpError`."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# ---- the patterns ------------------------------------------------------------------------
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
_RE_POLICY = re.compile(r"\bcyberPolicy\b|misalignmentPolicyViolation", re.I)


# ---- a row -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Clue:
    """What a row's extra condition may look at once its pattern matched."""

    model: str
    shown: str
    advertised_models: Sequence[str] | None
    fresh_session: bool


@dataclass(frozen=True, slots=True)
class Row:
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
    when: Callable[[Clue], bool] | None = None  # a further condition, else the next row


def _captured_model(found: re.Match[str]) -> str:
    return found.group(1) or found.group(2) or ""


def _quoted_model(found: re.Match[str]) -> str:
    """kiro quotes the model and may end the sentence right after the quote."""
    return _captured_model(found).rstrip(".:,;")


def _advertised_lacks(model: str, advertised: Sequence[str] | None) -> bool:
    return bool(advertised) and model.lower() not in {m.lower() for m in advertised or ()}


def _not_entitled(clue: Clue) -> bool:
    """kiro's "The model 'x' is not available" means the account may not use x only when the
    agent's non-empty model list lacks x; otherwise x is out of capacity for now."""
    return _advertised_lacks(clue.model, clue.advertised_models)


def _provider_explained(clue: Clue) -> bool:
    return bool(clue.shown)


def _fresh(clue: Clue) -> bool:
    return clue.fresh_session


# ---- the table ---------------------------------------------------------------------------
_TRY_SHORTLY = "Try again shortly, or choose another model."
_OVERFLOW = (
    "The conversation no longer fits in the model's context window, and a retry cannot fix that. "
)

# First match wins, so the order is the precedence: structural facts (busy, output limit, lost
# session, unentitled model) first, then account and request facts (usage limit, malformed,
# context, image, size), then capacity, throttling and credential propagation, then sign-in, then
# connection, generation and server failures (words a provider also uses for the classes above),
# and the policy block last. A message matching no row is quoted as the agent's own (`unknown`).
CATALOGUE: tuple[Row, ...] = (
    # The phrase counts in `data` or in `message`, whichever the backend uses.
    Row("prompt_busy", True, _RE_PROMPT_BUSY, also_in_message=True),
    Row(
        "output_limit",
        False,
        _RE_OUTPUT_LIMIT,
        "The answer hit the model's output limit and was cut off; ask for smaller steps.",
    ),
    Row(
        "session_lost",
        False,
        _RE_SESSION_LOST,
        "The agent no longer has this conversation's session; the next message starts without "
        "the earlier context.",
        code=-32002,
    ),
    Row(
        "model_unavailable",
        False,
        _RE_MODEL_NOT_AVAILABLE,
        model=_quoted_model,
        when=_not_entitled,
    ),
    Row("model_unavailable", False, _RE_MODEL_NOT_FOUND, model=_captured_model),
    Row(
        "usage_limit",
        False,
        _RE_USAGE_LIMIT,
        "The agent's model account has reached its usage limit{said}. Retrying will not help "
        "until the allowance resets: check the plan, or switch to a model or tier with capacity "
        "left.",
    ),
    Row(
        "malformed",
        False,
        _RE_MALFORMED,
        "The model service rejected the request as malformed, so sending it again unchanged "
        "would fail the same way. Send /compact to shrink and repair the conversation, or start "
        "a new conversation.",
    ),
    Row(
        "context_overflow",
        False,
        _RE_CONTEXT_OVERFLOW,
        _OVERFLOW + "Even a brand-new conversation is too big, so the agent's standing tools, "
        "rules or resources must be reduced.",
        when=_fresh,
    ),
    Row(
        "context_overflow",
        False,
        _RE_CONTEXT_OVERFLOW,
        _OVERFLOW + "Send /compact to summarise the conversation, or start a new conversation.",
    ),
    Row(
        "image_rejected",
        False,
        _RE_IMAGE,
        "The model service refused an image{said}, and the conversation would replay it every "
        "turn. Resend it as a PNG or JPEG under 5 MB, or start a new conversation.",
    ),
    Row("oversized", False, _RE_OVERSIZED, "{shown}", when=_provider_explained),
    Row(
        "oversized",
        False,
        _RE_OVERSIZED,
        "The request is too large to send; remove or reduce the attached content.",
    ),
    # The same kiro wording as the unentitled row above, when the account may use the model.
    Row(
        "model_capacity",
        True,
        _RE_MODEL_NOT_AVAILABLE,
        "The model '{model}' is temporarily unavailable",
        advice=_TRY_SHORTLY,
        model=_quoted_model,
    ),
    Row(
        "model_capacity",
        True,
        _RE_MODEL_CAPACITY,
        "The selected model is temporarily unavailable",
        advice=_TRY_SHORTLY,
    ),
    Row(
        "throttled",
        True,
        _RE_THROTTLE,
        "The model service is throttling requests (rate limit)",
        advice="Wait a minute and try again, or choose another model.",
    ),
    Row(
        "credential_propagation",
        True,
        _RE_CREDENTIAL_PROPAGATION,
        "The model service rejected the agent's credentials",
        advice="That usually passes shortly after they are issued: try again in a minute, and "
        "if it persists, refresh the agent's credentials.",
    ),
    Row("auth_rejected", False, _RE_KEY_REJECTED),
    Row("auth", False, _RE_AUTH, code=-32000),
    Row("auth", False, _RE_AUTH, code=401),  # the HTTP status as the JSON-RPC code (gemini-cli)
    Row(
        "connection",
        True,
        _RE_CONNECTION,
        "The agent could not reach its model service (connection failure)",
        advice="Check the agent host's network or the model endpoint, then try again.",
    ),
    Row(
        "generate_failed",
        True,
        _RE_GENERATE_FAILED,
        "The model service failed to produce a response",
        advice="Try again.",
    ),
    Row(
        "server_error",
        True,
        _RE_SERVER,
        "The model service had a temporary server error (5xx or overloaded)",
        advice="Try again later; if it recurs, choose another model.",
    ),
    Row(
        "policy_blocked",
        False,
        _RE_POLICY,
        "The model service blocked this request under its usage policy; rephrase it, or start a "
        "new conversation.",
    ),
)
