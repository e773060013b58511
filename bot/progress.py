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

from acp import AcpEvent, EventKind, PermissionRequest, PlanEntry, ToolCall
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

_PLAN_MARKS = {"completed": "✓", "in_progress": "▸"}
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

    def on_event(self, event: AcpEvent) -> bool:
        kind = event.kind
        if kind is EventKind.PLAN:
            self.plan = tuple(event.plan)
            return True
        if kind in (EventKind.TOOL_CALL, EventKind.TOOL_UPDATE) and event.tool is not None:
            self._on_tool(event.tool)
            return True
        if kind is EventKind.TERMINAL_ACTIVITY and event.terminal is not None:
            terminal = event.terminal
            self.terminal = "" if terminal.exited else terminal.status_line()
            return True
        return False

    def _on_tool(self, tool: ToolCall) -> None:
        known = self.tools.get(tool.tool_call_id)
        if known is not None:
            self.tools[tool.tool_call_id] = known.merged(tool)
        elif len(self.tools) < TOOLS_KEPT:
            self.tools[tool.tool_call_id] = tool
        else:
            self._extra_calls += tool.tool_call_id not in self._counted
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
        body = [*self._plan_lines(), *self._tool_lines()]
        if self.terminal:
            body.append(_line(self.terminal))
        if self.note:
            body.append(_line(self.note))
        if elapsed >= ELAPSED_AFTER:
            header = f"still working ({elapsed_label(elapsed)})"
        elif body:
            header = "working"
        else:
            return None
        return "\n".join([header, *body])

    def _plan_lines(self) -> list[str]:
        if not self.plan:
            return []
        done = sum(1 for entry in self.plan if entry.status == "completed")
        lines = [f"Plan ({done}/{len(self.plan)}):"]
        for entry in self.plan[:PLAN_LINES]:
            mark = _PLAN_MARKS.get(entry.status, _PENDING)
            lines.append(_line(f"{mark} {entry.content}"))
        if len(self.plan) > PLAN_LINES:
            lines.append(f"… {len(self.plan) - PLAN_LINES} more")
        return lines

    def _tool_lines(self) -> list[str]:
        calls = list(self.tools.values())
        earlier = len(calls) - TOOL_LINES + self._extra_calls
        lines = [f"… {earlier} earlier"] if earlier > 0 else []
        for call in calls[-TOOL_LINES:]:
            mark = _TOOL_MARKS.get(call.status, _RUNNING)
            lines.append(_line(f"{mark} {call.describe()}"))
        return lines

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
        return "Tools: " + ", ".join(parts)
