"""The backend error catalogue (each backend's error texts and verdicts), row by row, through the
real classifier.

Every case is a raw JSON-RPC error object `{code, message, data}` shaped the way its backend sends
it (kiro: text in a `data` string; claude: text after `Internal error: ` plus `data.errorKind`;
codex: `data.message` + `data.codexErrorInfo`, or the systemError chunk the turn wraps into a
`data` string), built from the catalogue's real texts plus variants of the same class. Each one
goes through `_acp_error_from`, `_format_acp_error` and `_is_transient_raw_error`, and the shown
text is held to the wording rules."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest

from acp.backends import get_backend
from acp.client import (
    AcpAuthRequired,
    AcpError,
    AcpModelUnavailable,
    AcpPromptBusy,
    _acp_error_from,
    _format_acp_error,
    _is_transient_raw_error,
)

RID = "3f2a9c1e-7b44-4d1a-9e0f-5c6b7a8d9e01"
HEX_RID = "3f2a9c1e7b444d1a9e0f"
ENVELOPE = "Encountered an error in the response stream: "
OVERSIZED = (
    "This message is too large to send, and it contains no text that can be shortened. "
    "Remove or reduce the attached content and try again."
)
ANTHROPIC_KEY = "sk-ant-api03-Xq7vB2mN9kLp4RtY8wZc1Df6Gh3Jk5Ls0Qe"
SLASH_COMMAND = re.compile(r"(?<![\w/.~-])/[A-Za-z][\w-]*(?![\w/.])")
ERROR_KINDS = (
    "authentication_failed",
    "oauth_org_not_allowed",
    "billing_error",
    "account_on_hold",
    "verification_required",
    "cloud_credential_error",
    "rate_limit",
    "invalid_request",
    "model_not_found",
    "max_output_tokens",
    "server_error",
    "incomplete_tool_call",
    "worker_shutdown",
    "no_result",
    "transport_lost",
    "quota_exhausted",
    "bypass_root",
)
CODEX_ERROR_INFOS = (
    "contextWindowExceeded",
    "sessionBudgetExceeded",
    "usageLimitExceeded",
    "serverOverloaded",
    "cyberPolicy",
    "misalignmentPolicyViolation",
    "badRequest",
    "responseStreamDisconnected",
)
MODELS = ["claude-sonnet-4.5", "claude-haiku-4.5", "claude-opus-4.1", "auto"]
MANY_MODELS = [f"model-{n:02d}" for n in range(1, 12)]  # 11 models: 8 shown, "+3 more"


# ---- how each backend carries its text -----------------------------------------------------
def kiro(text: str, *, message: str = "Internal error") -> dict[str, Any]:
    """kiro: every failure is -32603 "Internal error" with the text as a string in `data`."""
    return {"code": -32603, "message": message, "data": text}


def claude(text: str, kind: str | None = None) -> dict[str, Any]:
    """claude: -32603 with the text after "Internal error: ", and `data.errorKind`."""
    error: dict[str, Any] = {"code": -32603, "message": f"Internal error: {text}"}
    if kind is not None:
        error["data"] = {"errorKind": kind}
    return error


def codex(text: str, info: Any) -> dict[str, Any]:
    """codex: -32603 "Internal error" with `data.message` and `data.codexErrorInfo`."""
    return {
        "code": -32603,
        "message": "Internal error",
        "data": {"message": text, "codexErrorInfo": info},
    }


def codex_chunk(text: str) -> dict[str, Any]:
    """codex's systemError text chunk, wrapped the way the turn hands it to the classifier."""
    return {"code": -32603, "message": "Internal error", "data": text + "\n\n"}


def rpc(code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error


# ---- the table ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    error: dict[str, Any]
    kind: str
    transient: bool
    shows: tuple[str, ...] = ()
    rid: str = ""
    backend: str = "generic"


def case(
    name: str,
    error: dict[str, Any],
    kind: str,
    transient: bool,
    *,
    shows: tuple[str, ...] = (),
    rid: str = "",
    backend: str = "generic",
) -> Any:
    return pytest.param(Case(error, kind, transient, shows, rid, backend), id=name)


T, TR = False, True  # the catalogue's verdict column: terminal / transient

CATALOGUE = [
    # 1 malformed request
    case(
        "kiro improperly formed request inside the stream envelope with a request id",
        kiro(f"{ENVELOPE}ValidationException: Improperly formed request. (request_id: {RID})"),
        "malformed",
        T,
        rid=RID,
        backend="kiro",
    ),
    case("kiro improperly formed request bare", kiro("Improperly formed request."), "malformed", T),
    case(
        "kiro improperly formed request in lower case with a bracketed request id",
        kiro(f"improperly formed request [request-id: {HEX_RID}]"),
        "malformed",
        T,
        rid=HEX_RID,
    ),
    # 2 context overflow
    case(
        "kiro context window overflowed",
        kiro("The context window overflowed"),
        "context_overflow",
        T,
    ),
    case(
        "kiro input is too long in the envelope",
        kiro(f"{ENVELOPE}Input is too long. (request_id: {RID})"),
        "context_overflow",
        T,
        rid=RID,
    ),
    case(
        "claude prompt is too long with invalid_request",
        claude("Prompt is too long · 208341 tokens > 200000 maximum", "invalid_request"),
        "context_overflow",
        T,
        backend="claude",
    ),
    case(
        "claude prompt is too long without an errorKind",
        claude("Prompt is too long"),
        "context_overflow",
        T,
    ),
    case(
        "claude api error 400 input is too long with errorKind unknown",
        claude("API Error: 400 Input is too long.", "unknown"),
        "context_overflow",
        T,
    ),
    case(
        "codex chunk holding the raw context_length_exceeded body",
        codex_chunk(
            '{"type":"error","status":400,"error":{"type":"invalid_request_error",'
            '"code":"context_length_exceeded","message":"Your input exceeds the context window '
            'of this model. Please adjust your input and try again.","param":"input"}}'
        ),
        "context_overflow",
        T,
        backend="codex",
    ),
    case(
        "codex contextWindowExceeded category",
        codex(
            "Codex ran out of room in the model's context window. Start a new thread or clear "
            "earlier history before retrying.",
            "contextWindowExceeded",
        ),
        "context_overflow",
        T,
    ),
    # 3 image rejected
    case(
        "kiro image format unsupported in the envelope",
        kiro(f"{ENVELOPE}ValidationException: IMAGE_FORMAT_UNSUPPORTED (request_id: {RID})"),
        "image_rejected",
        T,
        rid=RID,
    ),
    case(
        "kiro image validation error",
        kiro("ImageValidationError: Could not process image"),
        "image_rejected",
        T,
    ),
    case(
        "kiro image over five megabytes",
        kiro("image exceeds 5 MB maximum: 6291456 bytes > 5242880"),
        "image_rejected",
        T,
        shows=("6291456 bytes",),
    ),
    case(
        "claude could not process image",
        claude("API Error: 400 Could not process image", "invalid_request"),
        "image_rejected",
        T,
    ),
    # 4 oversized request
    case(
        "kiro oversized message is terminal despite try again",
        kiro(OVERSIZED),
        "oversized",
        T,
        shows=(OVERSIZED,),
    ),
    case(
        "kiro oversized message with a request id",
        kiro(f"{ENVELOPE}{OVERSIZED} (request_id: {RID})"),
        "oversized",
        T,
        shows=(OVERSIZED,),
        rid=RID,
    ),
    # 5 usage / quota limit
    case(
        "kiro monthly usage limit",
        kiro("The monthly usage limit has been reached"),
        "usage_limit",
        T,
        shows=("The monthly usage limit has been reached",),
    ),
    case(
        "kiro monthly limit for this model in the envelope",
        kiro(f"{ENVELOPE}You have reached your monthly limit for this model. (request_id: {RID})"),
        "usage_limit",
        T,
        shows=("You have reached your monthly limit for this model",),
        rid=RID,
    ),
    case(
        "kiro daily usage limit", kiro("The daily usage limit has been reached"), "usage_limit", T
    ),
    case(
        "kiro weekly limit",
        kiro("You have reached your weekly limit for this model"),
        "usage_limit",
        T,
    ),
    case(
        "kiro monthly limit error type",
        kiro("MonthlyLimitError: usage exhausted for this billing period"),
        "usage_limit",
        T,
    ),
    case(
        "kiro free tier limit exceeded",
        kiro("FreeTierLimitExceeded: upgrade to continue"),
        "usage_limit",
        T,
    ),
    case(
        "codex quota exceeded with usageLimitExceeded",
        codex("Quota exceeded. Check your plan and billing details.", "usageLimitExceeded"),
        "usage_limit",
        T,
        shows=("Quota exceeded. Check your plan and billing details",),
        backend="codex",
    ),
    case(
        "codex chunk you have hit your usage limit with links",
        codex_chunk(
            "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or "
            "try again in 2 days 5 hours."
        ),
        "usage_limit",
        T,
    ),
    case(
        "openai exceeded your current quota",
        codex_chunk("You exceeded your current quota, please check your plan and billing details."),
        "usage_limit",
        T,
    ),
    case(
        "codex session budget exceeded",
        codex("This session has used its budget.", "sessionBudgetExceeded"),
        "usage_limit",
        T,
    ),
    case(
        "claude credit balance is too low",
        claude("Credit balance is too low", "billing_error"),
        "usage_limit",
        T,
        shows=("Credit balance is too low",),
        backend="claude",
    ),
    case(
        "claude account on hold",
        claude("Your organization's account is on hold.", "account_on_hold"),
        "usage_limit",
        T,
    ),
    case(
        "claude subscription limit quota exhausted",
        claude("Claude AI usage limit reached|1767225600", "quota_exhausted"),
        "usage_limit",
        T,
    ),
    case(
        "claude you have hit your limit without an errorKind",
        claude("You've hit your limit · resets 3pm (Europe/London)"),
        "usage_limit",
        T,
    ),
    case(
        "claude five hour limit naming the upgrade command",
        claude("5-hour limit reached · resets 3pm · /upgrade to increase your usage limit"),
        "usage_limit",
        T,
    ),
    # 6a model capacity
    case(
        "kiro model temporarily unavailable with an ascii apostrophe",
        kiro(
            "The model you've selected is temporarily unavailable. Please use '/model' to select "
            "a different model and try again."
        ),
        "model_capacity",
        TR,
    ),
    case(
        "kiro model temporarily unavailable with a typographic apostrophe in the envelope",
        kiro(
            f"{ENVELOPE}The model you’ve selected is temporarily unavailable. Please use "
            f"’/model’ to select a different model and try again. (request_id: {RID})"
        ),
        "model_capacity",
        TR,
        rid=RID,
    ),
    case(
        "kiro model not available with no advertised list",
        kiro(f"The model 'claude-sonnet-4.5' is not available (request_id: {RID})"),
        "model_capacity",
        TR,
        shows=("claude-sonnet-4.5",),
        rid=RID,
    ),
    # 6b model not entitled / not found (claude and codex need no advertised list)
    case(
        "claude issue with the selected model naming the model command",
        claude(
            "There's an issue with the selected model (claude-opus-9). It may not exist or you "
            "may not have access to it. Run /model to pick a different model.",
            "model_not_found",
        ),
        "model_unavailable",
        T,
        shows=("claude-opus-9",),
    ),
    case(
        "codex chunk model does not exist",
        codex_chunk("The model `gpt-9-codex` does not exist or you do not have access to it."),
        "model_unavailable",
        T,
        shows=("gpt-9-codex",),
    ),
    # 7 throttling
    case("kiro throttling exception", kiro("ThrottlingException: Rate exceeded"), "throttled", TR),
    case(
        "kiro too many requests in the envelope",
        kiro(
            f"{ENVELOPE}TooManyRequestsException: Too many requests, please wait before trying "
            f"again. (request_id: {RID})"
        ),
        "throttled",
        TR,
        rid=RID,
    ),
    case(
        "kiro service quota exceeded is throttling not usage",
        kiro("ServiceQuotaExceededException: You have exceeded the allowed request rate"),
        "throttled",
        TR,
    ),
    case("kiro throttled in prose", kiro("Your request was throttled."), "throttled", TR),
    case(
        "claude request rejected 429 with rate_limit",
        claude(
            "API Error: Request rejected (429) · This request would exceed the rate limit for "
            "your organization of 450,000 input tokens per minute.",
            "rate_limit",
        ),
        "throttled",
        TR,
        backend="claude",
    ),
    case(
        "codex chunk exceeded retry limit 429 with a request id",
        codex_chunk(
            f"exceeded retry limit, last status: 429 Too Many Requests, request id: {HEX_RID}"
        ),
        "throttled",
        TR,
        rid=HEX_RID,
    ),
    case(
        "openai rate limit reached with a retry hint",
        codex_chunk(
            "Rate limit reached for gpt-5 in organization org-abc on tokens per min (TPM): "
            "Limit 30000, Used 29000, Requested 2000. Please try again in 2s."
        ),
        "throttled",
        TR,
    ),
    case(
        "reached your rate limit is throttling not usage",
        kiro("You have reached your rate limit; slow down"),
        "throttled",
        TR,
    ),
    # 8 credential propagation
    case(
        "kiro unrecognized client with an invalid security token",
        kiro("UnrecognizedClientException: The security token included in the request is invalid"),
        "credential_propagation",
        TR,
        backend="kiro",
    ),
    case(
        "kiro invalid security token with http 403 in the envelope",
        kiro(
            f"{ENVELOPE}UnrecognizedClientException: The security token included in the request "
            f"is invalid. (HTTP 403) (request_id: {RID})"
        ),
        "credential_propagation",
        TR,
        rid=RID,
    ),
    case(
        "kiro invalid security token in lower case",
        kiro("unrecognizedclientexception: the security token included in the request is invalid"),
        "credential_propagation",
        TR,
    ),
    # 9 auth
    case(
        "kiro expired security token",
        kiro("UnrecognizedClientException: The security token included in the request is expired"),
        "auth",
        T,
        backend="kiro",
    ),
    case(
        "kiro invalid or expired security token",
        kiro(
            "UnrecognizedClientException: The security token included in the request is invalid "
            "or expired"
        ),
        "auth",
        T,
        backend="kiro",
    ),
    case(
        "kiro expired token exception",
        kiro(
            f"{ENVELOPE}ExpiredTokenException: The security token included in the request is "
            f"expired (request_id: {RID})"
        ),
        "auth",
        T,
        backend="kiro",
    ),
    case(
        "kiro access denied invalid token", kiro("AccessDeniedException: Invalid token"), "auth", T
    ),
    case("kiro unauthorized exception", kiro("UnauthorizedException: Unauthorized"), "auth", T),
    case("kiro expired token", kiro("ExpiredToken: token has expired"), "auth", T),
    case(
        "kiro invalid signature",
        kiro("InvalidSignatureException: The request signature we calculated does not match"),
        "auth",
        T,
    ),
    case("kiro other unrecognized client", kiro("UnrecognizedClientException"), "auth", T),
    case("kiro http 401", kiro("Request failed with HTTP 401"), "auth", T),
    # bad or missing keys as third-party agents pass them on (interop.md §2.5)
    case(
        "gemini-cli 401 with the API's error object as a JSON string",
        rpc(
            401,
            json.dumps(
                {
                    "error": {
                        "code": 401,
                        "message": "API key not valid. Please pass a valid API key.",
                        "status": "UNAUTHENTICATED",
                    }
                }
            ),
        ),
        "auth",
        T,
    ),
    case(
        "an UNAUTHENTICATED status object in data",
        rpc(-32603, "Internal error", {"status": "UNAUTHENTICATED", "message": "Unauthenticated"}),
        "auth",
        T,
    ),
    case("a bare HTTP 401 code", rpc(401, "Request failed"), "auth", T),
    case(
        "opencode incorrect api key",
        claude("Incorrect API key provided: sk-mock. You can find your API key at the console."),
        "auth",
        T,
    ),
    case("an api key that is missing", claude("API key is missing"), "auth", T),
    case("kiro status 403", kiro("request failed: status 403"), "auth", T),
    case("kiro session expired", kiro("Your session expired, sign in again"), "auth", T),
    case("kiro not logged in", kiro("Not logged in"), "auth", T),
    case("kiro not authenticated", kiro("Error: not authenticated"), "auth", T),
    case("kiro not signed in", kiro("You are not signed in"), "auth", T),
    case("kiro login required", kiro("Login required"), "auth", T),
    case("kiro re-authenticate", kiro("Please re-authenticate to continue"), "auth", T),
    case(
        "kiro bearer token invalid",
        kiro("The bearer token included in the request is invalid."),
        "auth",
        T,
    ),
    case(
        "claude invalid api key naming the login command",
        claude("Invalid API key · Please run /login", "authentication_failed"),
        "auth",
        T,
        backend="claude",
    ),
    case(
        "claude oauth org not allowed",
        claude("Your organization does not allow OAuth", "oauth_org_not_allowed"),
        "auth",
        T,
        backend="claude",
    ),
    case(
        "claude verification required",
        claude("Please verify your account", "verification_required"),
        "auth",
        T,
        backend="claude",
    ),
    case(
        "claude cloud credential error",
        claude("Could not load cloud credentials", "cloud_credential_error"),
        "auth",
        T,
        backend="claude",
    ),
    case(
        "claude -32000 authentication required",
        rpc(-32000, "Authentication required"),
        "auth",
        T,
        backend="claude",
    ),
    case(
        "codex -32000 authentication required",
        rpc(-32000, "Authentication required"),
        "auth",
        T,
        backend="codex",
    ),
    case(
        "codex unauthorized category",
        codex("Your access token could not be refreshed", "unauthorized"),
        "auth",
        T,
        backend="codex",
    ),
    case(
        "generic -32000 with other wording",
        rpc(-32000, "Auth needed", {"authMethods": []}),
        "auth",
        T,
    ),
    # 10 connection
    case("kiro dispatch failure", kiro("DispatchFailure: dispatch failure"), "connection", TR),
    case("kiro econnrefused", kiro("connect ECONNREFUSED 127.0.0.1:443"), "connection", TR),
    case("kiro econnreset", kiro("read ECONNRESET"), "connection", TR),
    case("kiro etimedout", kiro("ETIMEDOUT while contacting the service"), "connection", TR),
    case(
        "kiro eai_again", kiro("getaddrinfo EAI_AGAIN q.us-east-1.amazonaws.com"), "connection", TR
    ),
    case("kiro socket hang up", kiro("socket hang up"), "connection", TR),
    case("kiro fetch failed", kiro("TypeError: fetch failed"), "connection", TR),
    case("kiro connection reset by peer", kiro("Connection reset by peer"), "connection", TR),
    case(
        "claude connection error transport lost",
        claude("API Error: Connection error.", "transport_lost"),
        "connection",
        TR,
    ),
    case(
        "codex chunk stream disconnected before completion",
        codex_chunk(
            "stream disconnected before completion: error sending request for url "
            "(https://api.openai.com/v1/responses)"
        ),
        "connection",
        TR,
    ),
    case(
        "codex response stream disconnected category as an object",
        codex("Reconnecting... 5/5", {"responseStreamDisconnected": {"httpStatusCode": 502}}),
        "connection",
        TR,
    ),
    # 11 5xx / overloaded
    case(
        "kiro internal server error with please try again",
        kiro(
            f"{ENVELOPE}InternalServerError: Encountered an unexpected error when processing the "
            f"request, please try again. (request_id: {RID})"
        ),
        "server_error",
        TR,
        rid=RID,
    ),
    case(
        "kiro service unavailable exception",
        kiro("ServiceUnavailableException: Service Unavailable"),
        "server_error",
        TR,
    ),
    case("kiro http 503", kiro("Upstream returned HTTP 503"), "server_error", TR),
    case("kiro internal failure", kiro("InternalFailure: internal failure"), "server_error", TR),
    case(
        "kiro provider sentence with please try again",
        kiro("Something went wrong on our side. Please try again."),
        "server_error",
        TR,
    ),
    case(
        "claude api error 500 server side issue",
        claude(
            'API Error: 500 {"type":"error","error":{"type":"api_error","message":"Internal '
            'server error"}}. This is a server-side issue, usually temporary — try again.',
            "server_error",
        ),
        "server_error",
        TR,
        backend="claude",
    ),
    case(
        "claude api error 529 overloaded",
        claude("API Error: 529 Overloaded. The API is temporarily overloaded.", "overloaded"),
        "server_error",
        TR,
    ),
    case(
        "claude server error mid-response",
        claude(
            "API Error: Server error mid-response. The response above may be incomplete.", "unknown"
        ),
        "server_error",
        TR,
    ),
    case(
        "claude unexpected error during processing",
        claude(
            "API Error: The system encountered an unexpected error during processing. Try your "
            "request again.",
            "unknown",
        ),
        "server_error",
        TR,
    ),
    case(
        "codex chunk high demand with a typographic apostrophe",
        codex_chunk("We’re currently experiencing high demand, which may cause temporary errors."),
        "server_error",
        TR,
    ),
    case(
        "codex high demand with an ascii apostrophe",
        codex_chunk("We're currently experiencing high demand, which may cause temporary errors."),
        "server_error",
        TR,
    ),
    case(
        "codex server overloaded category",
        codex("The model is busy right now.", "serverOverloaded"),
        "server_error",
        TR,
    ),
    # 12 generate / process failed
    case(
        "kiro failed to generate a response",
        kiro("Kiro failed to generate a response"),
        "generate_failed",
        TR,
    ),
    case(
        "kiro service failed to process the request",
        kiro(f"The service failed to process the request (request_id: {RID})"),
        "generate_failed",
        TR,
        rid=RID,
    ),
    case(
        "claude adapter no_result",
        claude("No result from the agent", "no_result"),
        "generate_failed",
        TR,
    ),
    case(
        "claude adapter worker_shutdown",
        claude("The worker shut down", "worker_shutdown"),
        "generate_failed",
        TR,
    ),
    # 13 prompt busy
    case(
        "kiro prompt already in progress",
        kiro("prompt already in progress"),
        "prompt_busy",
        TR,
        backend="kiro",
    ),
    case(
        "generic -32600 prompt already in progress",
        rpc(-32600, "Prompt already in progress"),
        "prompt_busy",
        TR,
    ),
    case(
        "prompt already in progress in the message with a data string",
        rpc(-32600, "Prompt already in progress", "session sess_01"),
        "prompt_busy",
        TR,
    ),
    # 14 output limit
    case(
        "claude response exceeded the output token maximum",
        claude(
            "API Error: Claude's response exceeded the 128000 output token maximum. To configure "
            "this behavior, set the CLAUDE_CODE_MAX_OUTPUT_TOKENS environment variable.",
            "max_output_tokens",
        ),
        "output_limit",
        T,
    ),
    # 15 session lost
    case(
        "claude details session not found",
        rpc(-32603, "Internal error", {"details": "Session not found"}),
        "session_lost",
        T,
    ),
    case(
        "claude -32002 resource not found",
        rpc(-32002, "Resource not found", {"sessionId": "sess_01"}),
        "session_lost",
        T,
    ),
    case(
        "codex -32002 session not found",
        rpc(-32002, "Session 0199a2b4-c0de not found", {"sessionId": "0199a2b4-c0de"}),
        "session_lost",
        T,
    ),
    case(
        "kiro session active in another process",
        kiro("Failed to start session: Session is active in another process (PID 4242)"),
        "session_lost",
        T,
    ),
    # policy (codex categories outside the numbered rows)
    case(
        "codex cyber policy",
        codex("This request was flagged by a safety policy.", "cyberPolicy"),
        "policy_blocked",
        T,
    ),
    # 17 unknown
    case(
        "kiro unknown text loses the envelope and the request id",
        kiro(f"{ENVELOPE}Tool spec is missing a schema (request_id: {RID})"),
        "unknown",
        T,
        shows=("Tool spec is missing a schema",),
        rid=RID,
    ),
    case(
        "kiro unknown agent mode",
        kiro("Mode 'reviewer' not found"),
        "unknown",
        T,
        shows=("Mode 'reviewer' not found",),
    ),
    case(
        "claude running as root without IS_SANDBOX",
        rpc(
            -32603,
            "Internal error: --dangerously-skip-permissions cannot be used with root/sudo "
            "privileges for security reasons",
            {"startupFailureReason": "bypass_root"},
        ),
        "unknown",
        T,
        shows=("cannot be used with root/sudo privileges",),
    ),
    case(
        "unknown text that merely contains the number 500 is terminal",
        kiro("Tool output was truncated after 500 lines"),
        "unknown",
        T,
        shows=("truncated after 500 lines",),
    ),
    case(
        "unknown text with a non-boilerplate message is prefixed by that message",
        rpc(-32602, "Invalid params", 'protocolVersion: invalid type: string "2025-08-22"'),
        "unknown",
        T,
        shows=("Invalid params", "protocolVersion: invalid type"),
    ),
    case(
        "codex bad request shows the provider text",
        codex("Unsupported parameter: 'temperature'.", "badRequest"),
        "unknown",
        T,
        shows=("Unsupported parameter",),
    ),
]


def _case_id(param: Any) -> str:
    return str(param.id)


def _expected_type(kind: str) -> type[AcpError]:
    return {
        "auth": AcpAuthRequired,
        "model_unavailable": AcpModelUnavailable,
        "prompt_busy": AcpPromptBusy,
    }.get(kind, AcpError)


def _slash_commands(text: str, backend: str) -> list[str]:
    """Slash commands in shown text, ignoring the backend's sign-in step (a shell command on
    the agent's host, e.g. `claude /login`, not a chat command)."""
    return SLASH_COMMAND.findall(text.replace(get_backend(backend).sign_in, ""))


def _provider_values(error: dict[str, Any]) -> list[str]:
    data = error.get("data")
    if not isinstance(data, dict):
        return []
    # Plain English values ("overloaded", "unknown") may appear as words; coded ones may not.
    return [
        value
        for key in ("errorKind", "codexErrorInfo", "startupFailureReason")
        if isinstance(value := data.get(key), str) and (value != value.lower() or "_" in value)
    ]


# ---- every row: class, verdict, type, wording --------------------------------------------
@pytest.mark.parametrize("c", CATALOGUE)
def test_each_catalogue_text_gets_its_class_and_verdict(c: Case) -> None:
    exc = _acp_error_from(c.error, backend=get_backend(c.backend))
    assert (exc.kind, exc.transient) == (c.kind, c.transient), exc.text


@pytest.mark.parametrize("c", CATALOGUE)
def test_the_retry_verdict_and_the_raised_error_agree(c: Case) -> None:
    exc = _acp_error_from(c.error, backend=get_backend(c.backend))
    assert _is_transient_raw_error(c.error) is exc.transient is c.transient


@pytest.mark.parametrize("c", CATALOGUE)
def test_the_formatter_shows_exactly_the_raised_errors_text(c: Case) -> None:
    backend = get_backend(c.backend)
    exc = _acp_error_from(c.error, backend=backend)
    assert _format_acp_error(c.error, backend=backend) == exc.text
    assert exc.text.strip()


@pytest.mark.parametrize("c", CATALOGUE)
def test_each_class_raises_its_own_exception_type(c: Case) -> None:
    exc = _acp_error_from(c.error, backend=get_backend(c.backend))
    assert type(exc) is _expected_type(c.kind)
    assert exc.raw_error is c.error


@pytest.mark.parametrize("c", CATALOGUE)
def test_no_shown_text_names_a_slash_command_other_than_compact(c: Case) -> None:
    text = _format_acp_error(c.error, backend=get_backend(c.backend))
    assert set(_slash_commands(text, c.backend)) <= {"/compact"}, text
    assert "/new" not in text and "/reset" not in text and "/model" not in text


@pytest.mark.parametrize("c", CATALOGUE)
def test_error_kind_and_category_values_never_reach_the_shown_text(c: Case) -> None:
    text = _format_acp_error(c.error, backend=get_backend(c.backend))
    for value in (*_provider_values(c.error), *ERROR_KINDS, *CODEX_ERROR_INFOS):
        assert value not in text, text


@pytest.mark.parametrize("c", CATALOGUE)
def test_the_envelope_and_the_internal_error_boilerplate_are_never_shown(c: Case) -> None:
    text = _format_acp_error(c.error, backend=get_backend(c.backend))
    assert "Encountered an error in the response stream" not in text
    assert "Internal error" not in text
    assert "request_id" not in text


@pytest.mark.parametrize("c", CATALOGUE)
def test_the_shown_text_quotes_what_the_row_needs(c: Case) -> None:
    text = _format_acp_error(c.error, backend=get_backend(c.backend))
    for fragment in c.shows:
        assert fragment in text, text


@pytest.mark.parametrize("c", [p for p in CATALOGUE if p.values[0].rid])
def test_a_request_id_is_shown_at_most_once(c: Case) -> None:
    exc = _acp_error_from(c.error, backend=get_backend(c.backend))
    assert exc.text.count(c.rid) <= 1, exc.text


@pytest.mark.parametrize(
    "c",
    [p for p in CATALOGUE if p.values[0].rid and _expected_type(p.values[0].kind) is AcpError],
)
def test_a_request_id_is_appended_exactly_once_to_our_own_wording(c: Case) -> None:
    exc = _acp_error_from(c.error, backend=get_backend(c.backend))
    assert exc.text.count(c.rid) == 1, exc.text
    assert exc.request_id == c.rid


@pytest.mark.parametrize(
    "error",
    [
        kiro(f"ExpiredTokenException: token expired (request_id: {RID})"),
        kiro(f"The model 'nope' is not available (request_id: {RID})"),
    ],
    ids=["auth", "model unavailable"],
)
def test_a_request_id_is_also_shown_on_auth_and_model_errors(error: dict[str, Any]) -> None:
    text = _format_acp_error(error, advertised_models=MODELS)
    assert text.count(RID) == 1


# ---- wording per class -------------------------------------------------------------------
MALFORMED = [
    kiro(f"{ENVELOPE}ValidationException: Improperly formed request. (request_id: {RID})"),
    kiro("Improperly formed request."),
    kiro("IMPROPERLY FORMED REQUEST"),
    kiro(f"{ENVELOPE}Improperly formed request. InternalServerError, please try again."),
    rpc(-32603, "Internal error", {"message": "malformed request: tool name is empty"}),
]


@pytest.mark.parametrize("error", MALFORMED, ids=lambda e: str(e.get("data"))[:60])
def test_malformed_request_suggests_compact_or_a_new_conversation_and_never_new_or_reset(
    error: dict[str, Any],
) -> None:
    exc = _acp_error_from(error)
    assert (exc.kind, exc.transient) == ("malformed", False)
    assert "malformed" in exc.text
    assert "/compact" in exc.text
    assert "new conversation" in exc.text
    assert "/new" not in exc.text and "/reset" not in exc.text


OVERFLOW = [
    kiro("The context window overflowed"),
    kiro(f"{ENVELOPE}Input is too long"),
    claude("Prompt is too long · 208341 tokens > 200000 maximum", "invalid_request"),
    claude("API Error: 400 Input is too long.", "unknown"),
    codex("Codex ran out of room in the model's context window.", "contextWindowExceeded"),
]


@pytest.mark.parametrize("error", OVERFLOW, ids=lambda e: json.dumps(e)[40:100])
def test_context_overflow_in_a_long_conversation_suggests_compact_or_a_new_conversation(
    error: dict[str, Any],
) -> None:
    text = _format_acp_error(error, fresh_session=False)
    assert "/compact" in text and "new conversation" in text
    assert "retry cannot" in text
    assert "/new" not in text and "/reset" not in text


@pytest.mark.parametrize("error", OVERFLOW, ids=lambda e: json.dumps(e)[40:100])
def test_context_overflow_on_a_fresh_session_says_the_standing_tools_and_resources_must_shrink(
    error: dict[str, Any],
) -> None:
    exc = _acp_error_from(error, fresh_session=True)
    assert (exc.kind, exc.transient) == ("context_overflow", False)
    assert "tools" in exc.text and "resources" in exc.text
    assert "must be reduced" in exc.text
    assert "/compact" not in exc.text  # compacting an empty conversation cannot help


def test_the_fresh_session_flag_changes_only_the_wording_of_context_overflow() -> None:
    throttled = kiro("ThrottlingException: Rate exceeded")
    assert _format_acp_error(throttled, fresh_session=True) == _format_acp_error(throttled)


def test_an_image_rejection_says_history_replays_it_and_offers_png_jpeg_or_a_new_conversation() -> (
    None
):
    text = _format_acp_error(kiro("image exceeds 5 MB maximum: 6291456 bytes > 5242880"))
    assert "image" in text and "PNG or JPEG" in text and "new conversation" in text
    assert "replay" in text


def test_an_oversized_request_shows_the_provider_sentence_as_it_is() -> None:
    exc = _acp_error_from(kiro(f"{OVERSIZED} (request_id: {RID})"))
    assert exc.text == f"{OVERSIZED} (request id: {RID})"


def test_a_usage_limit_quotes_the_provider_and_says_retrying_is_pointless() -> None:
    text = _format_acp_error(kiro("You have reached your monthly limit for this model"))
    assert "You have reached your monthly limit for this model" in text
    assert "Retrying will not help" in text
    assert "plan" in text


def test_model_capacity_never_echoes_kiros_model_command() -> None:
    for apostrophe in ("'", "’"):
        text = _format_acp_error(
            kiro(
                f"The model you{apostrophe}ve selected is temporarily unavailable. Please use "
                f"{apostrophe}/model{apostrophe} to select a different model and try again."
            )
        )
        assert "temporarily unavailable" in text
        assert "/model" not in text


def test_throttling_says_to_wait_or_pick_another_model() -> None:
    text = _format_acp_error(kiro("ThrottlingException: Rate exceeded"))
    assert "throttling" in text and "another model" in text


@pytest.mark.parametrize(
    "error",
    [
        kiro("ThrottlingException: Rate exceeded"),
        kiro("ECONNRESET while calling the model"),
        kiro("ServiceUnavailableException: Service unavailable"),
        claude("No result from the agent", "no_result"),
    ],
    ids=["throttled", "connection", "server", "generate-failed"],
)
def test_retries_are_told_only_as_many_as_the_ladder_spent(error: dict[str, Any]) -> None:
    exc = _acp_error_from(error)
    assert exc.transient
    assert "retr" not in exc.text, exc.text  # the raw error alone: nobody retried yet
    exc.retries = 1
    assert "kept doing so through 1 automatic retry." in exc.text
    exc.retries = 3
    assert "kept doing so through 3 automatic retries." in exc.text
    assert str(exc) == exc.text


def test_an_output_limit_keeps_the_partial_text_and_asks_for_smaller_steps() -> None:
    error = claude(
        "API Error: Claude's response exceeded the 128000 output token maximum.",
        "max_output_tokens",
    )
    exc = _acp_error_from(error, partial_output="Here is the first half")
    assert exc.kind == "output_limit" and not exc.transient
    assert exc.partial_output == "Here is the first half"
    assert "output limit" in exc.text and "smaller steps" in exc.text


def test_a_lost_session_says_the_earlier_context_is_gone() -> None:
    text = _format_acp_error(kiro("Session is active in another process (PID 4242)"))
    assert "earlier context" in text


# ---- auth: the backend's own sign-in step ------------------------------------------------
AUTH_BY_BACKEND = [
    ("kiro", kiro("AccessDeniedException: Invalid token")),
    ("kiro", kiro(f"{ENVELOPE}UnauthorizedException: not authorized (request_id: {RID})")),
    ("kiro", kiro("The bearer token included in the request is invalid.")),
    ("claude", rpc(-32000, "Authentication required")),
    ("claude", claude("Invalid API key · Please run /login", "authentication_failed")),
    ("codex", rpc(-32000, "Authentication required")),
    ("codex", codex("401 Unauthorized", "unauthorized")),
    ("generic", rpc(-32000, "Authentication required")),
]


@pytest.mark.parametrize(("name", "error"), AUTH_BY_BACKEND, ids=lambda v: str(v)[:50])
def test_auth_names_the_backends_sign_in_step_and_is_terminal(
    name: str, error: dict[str, Any]
) -> None:
    backend = get_backend(name)
    exc = _acp_error_from(error, backend=backend)
    assert isinstance(exc, AcpAuthRequired)
    assert exc.kind == "auth" and exc.transient is False
    assert backend.sign_in in exc.text
    assert backend.label.lower() in exc.text.lower()
    assert exc.text[0].isupper()  # every sentence a person reads starts with a capital letter
    assert "Retrying or switching models will not help" in exc.text
    assert _is_transient_raw_error(error) is False


def test_the_sign_in_steps_are_the_ones_the_catalogue_names() -> None:
    assert "kiro-cli login" in _format_acp_error(kiro("Not logged in"), backend=get_backend("kiro"))
    claude_text = _format_acp_error(rpc(-32000, "x"), backend=get_backend("claude"))
    assert "claude /login" in claude_text and "ANTHROPIC_API_KEY" in claude_text
    codex_text = _format_acp_error(rpc(-32000, "x"), backend=get_backend("codex"))
    assert "codex login" in codex_text and "OPENAI_API_KEY" in codex_text


def test_minus_32000_is_auth_whatever_its_text_says() -> None:
    for message in ("Authentication required", "", "please try again", "ECONNRESET"):
        exc = _acp_error_from(rpc(-32000, message))
        assert isinstance(exc, AcpAuthRequired), message
        assert not _is_transient_raw_error(rpc(-32000, message))


# ---- credential propagation vs auth ------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "kind", "transient"),
    [
        (
            "UnrecognizedClientException: The security token included in the request is invalid",
            "credential_propagation",
            True,
        ),
        (
            "UnrecognizedClientException: The security token included in the request is invalid."
            " (HTTP 403)",
            "credential_propagation",
            True,
        ),
        (
            "UnrecognizedClientException: The security token included in the request is expired",
            "auth",
            False,
        ),
        (
            "UnrecognizedClientException: The security token included in the request is invalid "
            "or expired",
            "auth",
            False,
        ),
        (
            "UnrecognizedClientException: The security token included in the request is invalid "
            "or expired. (HTTP 403)",
            "auth",
            False,
        ),
    ],
    ids=["is invalid", "is invalid http 403", "is expired", "invalid or expired", "ioe 403"],
)
def test_only_an_invalid_security_token_is_credential_propagation(
    text: str, kind: str, transient: bool
) -> None:
    for wrapped in (text, f"{ENVELOPE}{text} (request_id: {RID})"):
        exc = _acp_error_from(kiro(wrapped), backend=get_backend("kiro"))
        assert (exc.kind, exc.transient) == (kind, transient), wrapped
        assert _is_transient_raw_error(kiro(wrapped)) is transient


def test_credential_propagation_suggests_refreshing_credentials_if_it_persists() -> None:
    text = _format_acp_error(
        kiro("UnrecognizedClientException: The security token included in the request is invalid")
    )
    assert "credentials" in text and "persists" in text


# ---- model unavailable: kiro's text judged against the advertised list ------------------
NOT_AVAILABLE = kiro(f"The model 'claude-opus-9' is not available (request_id: {RID})")


def test_kiro_model_not_available_is_terminal_when_a_nonempty_advertised_list_lacks_it() -> None:
    exc = _acp_error_from(NOT_AVAILABLE, advertised_models=MODELS)
    assert isinstance(exc, AcpModelUnavailable)
    assert (exc.kind, exc.transient) == ("model_unavailable", False)
    assert exc.model == "claude-opus-9"
    assert "claude-opus-9" in exc.text
    for model in MODELS:
        assert model in exc.text
    assert _is_transient_raw_error(NOT_AVAILABLE, advertised_models=MODELS) is False


@pytest.mark.parametrize(
    "advertised",
    [None, [], ["claude-opus-9", "auto"], ["CLAUDE-OPUS-9"]],
    ids=["no list known", "empty list", "advertised", "advertised in other case"],
)
def test_kiro_model_not_available_is_transient_capacity_unless_the_list_proves_otherwise(
    advertised: list[str] | None,
) -> None:
    exc = _acp_error_from(NOT_AVAILABLE, advertised_models=advertised)
    assert type(exc) is AcpError
    assert (exc.kind, exc.transient) == ("model_capacity", True)
    assert "temporarily unavailable" in exc.text
    assert "cannot use" not in exc.text  # never claim "not entitled" without evidence
    assert exc.text.count(RID) == 1
    assert _is_transient_raw_error(NOT_AVAILABLE, advertised_models=advertised) is True


def test_the_advertised_list_is_compared_without_regard_to_case() -> None:
    error = kiro("The model 'Claude-Sonnet-4.5' is not available")
    assert _is_transient_raw_error(error, advertised_models=["claude-sonnet-4.5"]) is True
    assert _is_transient_raw_error(error, advertised_models=["claude-haiku-4.5"]) is False


@pytest.mark.parametrize(
    "text",
    [
        "Invalid model ID: claude-opus-9",
        "Invalid model ID: claude-opus-9.",
        f"{ENVELOPE}Invalid model ID: 'claude-opus-9' (request_id: {RID})",
    ],
)
def test_kiro_invalid_model_id_is_judged_like_model_not_available(text: str) -> None:
    lacking = _acp_error_from(kiro(text), advertised_models=MODELS)
    assert isinstance(lacking, AcpModelUnavailable)
    assert lacking.model == "claude-opus-9"
    listed = _acp_error_from(kiro(text), advertised_models=[*MODELS, "claude-opus-9"])
    assert (listed.kind, listed.transient) == ("model_capacity", True)
    unknown = _acp_error_from(kiro(text))
    assert (unknown.kind, unknown.transient) == ("model_capacity", True)


def test_more_than_eight_advertised_models_are_cut_with_a_count_of_the_rest() -> None:
    exc = _acp_error_from(NOT_AVAILABLE, advertised_models=MANY_MODELS)
    assert isinstance(exc, AcpModelUnavailable)
    for model in MANY_MODELS[:8]:
        assert model in exc.text
    for model in MANY_MODELS[8:]:
        assert model not in exc.text
    assert "+3 more" in exc.text


def test_exactly_eight_advertised_models_need_no_count() -> None:
    exc = _acp_error_from(NOT_AVAILABLE, advertised_models=MANY_MODELS[:8])
    assert "more" not in exc.text
    assert all(model in exc.text for model in MANY_MODELS[:8])


def test_an_unavailable_auto_model_gets_its_own_wording() -> None:
    exc = _acp_error_from(kiro("The model 'auto' is not available"), advertised_models=["a", "b"])
    assert isinstance(exc, AcpModelUnavailable)
    assert "Automatic model choice" in exc.text


def test_claude_and_codex_model_not_found_are_terminal_without_an_advertised_list() -> None:
    for error in (
        claude(
            "There's an issue with the selected model (claude-opus-9). It may not exist or you "
            "may not have access to it.",
            "model_not_found",
        ),
        codex_chunk("The model `claude-opus-9` does not exist or you do not have access to it."),
    ):
        exc = _acp_error_from(error)
        assert isinstance(exc, AcpModelUnavailable)
        assert exc.model == "claude-opus-9" and not exc.transient
        assert "choose another model" in exc.text
        with_list = _acp_error_from(error, advertised_models=MODELS)
        assert "claude-sonnet-4.5" in with_list.text


# ---- prompt busy -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "error",
    [
        kiro("prompt already in progress"),
        kiro(f"{ENVELOPE}Prompt already in progress (request_id: {RID})"),
        rpc(-32600, "Prompt already in progress"),
        rpc(-32600, "Prompt already in progress", {"sessionId": "s1"}),
        rpc(-32603, "Prompt already in progress", "session s1"),
    ],
    ids=[
        "kiro data",
        "kiro envelope",
        "-32600",
        "-32600 with object data",
        "message with string data",
    ],
)
def test_prompt_busy_raises_its_own_type_and_names_no_command(error: dict[str, Any]) -> None:
    exc = _acp_error_from(error)
    assert isinstance(exc, AcpPromptBusy)
    assert exc.transient is True
    assert "/" not in exc.text
    assert "new conversation" in exc.text and "persists" in exc.text


# ---- precedence --------------------------------------------------------------------------
PRECEDENCE = [
    case(
        "malformed outranks an internal server error and please try again",
        kiro(
            f"{ENVELOPE}ValidationException: Improperly formed request. InternalServerError: "
            f"please try again (request_id: {RID})"
        ),
        "malformed",
        T,
    ),
    case(
        "context overflow outranks a retry hint",
        kiro("Input is too long. Please try again."),
        "context_overflow",
        T,
    ),
    case(
        "context overflow outranks a 5xx and server_error",
        claude("API Error: 500 Prompt is too long", "server_error"),
        "context_overflow",
        T,
    ),
    case(
        "codex context_length_exceeded outranks its own adjust and try again",
        codex_chunk(
            '{"error":{"code":"context_length_exceeded","message":"Your input exceeds the '
            'context window of this model. Please adjust your input and try again."}}'
        ),
        "context_overflow",
        T,
    ),
    case(
        "image rejection outranks a dispatch failure",
        kiro("DispatchFailure: image exceeds 5 MB maximum: 6291456 bytes > 5242880"),
        "image_rejected",
        T,
    ),
    case(
        "oversized outranks its own try again",
        kiro(f"{OVERSIZED} Service unavailable."),
        "oversized",
        T,
    ),
    case(
        "usage limit outranks a throttling exception",
        kiro("ThrottlingException: The monthly usage limit has been reached"),
        "usage_limit",
        T,
    ),
    case(
        "usage limit outranks a claude 429 with rate_limit",
        claude("API Error: Request rejected (429) · Claude AI usage limit reached", "rate_limit"),
        "usage_limit",
        T,
    ),
    case(
        "usage limit outranks a codex 429 chunk",
        codex("exceeded retry limit, last status: 429 Too Many Requests", "usageLimitExceeded"),
        "usage_limit",
        T,
    ),
    case(
        "usage limit outranks a retry hint",
        codex_chunk("You've hit your usage limit. Please try again in 2 days."),
        "usage_limit",
        T,
    ),
    case(
        "model not entitled outranks a usage limit",
        claude(
            "There's an issue with the selected model (claude-opus-9). Usage limit reached.",
            "model_not_found",
        ),
        "model_unavailable",
        T,
    ),
    case(
        "a structural class outranks kiro model capacity",
        kiro("The model 'claude-sonnet-4.5' is not available: Input is too long"),
        "context_overflow",
        T,
    ),
    case(
        "auth outranks service unavailable",
        kiro("AccessDeniedException: Invalid token. Service unavailable, please try again."),
        "auth",
        T,
    ),
    case(
        "auth outranks a connection failure",
        kiro("ExpiredTokenException: token expired; connection reset"),
        "auth",
        T,
    ),
    case(
        "throttling outranks credential propagation",
        kiro(
            "ThrottlingException: UnrecognizedClientException: The security token included in "
            "the request is invalid"
        ),
        "throttled",
        TR,
    ),
    case(
        "the envelope alone is no retry signal for an overflow",
        kiro("Encountered an error in the response stream: Input is too long"),
        "context_overflow",
        T,
    ),
    case(
        "the envelope alone is no retry signal for unknown text",
        kiro(f"{ENVELOPE}Unexpected tool result shape (request_id: {RID})"),
        "unknown",
        T,
    ),
    case(
        "a throttle phrase only in the message does not flip a kiro data string",
        kiro("Mode 'reviewer' not found", message="ThrottlingException: Rate exceeded"),
        "unknown",
        T,
    ),
    case(
        "a terminal phrase only in the message does not flip a kiro data string",
        kiro("ThrottlingException: Rate exceeded", message="Input is too long"),
        "throttled",
        TR,
    ),
    case(
        "an auth phrase only in the message does not flip a kiro data string",
        kiro("Kiro failed to generate a response", message="Not logged in"),
        "generate_failed",
        TR,
    ),
]


@pytest.mark.parametrize("c", PRECEDENCE)
def test_precedence_picks_the_first_class_of_the_chain(c: Case) -> None:
    exc = _acp_error_from(c.error)
    assert (exc.kind, exc.transient) == (c.kind, c.transient), exc.text
    assert _is_transient_raw_error(c.error) is c.transient


# ---- unknown -----------------------------------------------------------------------------
def test_unknown_text_is_terminal_and_shows_the_provider_text_once_with_its_request_id() -> None:
    exc = _acp_error_from(kiro(f"{ENVELOPE}Tool spec is missing a schema (request_id: {RID})"))
    assert (exc.kind, exc.transient) == ("unknown", False)
    assert 'The agent reported an error: "Tool spec is missing a schema".' in exc.text
    assert ENVELOPE.strip() not in exc.text
    assert exc.text.count(RID) == 1
    assert exc.text.endswith(f"(request id: {RID})")


def test_unknown_with_only_a_boilerplate_message_shows_the_raw_object() -> None:
    for error in (
        rpc(-32603, "Internal error"),
        rpc(-32603, "Internal error", ""),
        rpc(-32603, "Internal error", "   "),
        rpc(-32603, "Internal error", {"retryable": False}),
    ):
        exc = _acp_error_from(error)
        assert (exc.kind, exc.transient) == ("unknown", False)
        assert '"code": -32603' in exc.text, exc.text
        assert not _is_transient_raw_error(error)


def test_unknown_with_no_message_at_all_shows_the_raw_object() -> None:
    exc = _acp_error_from({"code": -32099})
    assert exc.kind == "unknown" and '"code": -32099' in exc.text


def test_unknown_text_is_prefixed_by_a_message_that_is_not_boilerplate() -> None:
    text = _format_acp_error(rpc(-32099, "Tool host crashed", "exit status 3"))
    assert "Tool host crashed" in text and "exit status 3" in text
    assert text.index("Tool host crashed") < text.index("exit status 3")


def test_unknown_text_is_not_prefixed_by_the_boilerplate_message() -> None:
    text = _format_acp_error(kiro("exit status 3"))
    assert "Internal error" not in text and "exit status 3" in text


# ---- redaction ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "error",
    [
        kiro(f"Provider rejected key {ANTHROPIC_KEY} for this workspace"),
        kiro(f"{ENVELOPE}Bad header x-api-key: {ANTHROPIC_KEY} (request_id: {RID})"),
        claude(f"Credit balance is too low for key {ANTHROPIC_KEY}", "billing_error"),
        codex(f"Quota exceeded for {ANTHROPIC_KEY}.", "usageLimitExceeded"),
        kiro(f"Image rejected: ImageValidationError for {ANTHROPIC_KEY}"),
        rpc(-32603, "Internal error", {"apiKey": ANTHROPIC_KEY}),
        rpc(-32099, f"Upstream said: Authorization: Bearer {ANTHROPIC_KEY}x"),
    ],
    ids=["unknown", "unknown envelope", "usage claude", "usage codex", "image", "raw", "message"],
)
def test_credentials_in_provider_text_are_redacted(error: dict[str, Any]) -> None:
    text = _format_acp_error(error)
    assert ANTHROPIC_KEY not in text
    assert "sk-ant-" not in text
    assert "[redacted]" in text


def test_links_in_provider_text_are_removed() -> None:
    text = _format_acp_error(
        codex_chunk("You've hit your usage limit. Upgrade to Pro (https://openai.com/pricing).")
    )
    assert "https://" not in text and "openai.com/pricing" not in text


# ---- slash commands in quoted provider text ----------------------------------------------
@pytest.mark.parametrize(
    "error",
    [
        claude("You've hit your limit · /upgrade to increase your usage limit", "quota_exhausted"),
        kiro("Session state is corrupted. Run /clear and retry."),
        kiro(f"{ENVELOPE}Unsupported request. Use /reset to start over. (request_id: {RID})"),
        rpc(-32603, "Internal error", {"hint": "run /new"}),
    ],
    ids=["usage upgrade", "unknown clear", "unknown reset", "raw object"],
)
def test_quoted_provider_text_loses_its_slash_commands(error: dict[str, Any]) -> None:
    text = _format_acp_error(error)
    assert set(_slash_commands(text, "generic")) <= {"/compact"}, text


def test_compact_in_provider_text_is_kept() -> None:
    text = _format_acp_error(kiro("Unexpected state; run /compact first"))
    assert "/compact" in text


def test_paths_in_provider_text_are_not_taken_for_commands() -> None:
    text = _format_acp_error(kiro("cannot open /home/user/project/notes.md"))
    assert "/home/user/project/notes.md" in text


@pytest.mark.parametrize("c", CATALOGUE)
def test_every_sentence_a_person_reads_starts_with_a_capital_letter(c: Case) -> None:
    text = _acp_error_from(c.error, backend=get_backend(c.backend), advertised_models=MODELS).text
    assert not text[0].islower(), text
