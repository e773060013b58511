"""What a prompt turn is given (acp/_turn.py's `PromptTurn`), in three cohesive parts: where it
talks, the agent it talks to, and the session's part in it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from acp.client import AcpError
from acp.inbox import SessionInbox
from acp.quirks import TurnQuirks
from acp.session_handle import SessionHandle
from acp.types import ToolCall

ErrorFactory = Callable[[dict[str, Any], str], AcpError]
Turn = TypeVar("Turn")  # the turn the session's hooks are handed (a `PromptTurn`)


@dataclass(frozen=True, slots=True)
class SessionLine:
    """Where the turn talks: the connection, the session's inbox on it, the session's id."""

    handle: SessionHandle
    inbox: SessionInbox
    session_id: str


@dataclass(frozen=True, slots=True)
class TurnAgent:
    """The agent as a turn needs it: its name (for logs and the gate's errors), its quirks (a
    fresh object per turn), how its errors read, its last stderr lines for a death, and how
    long it gets to answer a cancel."""

    name: str
    quirks: TurnQuirks
    classify: ErrorFactory
    stderr_tail: Callable[[], str]
    cancel_grace: float


@dataclass(frozen=True, slots=True)
class TurnHooks(Generic[Turn]):
    """The session's part in a turn.

    `claim` is called as the turn starts (it may refuse it: one turn per session) and `release`
    once it has ended, however it ended. `observe` is the state keeper, handed every
    notification that may be state (not text). `warn` takes the warnings an agent injects into
    its reply stream (a notice: neither the answer nor activity). `restore_gate` puts the
    approval state back (at once when it is in place): awaited before the prompt and after each
    state frame, so no tool follows a switch unrestored. `on_switch_mode` is the mode watcher's
    hook: a `switch_mode` tool call completed, awaited before anything else of the turn is read."""

    claim: Callable[[Turn], None]
    release: Callable[[Turn], None]
    observe: Callable[[str, Any], None]
    warn: Callable[[str], None] | None = None
    restore_gate: Callable[[], Awaitable[None]] | None = None
    on_switch_mode: Callable[[ToolCall], Awaitable[None]] | None = None
