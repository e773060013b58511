"""`session/list` read defensively: the agent's pages are hostile input. Every string is cleaned
and capped, an entry without a usable id (or in another folder than the one asked for) is
skipped, and the walk through `nextCursor` pages stops at a page and an entry budget, or when a
cursor repeats, so an agent cannot keep us paging or grow the list without bound."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from acp.state_parsing import clean
from acp.types import AgentSessionInfo

log = logging.getLogger(__name__)

MAX_PAGES = 5
MAX_SESSIONS = 200
MAX_SESSION_ID = 200
MAX_CURSOR = 4096
MAX_CWD = 4096
MAX_TITLE = 200
MAX_TIMESTAMP = 64

# An id we may send back in session/load and show people: printable, no spaces, bounded.
_RE_SESSION_ID = re.compile(r"^[\w.:@+=-]+$")

# One page: params -> the agent's result object (an error is raised by the caller's `fetch`).
FetchPage = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def clean_session_id(value: Any) -> str:
    """The id as given when it is one we can safely show and send back, else ""."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_SESSION_ID:
        return ""
    return value if _RE_SESSION_ID.match(value) else ""


def parse_timestamp(value: Any) -> float | None:
    """`updatedAt` (ISO 8601) as epoch seconds; None when absent or unreadable."""
    text = clean(value, MAX_TIMESTAMP)
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None  # a local time of the agent's machine: we cannot place it
    return moment.timestamp()


def parse_entry(raw: Any, cwd: str) -> AgentSessionInfo | None:
    if not isinstance(raw, dict):
        return None
    session_id = clean_session_id(raw.get("sessionId"))
    where = raw.get("cwd")
    if not session_id or not isinstance(where, str) or len(where) > MAX_CWD or where != cwd:
        return None
    return AgentSessionInfo(
        session_id=session_id,
        cwd=where,
        title=clean(raw.get("title"), MAX_TITLE),
        updated=parse_timestamp(raw.get("updatedAt")),
    )


async def walk_pages(fetch: FetchPage, cwd: str) -> tuple[AgentSessionInfo, ...]:
    """Every session in `cwd` the agent lists, first seen first, within the budgets."""
    found: dict[str, AgentSessionInfo] = {}
    cursors: set[str] = set()
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        params: dict[str, Any] = {"cwd": cwd}
        if cursor is not None:
            params["cursor"] = cursor
        result = await fetch(params)
        entries = result.get("sessions")
        for raw in entries if isinstance(entries, list) else ():
            if len(found) >= MAX_SESSIONS:
                log.debug("the agent lists more than %d sessions; keeping the first", MAX_SESSIONS)
                return tuple(found.values())
            entry = parse_entry(raw, cwd)
            if entry is not None:
                found.setdefault(entry.session_id, entry)
        following = result.get("nextCursor")
        if not isinstance(following, str) or not following or len(following) > MAX_CURSOR:
            break
        if following in cursors:
            log.debug("the agent repeated a session/list cursor; stopping there")
            break
        cursors.add(following)
        cursor = following
    else:
        log.debug("session/list has more than %d pages; keeping the first", MAX_PAGES)
    return tuple(found.values())
