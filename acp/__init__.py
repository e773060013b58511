"""The agent side: agent processes, JSON-RPC over their stdio, sessions, and the reading of
their errors and refusals. Imports nothing from `bot/` or `surfaces/`; `bot/` imports only what
this module exports.

Two independent error families: `AcpError` (what went wrong in the conversation, with the retry
verdict) and `AcpRuntimeError` (the agent process or its pipe failed). `AGENT_ERRORS` names both
for callers that catch any agent failure."""

from acp._dispatch import redact, redact_links
from acp.backends import ACP_BACKENDS_STRUCTURED_REFUSAL, BACKENDS, Backend, get_backend
from acp.client import (
    AcpAuthRequired,
    AcpError,
    AcpGateViolation,
    AcpModelUnavailable,
    AcpPermissionNeeded,
    AcpProcessDied,
    AcpPromptBusy,
    AcpProtocolMismatch,
    AcpTimeoutError,
    AcpToolGateUnroutable,
)
from acp.runtime import (
    AcpRuntime,
    AcpSpawnFailed,
    AcpWorkspaceBindingError,
    RuntimeOpener,
    RuntimePool,
    RuntimeSpec,
    agent_environment,
    open_runtime,
    resolve_executable,
)
from acp.session import AcpClient, AcpModelChoiceUnsupported, AcpSession
from acp.session_handle import AcpRequestTimeout, AcpRuntimeDead, AcpRuntimeError
from acp.session_state import SessionState
from acp.tool_gate import GatePlan, ToolGateUnroutable, plan_tool_gate
from acp.types import (
    PERMISSION_ALLOW_ALWAYS,
    PERMISSION_ALLOW_ONCE,
    PERMISSION_REJECT_ALWAYS,
    PERMISSION_REJECT_ONCE,
    STOP_REASON_CANCELLED,
    STOP_REASON_END_TURN,
    STOP_REASON_MAX_TOKENS,
    STOP_REASON_MAX_TURN_REQUESTS,
    STOP_REASON_REFUSAL,
    AcpEvent,
    AcpPromptStats,
    AgentCommand,
    ConfigChoice,
    ConfigOption,
    EventKind,
    FileDiff,
    NoticeKind,
    PendingPermission,
    PermissionOption,
    PermissionRequest,
    RefusalInfo,
    SessionNotice,
    TerminalActivity,
    ToolCall,
    UsageInfo,
)

# Any agent failure, of either family: `except AGENT_ERRORS` where one answer fits both.
AGENT_ERRORS: tuple[type[AcpError], type[AcpRuntimeError]] = (AcpError, AcpRuntimeError)

__all__ = [
    "ACP_BACKENDS_STRUCTURED_REFUSAL",
    "AGENT_ERRORS",
    "BACKENDS",
    "PERMISSION_ALLOW_ALWAYS",
    "PERMISSION_ALLOW_ONCE",
    "PERMISSION_REJECT_ALWAYS",
    "PERMISSION_REJECT_ONCE",
    "STOP_REASON_CANCELLED",
    "STOP_REASON_END_TURN",
    "STOP_REASON_MAX_TOKENS",
    "STOP_REASON_MAX_TURN_REQUESTS",
    "STOP_REASON_REFUSAL",
    "AcpAuthRequired",
    "AcpClient",
    "AcpError",
    "AcpEvent",
    "AcpGateViolation",
    "AcpModelChoiceUnsupported",
    "AcpModelUnavailable",
    "AcpPermissionNeeded",
    "AcpProcessDied",
    "AcpPromptBusy",
    "AcpPromptStats",
    "AcpProtocolMismatch",
    "AcpRequestTimeout",
    "AcpRuntime",
    "AcpRuntimeDead",
    "AcpRuntimeError",
    "AcpSession",
    "AcpSpawnFailed",
    "AcpTimeoutError",
    "AcpToolGateUnroutable",
    "AcpWorkspaceBindingError",
    "AgentCommand",
    "Backend",
    "ConfigChoice",
    "ConfigOption",
    "EventKind",
    "FileDiff",
    "GatePlan",
    "NoticeKind",
    "PendingPermission",
    "PermissionOption",
    "PermissionRequest",
    "RefusalInfo",
    "RuntimeOpener",
    "RuntimePool",
    "RuntimeSpec",
    "SessionNotice",
    "SessionState",
    "TerminalActivity",
    "ToolCall",
    "ToolGateUnroutable",
    "UsageInfo",
    "agent_environment",
    "get_backend",
    "open_runtime",
    "plan_tool_gate",
    "redact",
    "redact_links",
    "resolve_executable",
]
