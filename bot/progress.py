"""What a live reply shows while the agent works, and the one line the final keeps of it.

`TurnProgress` follows one turn's events: the agent's current plan (each `plan` update replaces
it), its tool calls (a `tool_call` and its updates merged by id), the line a running terminal
shows, a retry, and how long the turn has run. `block()` renders that as the reply's status
block: a header ("working", "still working (2 min)"), a compact checklist of the plan, the last
few tool calls, newest last. Everything the agent said is hostile and unbounded, so every line is
one line, shortened, and the block has a fixed number of lines at most.

`tool_summary()` is what the final message keeps: "Tools: 2 reads, 1 edit, 3 commands". It counts
the tools that ran: a call whose permission request was answered with a reject option, or
cancelled, did not (`permission_answered`)."""

from __future__ import annotations

from collections import OrderedDict

from acp import (
    AcpEvent,
    AgentNotice,
    CompactionReport,
    EventKind,
    PermissionRequest,
    PlanChange,
    PlanEntry,
    SubagentReport,
    ToolCall,
)
from surfaces.text import ellipsize

__all__ = ["TICK_INTERVAL", "TurnProgress", "elapsed_label"]

# How often the elapsed time is refreshed when nothing else changes. The reply stream paces every
# edit anyway; this only bounds how often a quiet turn asks for one.
TICK_INTERVAL = 20.0
# A turn shorter than this shows no elapsed time: it would only flicker.
ELAPSED_AFTER = 10.0

LINE_LIMIT = 100  # characters per line of the block
PLAN_LINES = 8
TOOL_LINES = 5
# Tool calls remembered per turn (ids beyond it are only counted), so an agent that sends a
# million calls costs a bounded amount.
TOOLS_KEPT = 200

BLOCK_LINES = 19  # the header and the body: within what the reply keeps (bot/reply.py)
DIFF_LINES = 3  # the latest edit's first lines in the block
SUBAGENT_BLOCKS = 2  # subagent sessions shown, the latest active last
SUBAGENTS_KEPT = 32
NOTICE_LINES = 2
NOTES_KEPT = 5  # warnings, errors and compactions the final keeps
CHANGED_FILES = 3  # files the final's tools line names

_PLAN_MARKS = {"completed": "✓", "in_progress": "▸"}
_SUBAGENT_MARKS = {"idle": "✓", "requires_action": "⏸", "unknown": "?"}
_NOTICE_MARKS = {"warning": "⚠", "error": "✗"}
_TOOL_MARKS = {"completed": "✓", "failed": "✗"}
_PENDING = "○"
_RUNNING = "▸"

# ACP tool kinds -> (one, many) as the summary counts them.
_KIND_WORDS = {
    "read": ("read", "reads"),
    "edit": ("edit", "edits"),
    "delete": ("deletion", "deletions"),
    "move": ("move", "moves"),
    "search": ("search", "searches"),
    "execute": ("command", "commands"),
    "think": ("thought", "thoughts"),
    "fetch": ("fetch", "fetches"),
}
_OTHER = ("other tool", "other tools")


def elapsed_label(seconds: float) -> str:
    """ "45 s", "2 min", "1 h 5 min"."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def _line(text: str) -> str:
    return ellipsize(" ".join(text.split()), LINE_LIMIT)


class TurnProgress:
    """One turn's progress, from its events. `on_event` says whether the block changed."""

    def __init__(self) -> None:
        self.plan: tuple[PlanEntry, ...] = ()
        self.tools: OrderedDict[str, ToolCall] = OrderedDict()
        self._counted: set[str] = set()
        self._extra_calls = 0  # calls past TOOLS_KEPT, shown as "earlier"
        self._rejected: set[str] = set()  # ids of calls a person (or a timeout) did not allow
        self.terminal = ""
        self.note = ""  # e.g. a retry
        self.plan_id = ""  # the identified plan shown ("": the legacy `plan`)
        self.subagents: OrderedDict[str, SubagentReport] = OrderedDict()
        self.notices: list[str] = []  # the latest lines, for the status
        self.notes: list[str] = []  # what the final keeps
        self._used: int | None = None  # context tokens, as the last usage update said
        self._compacting: tuple[str, int | None] | None = None  # (id, tokens before)
        self._compacted: tuple[int | None, int | None] | None = None  # before, after
        self._compaction_line = ""
        self._compaction_note: int | None = None  # where the final keeps it
        self._diff_preview: tuple[str, list[str]] = ("", [])  # the latest edit's, rendered once
        self._changes: dict[str, str] = {}  # an edit's `path: +12 −4`, by its call's id

    def on_event(self, event: AcpEvent) -> bool:
        kind = event.kind
        if kind is EventKind.PLAN:
            return self._on_plan(event)
        if kind is EventKind.SUBAGENT and isinstance(event.report, SubagentReport):
            self._on_subagent(event.report)
            return True
        if kind is EventKind.NOTICE and isinstance(event.report, AgentNotice):
            self._on_notice(event.report)
            return True
        if kind is EventKind.COMPACTION and isinstance(event.report, CompactionReport):
            return self._on_compaction(event.report)
        if kind is EventKind.USAGE and event.usage is not None and event.usage.used is not None:
            self._used = event.usage.used
            if self._compacted is not None and self._compacted[1] is None:
                self._compacted = (self._compacted[0], self._used)
                self._compaction_line = _compacted_line(*self._compacted)
                self._keep_note(self._compaction_line, at=self._compaction_note)
                return True
            return False
        if kind in (EventKind.TOOL_CALL, EventKind.TOOL_UPDATE) and event.tool is not None:
            self._on_tool(event.tool)
            return True
        if kind is EventKind.TERMINAL_ACTIVITY and event.terminal is not None:
            terminal = event.terminal
            self.terminal = "" if terminal.exited else terminal.status_line()
            return True
        return False

    def _on_plan(self, event: AcpEvent) -> bool:
        change = event.report if isinstance(event.report, PlanChange) else None
        if change is not None and change.removed:
            if change.plan_id != self.plan_id:
                return False  # not the plan shown (clients ignore an unknown id)
            self.plan, self.plan_id = (), ""
            return True
        self.plan = tuple(event.plan)
        self.plan_id = change.plan_id if change is not None else ""
        return True

    def _on_subagent(self, report: SubagentReport) -> None:
        known = self.subagents.get(report.session_id)
        if known is None and len(self.subagents) >= SUBAGENTS_KEPT:
            return
        if known is not None:
            tool = report.tool
            if tool is not None and known.tool is not None:
                if known.tool.tool_call_id == tool.tool_call_id:
                    tool = known.tool.merged(tool)
            report = SubagentReport(
                report.session_id,
                title=report.title if report.title is not None else known.title,
                state=report.state if report.state is not None else known.state,
                can_cancel=known.can_cancel if report.can_cancel is None else report.can_cancel,
                tool=tool or known.tool,
            )
        self.subagents[report.session_id] = report
        self.subagents.move_to_end(report.session_id)

    def _on_notice(self, notice: AgentNotice) -> None:
        mark = _NOTICE_MARKS.get(notice.severity, "ℹ")
        text = f"{mark} {notice.title}" + (f" — {notice.detail}" if notice.detail else "")
        self.notices = [*self.notices[-(NOTICE_LINES - 1) :], _line(text)]
        if notice.severity in _NOTICE_MARKS:
            self._keep_note(_line(text))

    def _on_compaction(self, report: CompactionReport) -> bool:
        if report.status == "in_progress":
            self._compacting = (report.compaction_id, self._used)
            self._compaction_line = "compacting the context…"
            return True
        before = None
        if self._compacting is not None and self._compacting[0] == report.compaction_id:
            before = self._compacting[1]
        self._compacting = None
        if report.status == "completed":
            self._compacted = (before, None)
            self._compaction_line = _compacted_line(before, None)
        elif report.status in ("failed", "cancelled"):
            self._compacted = None
            detail = f": {report.error}" if report.error else ""
            self._compaction_line = _line(f"context compaction {report.status}{detail}")
        else:
            return False
        self._compaction_note = self._keep_note(self._compaction_line)
        return True

    def _keep_note(self, line: str, *, at: int | None = None) -> int | None:
        """Keep `line` for the final (in place of the note `at`); where it went, if kept."""
        if at is not None and at < len(self.notes):
            self.notes[at] = line
            return at
        if len(self.notes) < NOTES_KEPT:
            self.notes.append(line)
            return len(self.notes) - 1
        return None

    def _on_tool(self, tool: ToolCall) -> None:
        known = self.tools.get(tool.tool_call_id)
        if known is not None:
            self.tools[tool.tool_call_id] = known.merged(tool)
        elif len(self.tools) < TOOLS_KEPT:
            self.tools[tool.tool_call_id] = tool
        else:
            self._extra_calls += tool.tool_call_id not in self._counted
        merged = self.tools.get(tool.tool_call_id)
        if merged is not None and tool.diffs:  # rendered once per change, not per block
            self._diff_preview = (tool.tool_call_id, _diff_preview(merged))
            self._changes[tool.tool_call_id] = merged.diff_summary()
        if tool.tool_call_id not in self._counted and len(self._counted) < 10 * TOOLS_KEPT:
            self._counted.add(tool.tool_call_id)
        self.note = ""  # the agent works again: a retry is over

    def permission_answered(self, request: PermissionRequest, option_id: str | None) -> None:
        """The answer to a permission request: a reject option or none (cancelled) means the
        tool did not run, so the summary leaves it out."""
        chosen = next((o for o in request.options if o.option_id == option_id), None)
        if (chosen is None or chosen.kind.startswith("reject")) and len(self._rejected) < (
            10 * TOOLS_KEPT
        ):
            self._rejected.add(request.tool.tool_call_id)

    def retrying(self) -> None:
        self.note = "a temporary error; retrying"

    # ---- rendering ------------------------------------------------------------------------------

    def block(self, elapsed: float) -> str | None:
        """The status block: lines joined by single newlines, None when there is nothing to show.
        The caller puts STATUS_MARK before its first line."""
        rest = [*self._tool_lines(), *self._subagent_lines()]
        if self.terminal:
            rest.append(_line(self.terminal))
        rest.extend(self.notices)
        if self._compaction_line:
            rest.append(self._compaction_line)
        if self.note:
            rest.append(_line(self.note))
        # The plan gives way first: the reply keeps at most BLOCK_LINES lines of the block.
        body = [*self._plan_lines(BLOCK_LINES - 1 - len(rest)), *rest][: BLOCK_LINES - 1]
        if elapsed >= ELAPSED_AFTER:
            header = f"still working ({elapsed_label(elapsed)})"
        elif body:
            header = "working"
        else:
            return None
        return "\n".join([header, *body])

    def _plan_lines(self, room: int) -> list[str]:
        if not self.plan or room < 2:
            return []
        done = sum(1 for entry in self.plan if entry.status == "completed")
        lines = [f"Plan ({done}/{len(self.plan)}):"]
        shown = min(PLAN_LINES, len(self.plan), room - 1)
        if shown < len(self.plan):
            shown = min(shown, room - 2)
        for entry in self.plan[:shown]:
            mark = _PLAN_MARKS.get(entry.status, _PENDING)
            lines.append(_line(f"{mark} {entry.content}"))
        if len(self.plan) > shown:
            lines.append(f"… {len(self.plan) - shown} more")
        return lines

    def _tool_lines(self) -> list[str]:
        calls = list(self.tools.values())
        earlier = len(calls) - TOOL_LINES + self._extra_calls
        lines = [f"… {earlier} earlier"] if earlier > 0 else []
        preview_id, preview = self._diff_preview
        for call in calls[-TOOL_LINES:]:
            mark = _TOOL_MARKS.get(call.status, _RUNNING)
            changes = self._changes.get(call.tool_call_id)
            described = f"{call.describe()}: {changes}" if changes else call.describe()
            lines.append(_line(f"{mark} {described}"))
            if call.tool_call_id == preview_id:
                lines.extend(preview)
        return lines

    def _subagent_lines(self) -> list[str]:
        subagents = list(self.subagents.values())
        lines = []
        if len(subagents) > SUBAGENT_BLOCKS:
            lines.append(f"… {len(subagents) - SUBAGENT_BLOCKS} more subagents")
        for sub in subagents[-SUBAGENT_BLOCKS:]:
            mark = _SUBAGENT_MARKS.get(sub.state or "", _RUNNING)
            state = f" ({sub.state.replace('_', ' ')})" if sub.state else ""
            lines.append(_line(f"{mark} subagent: {sub.title or 'untitled'}{state}"))
            if sub.tool is not None:
                tool_mark = _TOOL_MARKS.get(sub.tool.status, _RUNNING)
                lines.append(_line(f"↳ {tool_mark} {sub.tool.describe()}"))
        return lines

    def final_notes(self) -> str:
        """The warnings and errors the agent noticed and its compaction, one line each ("" when
        there were none): what the final keeps of what was said outside the answer."""
        return "\n".join(self.notes)

    def tool_summary(self) -> str:
        """ "Tools: 2 reads, 1 edit, 3 commands" ("" when the turn used none)."""
        counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        for call in self.tools.values():
            if call.tool_call_id in self._rejected:
                continue
            words = _KIND_WORDS.get(call.kind, _OTHER)
            counts[words] = counts.get(words, 0) + 1
        if self._extra_calls:
            counts[_OTHER] = counts.get(_OTHER, 0) + self._extra_calls
        if not counts:
            return ""
        parts = [f"{n} {one if n == 1 else many}" for (one, many), n in counts.items()]
        changed = list(
            dict.fromkeys(
                diff.path
                for call in self.tools.values()
                if call.tool_call_id not in self._rejected
                for diff in call.diffs
            )
        )
        if not changed:
            return "Tools: " + ", ".join(parts)
        named = ", ".join(changed[:CHANGED_FILES])
        if len(changed) > CHANGED_FILES:
            named += f" and {len(changed) - CHANGED_FILES} more"
        return _line("Tools: " + ", ".join(parts) + f" · changed {named}")


def _diff_preview(call: ToolCall) -> list[str]:
    """The first lines of an edit's change (its first file's), under its line. The reply
    normalises the block's whitespace: a mark, not spaces, sets these lines apart."""
    if not call.diffs:
        return []
    return [_line("│ " + line) for line in call.diffs[0].preview(DIFF_LINES)]


def _compacted_line(before: int | None, after: int | None) -> str:
    if before is None or after is None:
        return "context compacted"
    return f"context compacted ({before:,} → {after:,} tokens)"
