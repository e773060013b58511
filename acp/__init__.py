"""The agent side: agent processes, JSON-RPC over their stdio, sessions, and the reading of
their errors and refusals. Imports nothing from `bot/` or `surfaces/`; `bot/` imports only what
this module exports.

Two independent error families: `AcpError` (what went wrong in the conversation, with the retry
verdict) and `AcpRuntimeError` (the agent process or its pipe failed). `AGENT_ERRORS` names both
for callers that catch any agent failure."""

from acp._dispatch import redact, redact_links
from acp.agent_client import AcpClient, AcpSessionListUnsupported
from acp.agent_env import agent_environment
from acp.approval_cover import SPEC_TOOL_KINDS
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
from acp.content import (
    ContentBlock,
    PromptContent,
    audio_block,
    embedded_text_block,
    image_block,
    resource_link_block,
    text_block,
)
from acp.cpu_share import describe_cpu_limits
from acp.gate_options import switches_approvals_off
from acp.runtime import (
    AcpRuntime,
    AcpSpawnFailed,
    AcpWorkspaceBindingError,
    RuntimeOpener,
    RuntimeSpec,
    open_runtime,
    resolve_executable,
)
from acp.runtime_pool import PoolKey, RuntimePool, pool_key
from acp.sandbox import (
    AgentUserUnusable,
    Isolation,
    SandboxMode,
    SandboxUnavailable,
    make_undumpable,
    plan_isolation,
)
from acp.session import AcpModelChoiceUnsupported, AcpSession
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
    AgentFile,
    AgentSessionInfo,
    ConfigChoice,
    ConfigOption,
    EventKind,
    FileDiff,
    NoticeKind,
    PendingPermission,
    PermissionOption,
    PermissionRequest,
    PlanEntry,
    PromptCapabilities,
    RefusalInfo,
    SessionCapabilities,
    SessionNotice,
    TerminalActivity,
    ToolCall,
    UsageInfo,
)
from acp.workspace_files import open_in_workspace, open_workspace_dir

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
    "SPEC_TOOL_KINDS",
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
    "AcpSessionListUnsupported",
    "AcpSpawnFailed",
    "AcpTimeoutError",
    "AcpToolGateUnroutable",
    "AcpWorkspaceBindingError",
    "AgentCommand",
    "AgentFile",
    "AgentSessionInfo",
    "AgentUserUnusable",
    "Backend",
    "ConfigChoice",
    "ConfigOption",
    "ContentBlock",
    "EventKind",
    "FileDiff",
    "GatePlan",
    "Isolation",
    "NoticeKind",
    "PendingPermission",
    "PermissionOption",
    "PermissionRequest",
    "PlanEntry",
    "PoolKey",
    "PromptCapabilities",
    "PromptContent",
    "RefusalInfo",
    "RuntimeOpener",
    "RuntimePool",
    "RuntimeSpec",
    "SandboxMode",
    "SandboxUnavailable",
    "SessionCapabilities",
    "SessionNotice",
    "SessionState",
    "TerminalActivity",
    "ToolCall",
    "ToolGateUnroutable",
    "UsageInfo",
    "agent_environment",
    "audio_block",
    "describe_cpu_limits",
    "embedded_text_block",
    "get_backend",
    "image_block",
    "make_undumpable",
    "open_in_workspace",
    "open_runtime",
    "open_workspace_dir",
    "plan_isolation",
    "plan_tool_gate",
    "pool_key",
    "redact",
    "redact_links",
    "resolve_executable",
    "resource_link_block",
    "switches_approvals_off",
    "text_block",
]
