"""Wire-level data the agent side hands upward: events of one prompt turn, its closing stats, and
refusal details. Plain slotted dataclasses: one is built per streamed chunk, so they stay cheap."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from typing import Any

import anyio

from acp.elicitation import PendingElicitation

STOP_REASON_END_TURN = "end_turn"
STOP_REASON_MAX_TOKENS = "max_tokens"
STOP_REASON_MAX_TURN_REQUESTS = "max_turn_requests"
STOP_REASON_REFUSAL = "refusal"
STOP_REASON_CANCELLED = "cancelled"

PERMISSION_ALLOW_ONCE = "allow_once"
PERMISSION_ALLOW_ALWAYS = "allow_always"
PERMISSION_REJECT_ONCE = "reject_once"
PERMISSION_REJECT_ALWAYS = "reject_always"

# Older agents spell option kinds differently; map them onto the four ACP kinds.
_KIND_ALIASES = {
    "allow": PERMISSION_ALLOW_ONCE,
    "approve": PERMISSION_ALLOW_ONCE,
    "reject": PERMISSION_REJECT_ONCE,
    "deny": PERMISSION_REJECT_ONCE,
    "deny_once": PERMISSION_REJECT_ONCE,
    "decline": PERMISSION_REJECT_ONCE,
    "deny_always": PERMISSION_REJECT_ALWAYS,
}


def normalize_option_kind(kind: str) -> str:
    kind = kind.strip().lower().replace("-", "_")
    return _KIND_ALIASES.get(kind, kind)


class EventKind(StrEnum):
    TEXT = "text"
    THOUGHT = "thought"
    TOOL_CALL = "tool_call"
    TOOL_UPDATE = "tool_update"
    PLAN = "plan"
    USAGE = "usage"
    COMMANDS = "commands"
    SESSION_INFO = "session_info"
    PERMISSION = "permission"
    REFUSAL = "refusal"
    TERMINAL = "terminal"
    # a command the agent runs through terminal/create: what it runs and its last output line
    TERMINAL_ACTIVITY = "terminal_activity"
    # an image, audio, embedded resource or resource link in the agent's reply
    FILE = "file"
    # the agent asks a person a question (`elicitation/create`): answer `elicitation`
    ELICITATION = "elicitation"
    # what the agent reports outside the answer (acp/agent_reports.py), in `AcpEvent.report`
    SUBAGENT = "subagent"
    NOTICE = "notice"
    COMPACTION = "compaction"


@dataclass(frozen=True, slots=True)
class TerminalActivity:
    """What a terminal the agent started shows: its command line and its last line of output."""

    session_id: str
    terminal_id: str
    command: str
    last_line: str
    exited: bool

    def status_line(self) -> str:
        return f"running: {self.command}" + (f" — {self.last_line}" if self.last_line else "")


@dataclass(frozen=True, slots=True)
class RefusalInfo:
    """Why the model declined. Each field is "" when the provider did not say; never guessed."""

    category: str = ""
    explanation: str = ""
    recommended_model: str = ""


DIFF_PREVIEW_LINES = 8


@dataclass(frozen=True, slots=True)
class FileDiff:
    """One file an edit changes: its text before (None: a new file, or not known) and after.
    Both sides are bounded where they are read (acp/tool_parsing.py)."""

    path: str
    old_text: str | None
    new_text: str

    def lines(self) -> list[str]:
        """The unified diff's change lines, without the file headers."""
        old = (self.old_text or "").splitlines()
        new = self.new_text.splitlines()
        diff = difflib.unified_diff(old, new, lineterm="", n=1)
        return [line for line in diff if not line.startswith(("---", "+++"))]

    def summary(self) -> str:
        """`path: +12 −4`."""
        changed = self.lines()
        added = sum(1 for line in changed if line.startswith("+"))
        removed = sum(1 for line in changed if line.startswith("-"))
        return f"{self.path}: +{added} \u2212{removed}"

    def preview(self, limit: int = DIFF_PREVIEW_LINES) -> list[str]:
        """The first `limit` lines of the diff, and how many more there are."""
        changed = self.lines()
        shown = changed[:limit]
        if len(changed) > limit:
            shown.append(f"… {len(changed) - limit} more lines")
        return shown

    def patch(self) -> str:
        """The whole change as a unified diff with its file headers (a `.diff` file)."""
        old = (self.old_text or "").splitlines(keepends=True)
        new = self.new_text.splitlines(keepends=True)
        before = "/dev/null" if self.old_text is None else f"a/{self.path.lstrip('/')}"
        lines = difflib.unified_diff(old, new, before, f"b/{self.path.lstrip('/')}")
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclass(frozen=True, slots=True)
class ToolCall:
    tool_call_id: str
    title: str = ""
    kind: str = ""
    status: str = ""
    raw_input: Any = None
    locations: tuple[str, ...] = ()
    diffs: tuple[FileDiff, ...] = ()

    def merged(self, newer: ToolCall) -> ToolCall:
        """This call with what a later `tool_call_update` (or the permission request) says:
        its fields replace ours where it has them (an update is a patch)."""
        changes = {
            f.name: getattr(newer, f.name)
            for f in fields(ToolCall)
            if getattr(newer, f.name) not in ("", None, ())
        }
        return replace(self, **changes)

    def describe_with_changes(self) -> str:
        """`describe()` and, for an edit, what it changes (`path: +12 −4`)."""
        summary = self.diff_summary()
        return f"{self.describe()}: {summary}" if summary else self.describe()

    def diff_summary(self) -> str:
        """`path: +12 −4` for each edited file, comma-separated ("" when it edits none)."""
        return ", ".join(diff.summary() for diff in self.diffs)

    def describe(self) -> str:
        """One line naming the tool and what it touches, for approvals and notices."""
        detail = ""
        if isinstance(self.raw_input, dict):
            for key in ("command", "cmd", "path", "file_path", "url", "query"):
                value = self.raw_input.get(key)
                if isinstance(value, list):
                    value = " ".join(str(part) for part in value)
                if value:
                    detail = str(value)
                    break
        if not detail and self.locations:
            detail = ", ".join(self.locations)
        name = self.title or self.kind or "a tool"
        if detail and detail not in name:
            return f"{name} ({detail})"
        return name


@dataclass(frozen=True, slots=True)
class PermissionOption:
    option_id: str
    name: str
    kind: str


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    session_id: str
    tool: ToolCall
    options: tuple[PermissionOption, ...]
    subagent: str = ""  # the title of the turn's subagent that asks ("": the agent itself)

    def option_of_kind(self, *kinds: str) -> PermissionOption | None:
        for wanted in kinds:
            for option in self.options:
                if option.kind == wanted:
                    return option
        return None


class PendingPermission:
    """A permission request waiting for an answer. `respond(None)` answers `cancelled`, which
    ACP reserves for a cancelled turn; to deny, pick a reject option."""

    def __init__(self, request: PermissionRequest, *, unasked: bool = False) -> None:
        self.request = request
        # Switchboard asks itself: the agent made a request of us that no approval covers
        self.unasked = unasked
        # Answered by the client's own standing trust (a rule, a policy), not by a press now:
        # it allows this one call and sets no standing rule of the agent's session
        self.automatic = False
        self.withdrawn = False
        self._answer: str | None = None
        self._answered = anyio.Event()

    @property
    def answered(self) -> bool:
        return self._answered.is_set()

    @property
    def answer_id(self) -> str | None:
        """The option id sent (None: `cancelled`, or not answered yet)."""
        return self._answer

    def respond(self, option_id: str | None) -> None:
        if not self._answered.is_set():
            self._answer = option_id
            self._answered.set()

    def withdraw(self) -> None:
        """The agent cancelled its own request: stop waiting."""
        self.withdrawn = True
        self.respond(None)

    async def wait(self) -> str | None:
        await self._answered.wait()
        return self._answer


@dataclass(frozen=True, slots=True)
class UsageInfo:
    used: int | None = None
    size: int | None = None
    percent: float | None = None
    cost: float | None = None  # what the session cost so far, when the agent says
    currency: str = ""


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """One entry of the agent's plan (`plan` update; each update replaces the whole plan)."""

    content: str
    status: str = "pending"  # "pending" | "in_progress" | "completed"
    priority: str = ""


@dataclass(frozen=True, slots=True)
class AgentFile:
    """A file in the agent's reply: an `image` or `audio` block or an embedded `resource` (its
    bytes in `data`), or a `resource_link` (`uri` only: the bot reads a `file://` link only when
    it points inside the workspace). Strings are valid Unicode and capped."""

    name: str
    mime: str = ""
    data: bytes | None = field(default=None, repr=False)
    uri: str = ""
    size: int | None = None


@dataclass(frozen=True, slots=True)
class PromptCapabilities:
    """What the agent said it takes in a prompt besides text (`initialize`'s
    `agentCapabilities.promptCapabilities`)."""

    image: bool = False
    audio: bool = False
    embedded_context: bool = False


@dataclass(frozen=True, slots=True)
class SessionCapabilities:
    """Which session methods beyond new/prompt the agent offers (`initialize`'s
    `agentCapabilities.loadSession` and `sessionCapabilities`; an entry counts when it is an
    object or a literal `true`)."""

    load: bool = False
    list: bool = False
    resume: bool = False
    close: bool = False
    delete: bool = False


@dataclass(frozen=True, slots=True)
class AgentSessionInfo:
    """One session the agent listed in `session/list`, cleaned: `updated` is epoch seconds
    (None when the agent gave no readable `updatedAt`), `title` "" when it gave none."""

    session_id: str
    cwd: str
    title: str = ""
    updated: float | None = None


@dataclass(slots=True)
class AcpPromptStats:
    """How one prompt turn ended."""

    stop_reason: str = STOP_REASON_END_TURN
    usage: dict[str, Any] | None = None
    refusal: RefusalInfo | None = None
    text_chars: int = 0
    tool_calls: int = 0
    interrupted: bool = False

    def terminal_refusal(self) -> AcpPromptStats:
        """A recorded refusal is how the turn ended, whatever stop reason the agent sent."""
        if self.refusal is None:
            return self
        return replace(self, stop_reason=STOP_REASON_REFUSAL)


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made building
# one event per streamed chunk cost about four times as much. Nothing mutates an event once it is
# yielded; a changed copy is made with dataclasses.replace, as before.
@dataclass(slots=True)
class AcpEvent:
    kind: EventKind
    text: str = ""
    message_id: str | None = None
    tool: ToolCall | None = None
    refusal: RefusalInfo | None = None
    usage: UsageInfo | None = None
    stats: AcpPromptStats | None = None
    commands: tuple[str, ...] = ()
    permission: PendingPermission | None = None
    raw: dict[str, Any] | None = field(default=None, repr=False)
    terminal: TerminalActivity | None = None
    file: AgentFile | None = None
    plan: tuple[PlanEntry, ...] = ()
    elicitation: PendingElicitation | None = None
    report: SubagentReport | AgentNotice | CompactionReport | PlanChange | None = None


# ---- what the agent reports outside the answer (acp/agent_reports.py reads them) ---------------
@dataclass(frozen=True, slots=True)
class SubagentReport:
    """A subagent session of the turn's: announced on the parent (`subagent_update`: title,
    state, whether it may be cancelled), or what it does (its own tool calls, routed to the
    parent's turn). Strings cleaned and capped; None: not said in this report."""

    session_id: str
    title: str | None = None
    state: str | None = None  # running | idle | requires_action | unknown | the agent's own word
    can_cancel: bool | None = None
    tool: ToolCall | None = None


@dataclass(frozen=True, slots=True)
class AgentNotice:
    """A `notice` update: advisory words for the person, not part of the answer."""

    severity: str  # info | warning | error | the agent's own word
    title: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """A `compaction_update`: one context compaction (by its id) started, ended or failed."""

    compaction_id: str
    status: str  # in_progress | completed | failed | cancelled | the agent's own word
    error: str = ""


@dataclass(frozen=True, slots=True)
class PlanChange:
    """Which identified plan a `plan_update` replaced (its entries in `AcpEvent.plan`) or a
    `plan_removed` took away."""

    plan_id: str
    removed: bool = False


# ---- session state (acp/session_state.py keeps it) -----------------------------------------
@dataclass(frozen=True, slots=True)
class AgentCommand:
    """One of the agent's own slash commands (named without the slash)."""

    name: str
    description: str = ""
    hint: str = ""


@dataclass(frozen=True, slots=True)
class ConfigChoice:
    value: str
    name: str = ""
    group: str = ""  # the group it was listed under, for grouped select options


@dataclass(frozen=True, slots=True)
class ConfigOption:
    """A session config option as the agent describes it (`category` "model" picks the model)."""

    option_id: str
    name: str = ""
    category: str = ""
    kind: str = ""  # the option's `type`: "select", "boolean", ...
    current: str = ""
    choices: tuple[ConfigChoice, ...] = ()


class NoticeKind(StrEnum):
    COMPACTION_STARTED = "compaction_started"
    COMPACTION_COMPLETED = "compaction_completed"
    COMPACTION_FAILED = "compaction_failed"
    MCP_SIGN_IN = "mcp_sign_in"
    MCP_FAILED = "mcp_failed"
    AGENT_SWITCHED = "agent_switched"
    AGENT_WARNING = "agent_warning"  # a warning it put into its reply stream, in `detail`
    # The agent left its asking state (`previous`); Switchboard put back `detail` (tool gate).
    GATE_RESTORED = "gate_restored"


@dataclass(frozen=True, slots=True)
class SessionNotice:
    """Something the agent reported that a person should hear about, outside any reply. Every
    field is cleaned and capped; `link` is an http(s) link or ""."""

    kind: NoticeKind
    server: str = ""
    link: str = ""
    detail: str = ""  # a failure's sentence, or the agent switched to
    transient: bool = False
    previous: str = ""  # GATE_RESTORED: what the agent had set
