"""What agents report outside the answer, once the client opts in (`ADVERTISED`, in `initialize`'s
clientCapabilities, as the v1 schema names them): identified plans (`plan: {}` -> `plan_update`,
`plan_removed`), subagent sessions (`subagents: {}` -> `subagent_update` on the parent, then the
child's own updates under its own session id), advisory notices (`session.notices: {}` ->
`notice`) and context compactions (`session.compaction: {}` -> `compaction_update`, addressed by
`compactionId`; the schema carries no token counts: the bot takes them from `usage_update`).

Every update is hostile input: strings are made valid, one line and capped (`clean`), lists are
capped, and an unknown variant or shape is logged at debug and skipped, never raised.

A subagent's updates arrive under the child's session id, which this client never opened. The
frame reader (acp/session_handle.py) routes them into the parent's inbox through
`SubagentRoutes`, wrapped in a `ChildUpdate`: not a JSON value, so no frame can forge one, and the
parent's turn reads it as the child's (`child_event`), never as its own text."""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from acp.state_parsing import clean
from acp.tool_parsing import parse_tool
from acp.types import (
    AcpEvent,
    AgentNotice,
    CompactionReport,
    EventKind,
    PlanChange,
    PlanEntry,
    SubagentReport,
)
from config import valid_text

log = logging.getLogger(__name__)

ADVERTISED: dict[str, Any] = {
    "plan": {},
    "subagents": {},
    "session": {"compaction": {}, "notices": {}},
}

MAX_ID = 200
MAX_TITLE = 200
MAX_DETAIL = 300
MAX_WORD = 40  # a severity, status or state the agent names itself
MAX_SUBAGENTS = 32  # children whose updates are routed, per agent process (the oldest go first)
MAX_MARKDOWN_ENTRIES = 50
MAX_PLAN_ENTRIES = 50
MAX_PLAN_ENTRY = 300
_PLAN_STATUSES = frozenset({"pending", "in_progress", "completed"})

# Known, and nothing we show: a compaction's summary text, messages between sessions.
_QUIET = frozenset({"compaction_summary_chunk", "session_message", "session_message_chunk"})
_RE_CHECKBOX = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[([ xX~-])\]\s+)?(.+)$")


@dataclass(frozen=True, slots=True)
class ChildUpdate:
    """A subagent's `session/update` routed into its parent's inbox."""

    session_id: str
    update: dict[str, Any]


def _id(value: Any) -> str:
    return clean(value, MAX_ID) if isinstance(value, str) else ""


def parse_report(variant: str, update: dict[str, Any]) -> AcpEvent | None:
    """One of `REPORT_VARIANTS` (or a quiet one) -> its event, or None to skip it."""
    if variant == "notice":
        title = clean(update.get("title"), MAX_TITLE)
        if not title:
            return None
        severity = clean(update.get("severity"), MAX_WORD).lower() or "info"
        detail = clean(update.get("description"), MAX_DETAIL)
        return AcpEvent(EventKind.NOTICE, report=AgentNotice(severity, title, detail))
    if variant == "compaction_update":
        compaction_id, status = _id(update.get("compactionId")), update.get("status")
        if not compaction_id or not isinstance(status, str):
            return None
        error = clean(update.get("error"), MAX_DETAIL)
        report = CompactionReport(compaction_id, clean(status, MAX_WORD).lower(), error)
        return AcpEvent(EventKind.COMPACTION, report=report)
    if variant == "subagent_update":
        return _subagent(update)
    if variant == "plan_update":
        return _plan_update(update.get("plan"))
    if variant == "plan_removed":
        plan_id = _id(update.get("planId"))
        if not plan_id:
            return None
        return AcpEvent(EventKind.PLAN, report=PlanChange(plan_id, removed=True))
    if variant not in _QUIET:
        log.debug("skipping unknown session/update variant %r", variant)
    return None


def _subagent(update: dict[str, Any]) -> AcpEvent | None:
    session_id = _id(update.get("sessionId"))
    if not session_id:
        return None
    title = clean(update["title"], MAX_TITLE) if isinstance(update.get("title"), str) else None
    state_value = update.get("state")
    state = None
    if isinstance(state_value, dict) and isinstance(state_value.get("state"), str):
        state = clean(state_value["state"], MAX_WORD).lower()
    can_cancel = None
    if "capabilities" in update:  # a patch: only a given capability set changes it
        capabilities = update.get("capabilities")
        can_cancel = isinstance(capabilities, dict) and isinstance(capabilities.get("cancel"), dict)
    report = SubagentReport(session_id, title=title, state=state, can_cancel=can_cancel)
    return AcpEvent(EventKind.SUBAGENT, report=report)


def _plan_update(plan: Any) -> AcpEvent | None:
    if not isinstance(plan, dict):
        return None
    plan_id, kind = _id(plan.get("id")), plan.get("type")
    if not plan_id:
        return None
    if kind == "items":
        entries = parse_plan(plan.get("entries"))
    elif kind == "markdown":
        entries = markdown_entries(plan.get("content"))
    else:
        log.debug("skipping a plan_update of type %r", kind)
        return None
    return AcpEvent(EventKind.PLAN, plan=entries, report=PlanChange(plan_id))


def parse_plan(entries: Any) -> tuple[PlanEntry, ...]:
    """A `plan` update's entries (each update replaces the plan): bounded count and length."""
    plan: list[PlanEntry] = []
    for entry in entries if isinstance(entries, list) else ():
        if len(plan) >= MAX_PLAN_ENTRIES:
            break
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            continue
        content = " ".join(valid_text(entry["content"]).split())
        if not content:
            continue
        if len(content) > MAX_PLAN_ENTRY:
            content = content[: MAX_PLAN_ENTRY - 1].rstrip() + "…"
        status = entry.get("status")
        priority = entry.get("priority")
        plan.append(
            PlanEntry(
                content=content,
                status=status if status in _PLAN_STATUSES else "pending",
                priority=priority if priority in ("high", "medium", "low") else "",
            )
        )
    return tuple(plan)


def markdown_entries(text: Any) -> tuple[PlanEntry, ...]:
    """A Markdown plan as checklist entries: its list items (`- [x] done` completed, `- [~]` or
    `- [-]` in progress), else its first line; bounded."""
    if not isinstance(text, str):
        return ()
    entries: list[PlanEntry] = []
    first = ""
    for line in text[:100_000].splitlines():
        if not first and line.strip():
            first = clean(line.lstrip("# "), MAX_TITLE)
        match = _RE_CHECKBOX.match(line)
        if match is None:
            continue
        content = clean(match.group(2), MAX_TITLE)
        mark = (match.group(1) or " ").lower()
        status = {"x": "completed", "~": "in_progress", "-": "in_progress"}.get(mark, "pending")
        if content:
            entries.append(PlanEntry(content, status))
        if len(entries) >= MAX_MARKDOWN_ENTRIES:
            break
    if not entries and first:
        entries.append(PlanEntry(first))
    return tuple(entries)


def child_event(update: Any) -> AcpEvent | None:
    """A subagent's own update, routed to its parent's turn: what tool it runs now. Its text and
    everything else it says stay its own (the parent reports what it learned)."""
    if type(update) is not ChildUpdate:
        return None
    variant = update.update.get("sessionUpdate")
    if variant not in ("tool_call", "tool_call_update"):
        return None
    tool = parse_tool(update.update)
    if tool is None:
        return None
    return AcpEvent(EventKind.SUBAGENT, report=SubagentReport(update.session_id, tool=tool))


@dataclass(slots=True)
class SubagentRoute:
    """One announced subagent session: its parent, its title and whether it may be cancelled
    (as its latest `subagent_update` said: a patch leaves what it does not name)."""

    parent_id: str
    title: str = ""
    can_cancel: bool = False


class SubagentRoutes:
    """Which subagent session belongs to which parent session, for the frame reader and for the
    child's requests: learned from the parent's `subagent_update` frames, bounded
    (`MAX_SUBAGENTS`, the oldest forgotten)."""

    def __init__(self) -> None:
        self._children: OrderedDict[str, SubagentRoute] = OrderedDict()

    def announced(self, parent_id: Any, params: Any) -> None:
        """A frame for `parent_id` that may announce a child (the caller saw the variant's name
        in the raw line, so the streaming chunks never get here)."""
        update = params.get("update") if isinstance(params, dict) else None
        if not isinstance(update, dict) or update.get("sessionUpdate") != "subagent_update":
            return
        child = update.get("sessionId")
        if not isinstance(child, str) or not child or not isinstance(parent_id, str):
            return
        event = _subagent(update)  # its title and capabilities, cleaned as the status shows them
        report = event.report if event is not None else None
        if not isinstance(report, SubagentReport) or child == parent_id:
            return
        route = self._children.get(child)
        if route is None or route.parent_id != parent_id:  # a child never changes parents
            route = self._children[child] = SubagentRoute(parent_id)
        if report.title:
            route.title = report.title
        if report.can_cancel is not None:
            route.can_cancel = report.can_cancel
        self._children.move_to_end(child)
        while len(self._children) > MAX_SUBAGENTS:
            self._children.popitem(last=False)

    def route(self, method: str, params: Any) -> tuple[str, dict[str, Any]] | None:
        """A child's `session/update` as its parent's inbox takes it: (parent id, params)."""
        if method != "session/update" or not self._children or type(params) is not dict:
            return None
        child = params.get("sessionId")
        known = self._children.get(child) if isinstance(child, str) else None
        update = params.get("update")
        if known is None or not isinstance(child, str) or not isinstance(update, dict):
            return None
        parent = known.parent_id
        return parent, {"sessionId": parent, "update": ChildUpdate(child, update)}

    def parent_of(self, child_id: str) -> str | None:
        known = self._children.get(child_id)
        return known.parent_id if known is not None else None

    def get(self, child_id: str) -> SubagentRoute | None:
        return self._children.get(child_id)
