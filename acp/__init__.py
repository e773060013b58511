"""The agent side: agent processes, JSON-RPC over their stdio, sessions, and the reading of
their errors and refusals. Imports nothing from `bot/` or `surfaces/`."""

from acp.backends import ACP_BACKENDS_STRUCTURED_REFUSAL, BACKENDS, Backend, get_backend
from acp.client import AcpClient, AcpSession
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
from acp.runtime import (
    AcpRuntime,
    AcpSpawnFailed,
    AcpWorkspaceBindingError,
    RuntimeSpec,
    open_runtime,
)
from acp.session_handle import AcpRequestTimeout, AcpRuntimeDead, AcpRuntimeError
from acp.tool_gate import GatePlan, ToolGateUnroutable, plan_tool_gate
from acp.types import (
    STOP_REASON_CANCELLED,
    STOP_REASON_END_TURN,
    STOP_REASON_MAX_TOKENS,
    STOP_REASON_MAX_TURN_REQUESTS,
    STOP_REASON_REFUSAL,
    AcpEvent,
    AcpPromptStats,
    EventKind,
    PendingPermission,
    PermissionOption,
    PermissionRequest,
    RefusalInfo,
    ToolCall,
)

__all__ = [
    "ACP_BACKENDS_STRUCTURED_REFUSAL",
    "BACKENDS",
    "STOP_REASON_CANCELLED",
    "STOP_REASON_END_TURN",
    "STOP_REASON_MAX_TOKENS",
    "STOP_REASON_MAX_TURN_REQUESTS",
    "STOP_REASON_REFUSAL",
    "AcpAuthRequired",
    "AcpClient",
    "AcpError",
    "AcpEvent",
    "AcpModelUnavailable",
    "AcpPermissionNeeded",
    "AcpProcessDied",
    "AcpPromptBusy",
    "AcpPromptStats",
    "AcpRequestTimeout",
    "AcpRuntime",
    "AcpRuntimeDead",
    "AcpRuntimeError",
    "AcpSession",
    "AcpSpawnFailed",
    "AcpTimeoutError",
    "AcpToolGateUnroutable",
    "AcpWorkspaceBindingError",
    "Backend",
    "EventKind",
    "GatePlan",
    "PendingPermission",
    "PermissionOption",
    "PermissionRequest",
    "RefusalInfo",
    "RuntimeSpec",
    "ToolCall",
    "ToolGateUnroutable",
    "get_backend",
    "open_runtime",
    "plan_tool_gate",
]
