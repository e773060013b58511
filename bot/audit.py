"""The audit log: every tool approval (who asked, who answered, the tool, the outcome), every answer
to the agent's questions (who asked, who answered, the question's message, the action), every admin
action (`/project bind`, `/project bindchat`, resuming another conversation's session) and every
refused access (a stranger, a wrong role, a project refused). Each record goes to the state store,
kept `SWITCHBOARD_AUDIT_DAYS` days, and out as one JSON log line on the `switchboard.audit`
logger, which logs at info whatever `SWITCHBOARD_LOG_LEVEL` says: an operator who turned the
log down still has the trail.

What a record holds is chosen here, not by the callers' wording: user ids yes (it is an audit
log), the tool's title and kind, the agent's question (its message, clipped), project names,
outcomes; never message text a person wrote, never a value typed or picked, never a token."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

from bot.store import AuditRecord, AuditStore, StoreError

log = logging.getLogger("switchboard.audit")
log.setLevel(logging.INFO)

APPROVAL: Final = "approval"
ADMIN: Final = "admin"
REFUSED: Final = "refused"
ELICITATION: Final = "elicitation"

DAY = 86400.0
_DETAIL_MAX = 200  # a tool's title is the agent's text: bounded, one line


def _clean(value: str) -> str:
    line = " ".join(str(value).split())
    return line if len(line) <= _DETAIL_MAX else line[: _DETAIL_MAX - 1] + "…"


class AuditLog:
    """Writes audit records (`record`, or the three shorthands). A store that cannot take one
    does not undo or stop the action audited: the JSON line is out already, and a warning says
    the store missed it."""

    def __init__(
        self, store: AuditStore, *, keep_days: float, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.keep = keep_days * DAY
        self._clock = clock

    async def record(
        self, kind: str, surface: str, actor: str, action: str, **details: str
    ) -> AuditRecord:
        entry = AuditRecord(
            self._clock(),
            kind,
            surface,
            actor,
            action,
            {name: _clean(value) for name, value in details.items() if value != ""},
        )
        log.info("%s", json.dumps(entry.as_json(), ensure_ascii=False, sort_keys=True))
        try:
            await self.store.audit_put(entry, self.keep)
        except StoreError as exc:
            log.warning("the audit record was not stored: %s", exc)
        return entry

    async def approval(
        self, surface: str, *, requester: str, answerer: str, tool: str, outcome: str
    ) -> None:
        await self.record(
            APPROVAL, surface, answerer, "approval", requester=requester, tool=tool, outcome=outcome
        )

    async def elicitation(
        self, surface: str, *, requester: str, answerer: str, question: str, mode: str, outcome: str
    ) -> None:
        """The end of one of the agent's questions: `outcome` is the action sent (accept,
        decline, cancel) or why it ended without one; what was answered is never kept."""
        await self.record(
            ELICITATION,
            surface,
            answerer,
            "question",
            requester=requester,
            question=question,
            mode=mode,
            outcome=outcome,
        )

    async def admin(self, surface: str, actor: str, action: str, **details: str) -> None:
        await self.record(ADMIN, surface, actor, action, **details)

    async def refused(self, surface: str, actor: str, action: str, **details: str) -> None:
        await self.record(REFUSED, surface, actor, action, **details)


class BadSince(ValueError):
    """`switchboard audit --since` got neither a date nor a duration."""

    def __init__(self, given: str) -> None:
        self.given = given
        super().__init__(
            f"--since {given!r} is neither a date (2026-12-01, 2026-12-01T08:00) nor a "
            "duration (30m, 2h, 7d)"
        )


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}


def parse_since(given: str, now: float) -> float:
    """`--since`'s value as epoch seconds: an ISO date or time (UTC unless it names a zone), or
    a duration back from `now` (`90s`, `30m`, `2h`, `7d`, `2w`)."""
    text = given.strip()
    unit = _UNITS.get(text[-1:].lower())
    if unit is not None:
        try:
            amount = float(text[:-1])
        except ValueError:
            raise BadSince(given) from None
        if amount < 0 or amount != amount:  # negative or NaN
            raise BadSince(given)
        return now - amount * unit
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadSince(given) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def as_line(record: AuditRecord) -> str:
    """One record as the JSON line `switchboard audit` prints (`at` also as an ISO time)."""
    data = record.as_json()
    data["time"] = datetime.fromtimestamp(record.at, UTC).isoformat()
    return json.dumps(data, ensure_ascii=False, sort_keys=True)
