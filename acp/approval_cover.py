"""Which approvals cover what an agent does: its own tool calls as it reports them, and the
`fs/write_text_file` / `terminal/create` requests it makes of us.

ACP's client requests carry no toolCallId, so a request is matched to a person's approval by
what the card showed. An approval covers a request when, in this session's running turn, a
person allowed a tool call that
- has not completed (nor failed) yet,
- is of a kind that can make the request (`terminal/create`: execute; `fs/write_text_file`:
  edit, delete, move; either: `other`, a missing kind or one the spec does not name), and
- showed what the request does: a command line (its `rawInput` command, or its title) that holds
  the whole command run (with the environment it sets, the script of a `sh -c`), as words; or a
  file (its locations, `rawInput` path, diffs, or the workspace-relative name in its title) that
  is the file written.
An `allow_always` answer is a standing rule for the session, as the agent's option says: for a
command, later commands that start with the one allowed; for an edit, delete or move, later
writes. Nothing else covers a request: Switchboard then asks the person itself, with the same
card (`unasked_request`), and runs it only if allowed.

An answer the client gives without a card (`PendingPermission.automatic`: a trust rule a person
made earlier in this session, or the project's approvals policy) counts as allowing that one call,
exactly as a press does, and nothing more: even an `allow_always` option sent that way sets no
standing rule here, so it never lets a call run that the agent did not ask about.

A reported tool call is checked as it reaches `in_progress` or `completed`: while the gate holds,
one whose kind changes things (edit, delete, move, execute, fetch), is missing, or is not a kind
the spec names, with no person's approval (this turn's `allow_*` answer for its id, or a standing
rule of its kind), is a violation (`violates`) — at once when it completes. Some agents report
`in_progress` first and ask right after (opencode does), so a call `in_progress` that nobody was
asked about is judged by what the agent does next (`judge`): its own permission request, or
Switchboard's card for a command or write it makes through us, clears it (a card the person
allows then approves the running calls it fits); any other output, another tool's request or the
end of the turn makes it a violation. `read`, `search`, `think`, `switch_mode` and
`other` are named kinds that do not change anything by themselves; a command or write an `other`
tool makes still passes the request check above."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from acp.types import (
    PERMISSION_ALLOW_ALWAYS,
    PERMISSION_ALLOW_ONCE,
    PERMISSION_REJECT_ONCE,
    FileDiff,
    PendingPermission,
    PermissionOption,
    PermissionRequest,
    ToolCall,
)
from acp.workspace_files import (
    INVALID_PARAMS,
    ClientRequestRefused,
    beneath_parts,
    confine,
    read_text_file,
    shown,
)

SPEC_TOOL_KINDS = frozenset(
    {"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode"}
    | {"other"}
)
# Kinds that change something: run unasked while the gate holds, a violation.
CHANGING_TOOL_KINDS = frozenset({"edit", "delete", "move", "execute", "fetch"})
_RUNNING = frozenset({"in_progress", "completed"})
_DONE = frozenset({"completed", "failed"})
# Kinds of the tool calls whose approval may cover a request ("" and unknown kinds: see below).
_FITS = {
    "terminal/create": frozenset({"execute", "other"}),
    "fs/write_text_file": frozenset({"edit", "delete", "move", "other"}),
}
_WRITE = "fs/write_text_file"
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ash", "ksh", "fish"})
_SHELL_SCRIPT_FLAGS = frozenset({"-c", "-lc", "-ic", "-ec", "-xc", "-cl"})
_PATH_KEYS = ("path", "file_path", "filePath", "abs_path", "absolute_path", "target", "destination")
_COMMAND_KEYS = ("command", "cmd", "commandLine", "script")
# A diff is built for the card only below this size (each side); above it the card names the file.
_DIFF_LIMIT = 256 * 1024
_OPTIONS = (
    PermissionOption("switchboard-allow", "Allow", PERMISSION_ALLOW_ONCE),
    PermissionOption("switchboard-decline", "Decline", PERMISSION_REJECT_ONCE),
)


def gated_kind(kind: str) -> bool:
    """A kind whose unasked run is a violation: changing, missing, or not one the spec names."""
    return kind in CHANGING_TOOL_KINDS or kind not in SPEC_TOOL_KINDS


def _words(text: str) -> str:
    return " ".join(text.split())


def _holds(shown_text: str, wanted: str) -> bool:
    """`wanted` appears in `shown_text` as whole words (not inside a longer name or path)."""
    if not wanted:
        return False
    pattern = r"(?<![\w./-])" + re.escape(wanted) + r"(?![\w./-])"
    return re.search(pattern, _words(shown_text)) is not None


@dataclass(frozen=True, slots=True)
class ClientAction:
    """One mutating client request as a person would approve it: `forms` what an approval
    must have shown of a command (its line with the environment it sets, or its `sh -c`
    script), `path` / `relative` the file written, `tool` the card's tool when Switchboard asks
    itself (the command line, or the file and a diff of the change)."""

    method: str
    forms: tuple[str, ...]
    path: str
    relative: str
    tool: ToolCall
    subagent: str = ""  # the title of the turn's subagent that asked ("": the agent itself)

    def unasked_request(self, session_id: str) -> PendingPermission:
        """The permission Switchboard asks itself, the way an agent's request is asked."""
        request = PermissionRequest(session_id, self.tool, _OPTIONS, self.subagent)
        return PendingPermission(request, unasked=True)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return [" ".join(value)]
    return []


def terminal_action(workspace: Path, params: dict[str, Any], serial: int) -> ClientAction:
    method = "terminal/create"
    command, args, env = params.get("command"), params.get("args") or [], params.get("env") or []
    if not isinstance(command, str) or not command.strip():
        raise ClientRequestRefused(method, "command must be a string", code=INVALID_PARAMS)
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ClientRequestRefused(method, "args must be a list of strings", code=INVALID_PARAMS)
    if not isinstance(env, list):
        raise ClientRequestRefused(method, "env must be a list", code=INVALID_PARAMS)
    assigned = [
        f"{var.get('name')}={var.get('value')}"
        for var in env
        if isinstance(var, dict) and isinstance(var.get("name"), str)
    ]
    program = " ".join([command, *args])
    forms = [program]
    if Path(command).name in _SHELLS and len(args) == 2 and args[0] in _SHELL_SCRIPT_FLAGS:
        # `sh -c SCRIPT` and nothing else (no rc file, no options): the card shows the script
        forms.append(args[1])
    prefix = " ".join(assigned)
    if prefix:  # what the command runs with must have been shown too
        forms = [f"{prefix} {form}" for form in forms]
    line = _words(f"{prefix} {program}")
    raw: dict[str, Any] = {"command": line}
    if params.get("cwd") is not None:  # refused here, as the terminal would be, when outside
        raw["cwd"] = str(confine(method, workspace, params["cwd"]))
    tool = ToolCall(
        f"switchboard-unasked-{serial}",
        title="Run a command the agent did not ask about",
        kind="execute",
        status="pending",
        raw_input=raw,
    )
    return ClientAction(method, tuple(_words(f) for f in forms if f.strip()), "", "", tool)


async def write_action(workspace: Path, params: dict[str, Any], serial: int) -> ClientAction:
    method = _WRITE
    path, content = params.get("path"), params.get("content")
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ClientRequestRefused(method, "path must be an absolute path", code=INVALID_PARAMS)
    if not isinstance(content, str):
        raise ClientRequestRefused(method, "content must be a string", code=INVALID_PARAMS)
    path, relative = _placed(workspace, path)
    diffs: tuple[FileDiff, ...] = ()
    if len(content) <= _DIFF_LIMIT:
        old = await _current_text(workspace, path)
        if old is None or len(old) <= _DIFF_LIMIT:
            diffs = (FileDiff(shown(relative), old, content),)
    tool = ToolCall(
        f"switchboard-unasked-{serial}",
        title="Write a file the agent did not ask about",
        kind="edit",
        status="pending",
        raw_input={"path": shown(relative)},
        locations=(shown(path),),
        diffs=diffs,
    )
    return ClientAction(method, (), path, relative, tool)


def _placed(workspace: Path, path: str) -> tuple[str, str]:
    """The path written, normalised, and as the person knows it (relative to the workspace).
    A path outside the workspace is refused here, as the write would be: no card for it."""
    relative = os.path.normpath("/".join(beneath_parts(_WRITE, workspace, path)) or ".")
    if relative == ".." or relative.startswith("../"):
        raise ClientRequestRefused(_WRITE, f"path {shown(path)!r} is outside the workspace")
    return os.path.normpath(os.path.join(workspace, relative)), relative


async def _current_text(workspace: Path, path: str) -> str | None:
    """The file as it is now, read as `fs/read_text_file` reads it (None: no such file)."""
    try:
        result = await read_text_file(workspace, {"path": path})
    except ClientRequestRefused:
        return None  # missing, or not ours to read: the card shows a new file
    content = result.get("content") if isinstance(result, dict) else None
    return content if isinstance(content, str) else None


def _shown_commands(tool: ToolCall) -> list[str]:
    texts = [tool.title, tool.describe()]
    if isinstance(tool.raw_input, dict):
        for key in _COMMAND_KEYS:
            texts += _strings(tool.raw_input.get(key))
    return [text for text in texts if text]


def _shown_paths(tool: ToolCall, workspace: Path) -> set[str]:
    raw = list(tool.locations) + [diff.path for diff in tool.diffs]
    if isinstance(tool.raw_input, dict):
        for key in _PATH_KEYS:
            raw += _strings(tool.raw_input.get(key))
    return {os.path.normpath(os.path.join(workspace, p)) for p in raw if p}


def _fits(action: ClientAction, kind: str) -> bool:
    return kind in _FITS[action.method] or kind not in SPEC_TOOL_KINDS


def _showed(action: ClientAction, tool: ToolCall, workspace: Path) -> bool:
    if action.method == "terminal/create":
        commands = _shown_commands(tool)
        return any(_holds(text, form) for text in commands for form in action.forms)
    if action.path in _shown_paths(tool, workspace):
        return True
    return bool(tool.title) and _holds(tool.title, action.relative)


class ApprovalCover:
    """A session's standing rules: what its `allow_always` answers allowed (kept across turns)."""

    def __init__(self) -> None:
        self.kinds: set[str] = set()  # named changing kinds allowed always
        self.commands: list[str] = []  # command lines allowed always (and what extends them)

    def allow_always(self, tool: ToolCall) -> None:
        if tool.kind in CHANGING_TOOL_KINDS:
            self.kinds.add(tool.kind)
        if tool.kind == "execute" or not tool.kind:
            raw = tool.raw_input if isinstance(tool.raw_input, dict) else {}
            commands = _strings(raw.get("command"))
            self.commands += [_words(command) for command in commands if command.strip()]

    def covers_request(self, action: ClientAction) -> bool:
        if action.method == "fs/write_text_file":
            return bool(self.kinds & {"edit", "delete", "move"})
        return any(
            form == command or form.startswith(command + " ")
            for command in self.commands
            for form in action.forms
        )


class TurnApprovals:
    """One turn's tool calls (each merged from its updates) and which a person allowed."""

    def __init__(self, cover: ApprovalCover, workspace: Path | None) -> None:
        self.cover = cover
        self.workspace = workspace
        self.tools: dict[str, ToolCall] = {}
        self.asked: set[str] = set()
        self.allowed: dict[str, ToolCall] = {}  # by id: what the person saw when allowing it
        self.suspects: dict[str, ToolCall] = {}  # running, nobody asked yet: see `judge`

    def known(self, tool: ToolCall) -> ToolCall:
        """The call with everything its earlier updates said (an update is a patch)."""
        earlier = self.tools.get(tool.tool_call_id)
        merged = earlier.merged(tool) if earlier is not None else tool
        self.tools[tool.tool_call_id] = merged
        return merged

    def detail(self, pending: PendingPermission) -> None:
        """Give a permission request everything known of its tool call: agents may send the
        title, kind, input and diff in earlier updates and only the id in the request."""
        request = pending.request
        self.asked.add(request.tool.tool_call_id)
        self.suspects.pop(request.tool.tool_call_id, None)
        earlier = self.tools.get(request.tool.tool_call_id)
        if earlier is not None:
            pending.request = replace(request, tool=earlier.merged(request.tool))

    def answered(self, pending: PendingPermission, answer: str | None) -> bool:
        """Note the answer (a person's, or an automatic one); whether it allowed the tool."""
        request = pending.request
        chosen = next((o for o in request.options if o.option_id == answer), None)
        if chosen is None or chosen.kind not in (PERMISSION_ALLOW_ONCE, PERMISSION_ALLOW_ALWAYS):
            return False
        self.allowed[request.tool.tool_call_id] = request.tool
        if chosen.kind == PERMISSION_ALLOW_ALWAYS and not pending.automatic:
            self.cover.allow_always(request.tool)
        return True

    def violates(self, tool: ToolCall) -> bool:
        """A tool that runs unapproved (see the module's docstring); the gate must hold."""
        tool_id = tool.tool_call_id
        if not (
            tool.status in _RUNNING
            and gated_kind(tool.kind)
            and tool_id not in self.allowed
            and tool.kind not in self.cover.kinds
        ):
            self.suspects.pop(tool_id, None)
            return False
        if tool.status == "completed":
            return True
        if tool_id not in self.asked:
            self.suspects[tool_id] = tool
        return False

    def judge(self, next_tool: str | None = None, unasked: bool = False) -> ToolCall | None:
        """What the agent does next, with calls running that nobody was asked about: the suspect
        that is a violation now, if any. `next_tool`: the id of the tool call the next item is
        about (a permission request, or an update), `unasked`: it is Switchboard's own card."""
        if not self.suspects or unasked:
            return None
        if next_tool is not None and next_tool in self.suspects:
            return None  # its own request or update: `violates` or `detail` decides
        return next(iter(self.suspects.values()))

    def allowed_unasked(self, action: ClientAction) -> None:
        """A person allowed Switchboard's card for `action`: the running calls it fits (that
        nobody asked about) made it, approved with it."""
        for tool_id, tool in list(self.tools.items()):
            if tool.status in _DONE or tool_id in self.allowed or not _fits(action, tool.kind):
                continue
            self.allowed[tool_id] = tool
            self.suspects.pop(tool_id, None)

    def covering(self, action: ClientAction) -> str | None:
        """What covers the request: the allowed tool call's id, "always", or None."""
        if self.cover.covers_request(action):
            return "always"
        workspace = self.workspace or Path("/")
        for tool_id, allowed in self.allowed.items():
            now = self.tools.get(tool_id)
            tool = now.merged(allowed) if now is not None else allowed
            status = now.status if now is not None and now.status else allowed.status
            if status in _DONE or not _fits(action, tool.kind):
                continue
            if _showed(action, tool, workspace):
                return tool_id
        return None
