"""A conversation's agent sessions: what `/sessions` lists and what `/resume ID` may pick.

Two sources, merged: the store's `session_history` (the sessions this conversation used, written
whenever its binding changes and when the agent retitles one) and, when the agent advertises
`sessionCapabilities.list`, its own `session/list` for the project's workspace. The agent's list
holds every session in that folder, whoever started it (another person's conversation, or the
agent's own command line): only admins see the ones not recorded for this conversation, marked
as such; everyone else sees their own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from acp import AGENT_ERRORS, AcpClient, AcpSession, AgentSessionInfo
from bot.store import SessionRecord, StateStore, StoreError
from surfaces.base import ConversationKey

log = logging.getLogger(__name__)

MAX_SHOWN = 10  # sessions one /sessions answer lists, most recent first
SHORT_ID = 8  # the shortest id prefix shown (longer where two listed ids share it)


@dataclass(frozen=True, slots=True)
class ListedSession:
    """One line of `/sessions`. `ours`: recorded for this conversation; `elsewhere`: recorded
    for another one (False with `ours` False: the agent knows it, no conversation here does)."""

    session_id: str
    title: str
    when: float | None
    ours: bool
    elsewhere: bool = False
    current: bool = False


@dataclass(frozen=True, slots=True)
class SessionListing:
    sessions: tuple[ListedSession, ...]
    note: str = ""  # why the agent's list is missing, when it failed
    hidden: tuple[str, ...] = ()  # listed by the agent, not recorded here, not shown (no admin)


async def record_use(
    store: StateStore, key: ConversationKey, session: AcpSession, project: str
) -> None:
    """The conversation uses `session` in `project` now (a new one, a resumed one, one taken up
    again)."""
    client = session.client
    now = time.time()
    try:
        await store.history_record(
            key,
            SessionRecord(
                session.session_id,
                project,
                client.backend.name,
                str(client.runtime.workspace),
                session.state.title,
                now,
                now,
            ),
        )
    except StoreError as exc:  # the list is a convenience: the conversation goes on
        log.warning("could not record session %s for %s: %s", session.session_id, key, exc)


def title_recorder(
    store: StateStore,
    session_id: str,
    spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
) -> Callable[[str], None]:
    """What `SessionState.on_title` calls: the title written in the background (the frame reader
    must not wait on the store)."""

    def on_title(title: str) -> None:
        async def write() -> None:
            try:
                await store.history_title(session_id, title)
            except StoreError as exc:
                log.warning("could not record the title of session %s: %s", session_id, exc)

        spawn(write)

    return on_title


async def gather(
    store: StateStore,
    key: ConversationKey,
    client: AcpClient | None,
    *,
    project: str,
    workspace: Path,
    current: str,
    admin: bool,
) -> SessionListing:
    """The conversation's sessions in `project`, with the agent's list for `workspace` when
    `client` offers one; sessions not recorded here are visible to admins only."""
    recorded = await store.history_of(key, project)
    listed: tuple[AgentSessionInfo, ...] = ()
    note = ""
    if client is not None and client.session_capabilities.list:
        try:
            listed = await client.list_sessions(workspace)
        except AGENT_ERRORS as exc:
            log.warning("could not read the agent's session list: %s", exc)
            note = "The agent's own list of sessions could not be read."
    by_id = {entry.session_id: entry for entry in listed}
    sessions = [_ours(record, by_id.get(record.session_id), current) for record in recorded]
    ours = {record.session_id for record in recorded}
    others = sorted(
        (entry for entry in listed if entry.session_id not in ours),
        key=lambda entry: entry.updated or 0.0,
        reverse=True,
    )
    hidden: tuple[str, ...] = ()
    if admin:
        for entry in others[:MAX_SHOWN]:
            elsewhere = bool(await store.history_owners(entry.session_id))
            sessions.append(
                ListedSession(
                    entry.session_id,
                    entry.title,
                    entry.updated,
                    ours=False,
                    elsewhere=elsewhere,
                    current=entry.session_id == current,
                )
            )
    else:
        hidden = tuple(entry.session_id for entry in others)
    sessions.sort(key=lambda listed: listed.when or 0.0, reverse=True)
    return SessionListing(tuple(sessions), note, hidden)


def _ours(record: SessionRecord, entry: AgentSessionInfo | None, current: str) -> ListedSession:
    when = record.last_used
    if entry is not None and entry.updated is not None:
        when = max(when, entry.updated)
    return ListedSession(
        record.session_id,
        record.title or (entry.title if entry is not None else ""),
        when,
        ours=True,
        current=record.session_id == current,
    )


def find(listing: SessionListing, wanted: str) -> ListedSession | str:
    """The session `wanted` (a full id or an unambiguous prefix) names among those `listing`
    shows, or the one sentence that says why none is picked."""
    wanted = wanted.strip()
    exact = [s for s in listing.sessions if s.session_id == wanted]
    if exact:
        return exact[0]
    matches = [s for s in listing.sessions if s.session_id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        return f"{wanted!r} matches {len(matches)} sessions; type more of the id."
    if any(session_id == wanted or session_id.startswith(wanted) for session_id in listing.hidden):
        return "That session is not one of this conversation's; only an admin can resume it."
    return f"No session of this conversation matches {wanted!r}."


def listing_text(listing: SessionListing, prefix: str, now: float) -> str:
    if not listing.sessions:
        lines = ["This conversation has no earlier agent sessions in this project yet."]
    else:
        shown = listing.sessions[:MAX_SHOWN]
        short = short_ids([s.session_id for s in listing.sessions])
        lines = ["Sessions (most recent first):"]
        for session in shown:
            title = session.title or "untitled"
            marks = []
            if session.current:
                marks.append("current")
            if not session.ours:
                marks.append("another conversation" if session.elsewhere else "not started here")
            mark = f" ({', '.join(marks)})" if marks else ""
            when = when_text(session.when, now)
            lines.append(f"{short[session.session_id]} — {title} — {when}{mark}")
        if any(not s.ours for s in shown):
            lines.append("Sessions not recorded for this conversation are shown to admins only.")
        lines.append(f"Resume one with {prefix}resume ID.")
    if listing.note:
        lines.append(listing.note)
    return "\n".join(lines)


def short_ids(ids: Sequence[str]) -> dict[str, str]:
    """Each id's shortest prefix (at least `SHORT_ID` characters) no other listed id shares."""
    shown: dict[str, str] = {}
    for session_id in ids:
        length = SHORT_ID
        while length < len(session_id) and any(
            other != session_id and other.startswith(session_id[:length]) for other in ids
        ):
            length += 1
        shown[session_id] = session_id[:length]
    return shown


def when_text(moment: float | None, now: float) -> str:
    if moment is None:
        return "time unknown"
    age = max(0.0, now - moment)
    if age < 60:
        return "just now"
    if age < 3600:
        return f"{age // 60:.0f} min ago"
    if age < 86400:
        return f"{age // 3600:.0f} h ago"
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d")
