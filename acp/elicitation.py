"""ACP elicitation: a question the agent asks a person (`elicitation/create`), as a form of typed
fields or a link to open (an MCP server's sign-in), and the person's answer.

What the agent sent is read by `acp.elicitation_schema` (defensively: every string valid and
capped, bounded counts); `ElicitationField.read` turns what a person typed into the value the
agent's schema asks for, enforcing every bound the schema gives, so the agent is never answered
with a value its own schema refuses."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Final
from urllib.parse import urlsplit

import anyio

ELICITATION_ACCEPT: Final = "accept"
ELICITATION_DECLINE: Final = "decline"
ELICITATION_CANCEL: Final = "cancel"
ELICITATION_ACTIONS: Final = (ELICITATION_ACCEPT, ELICITATION_DECLINE, ELICITATION_CANCEL)

FIELD_KINDS: Final = ("string", "number", "integer", "boolean", "choice", "choices")
FORMATS: Final = ("email", "uri", "date", "date-time")

_YES = frozenset({"yes", "y", "true", "t", "1", "on", "ok"})
_NO = frozenset({"no", "n", "false", "f", "0", "off"})
_RE_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_RE_INTEGER = re.compile(r"^[+-]?[0-9]{1,300}$")
_RE_NUMBER = re.compile(
    r"^[+-]?([0-9]{1,300}([.,][0-9]{0,300})?|[.,][0-9]{1,300})([eE][+-]?[0-9]{1,4})?$"
)
_LISTED_CHOICES = 8  # named in an error sentence; more read as "…"


class ElicitationInvalid(ValueError):
    """What a person typed does not fit the field: `reason` completes the sentence that starts
    with the field's title ("must be a whole number between 0 and 150")."""

    def __init__(self, field: ElicitationField, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field.title} {reason}.")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _range(low: float | None, high: float | None, unit: str = "") -> str:
    unit = f" {unit}" if unit else ""
    if low is not None and high is not None:
        return f" between {_number(low)} and {_number(high)}{unit}"
    if low is not None:
        return f" of at least {_number(low)}{unit}"
    if high is not None:
        return f" of at most {_number(high)}{unit}"
    return ""


@dataclass(frozen=True, slots=True)
class ElicitationField:
    """One field of a form. `kind`: "string" | "number" | "integer" | "boolean" | "choice" (one
    of `choices`) | "choices" (several of them: `min_length` / `max_length` count the items).
    `choices` are (value, label) pairs; `format` is one of `FORMATS` or ""."""

    name: str
    title: str = ""
    description: str = ""
    kind: str = "string"
    required: bool = False
    choices: tuple[tuple[str, str], ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    format: str = ""
    default: Any = None

    def __post_init__(self) -> None:
        if not self.title:
            object.__setattr__(self, "title", self.name)

    def label_of(self, value: Any) -> str:
        """The label of a choice's value (the value itself when it has none)."""
        return next((label for v, label in self.choices if v == value), str(value))

    def read(self, text: str) -> Any:
        """What a person typed -> the value to send, or None for an optional field left empty
        (leave it out of the answer). Raises ElicitationInvalid with one sentence a person can
        act on: numbers parsed, yes/no for a boolean, a choice by its number in the list, its
        value or its label; several choices separated by commas."""
        text = text.strip()
        if not text:
            if self.required:
                raise ElicitationInvalid(self, "is required")
            return None
        readers = {
            "integer": self._read_integer,
            "number": self._read_number,
            "boolean": self._read_boolean,
            "choice": self._choice,
            "choices": self._read_choices,
        }
        return readers.get(self.kind, self._read_string)(text)

    def _read_string(self, text: str) -> str:
        low, high = self.min_length, self.max_length
        if (low is not None and len(text) < low) or (high is not None and len(text) > high):
            raise ElicitationInvalid(self, f"must be{_range(low, high, 'characters')} long")
        if self.format and not _has_format(text, self.format):
            raise ElicitationInvalid(self, _FORMAT_REASONS[self.format])
        return text

    def _bounded(self, value: float, what: str) -> None:
        low, high = self.minimum, self.maximum
        if (low is not None and value < low) or (high is not None and value > high):
            raise ElicitationInvalid(self, f"must be {what}{_range(low, high)}")

    def _read_integer(self, text: str) -> int:
        if not _RE_INTEGER.match(text):
            raise ElicitationInvalid(
                self, f"must be a whole number{_range(self.minimum, self.maximum)}"
            )
        value = int(text)
        self._bounded(value, "a whole number")
        return value

    def _read_number(self, text: str) -> int | float:
        value = float(text.replace(",", ".")) if _RE_NUMBER.match(text) else math.nan
        if not math.isfinite(value):
            raise ElicitationInvalid(self, f"must be a number{_range(self.minimum, self.maximum)}")
        self._bounded(value, "a number")
        return int(value) if value.is_integer() and abs(value) < 2**53 else value

    def _read_boolean(self, text: str) -> bool:
        word = text.lower().rstrip(".!")
        if word in _YES:
            return True
        if word in _NO:
            return False
        raise ElicitationInvalid(self, "must be yes or no")

    def _choice(self, text: str) -> str:
        if text.isdigit() and 1 <= int(text) <= len(self.choices):
            return self.choices[int(text) - 1][0]
        for value, label in self.choices:
            if text == value or text == label:
                return value
        folded = text.casefold()
        for value, label in self.choices:
            if folded in (value.casefold(), label.casefold()):
                return value
        named = ", ".join(label for _, label in self.choices[:_LISTED_CHOICES])
        more = ", …" if len(self.choices) > _LISTED_CHOICES else ""
        raise ElicitationInvalid(self, f"must be one of {named}{more} (or its number)")

    def _read_choices(self, text: str) -> list[str]:
        picked: list[str] = []
        for part in text.split(","):
            if part.strip():
                value = self._choice(part.strip())
                if value not in picked:
                    picked.append(value)
        low, high = self.min_length, self.max_length
        if (low is not None and len(picked) < low) or (high is not None and len(picked) > high):
            raise ElicitationInvalid(self, f"takes a number of choices{_range(low, high)}")
        return picked


_FORMAT_REASONS: Final = {
    "email": "must be an email address",
    "uri": "must be a link such as https://example.com",
    "date": "must be a date such as 2026-12-31",
    "date-time": "must be a date and time such as 2026-12-31T14:30",
}


def _has_format(text: str, fmt: str) -> bool:
    if fmt == "email":
        return bool(_RE_EMAIL.match(text))
    if fmt == "uri":
        parts = urlsplit(text)
        return bool(parts.scheme) and bool(parts.netloc or parts.path) and " " not in text
    try:
        if fmt == "date":
            date.fromisoformat(text)
        elif fmt == "date-time":
            datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class ElicitationRequest:
    """An agent's question. Form mode: `message` and `fields`; URL mode: `message`, `url`
    (http or https only: anything else is declined by acp and never gets here) and
    `elicitation_id`, which the agent's `elicitation/complete` names when it is done.
    `tool_call_id` ties it to a tool call of the turn ("" when it is not)."""

    session_id: str
    mode: str  # "form" | "url"
    message: str
    fields: tuple[ElicitationField, ...] = ()
    url: str = ""
    elicitation_id: str = ""
    tool_call_id: str = ""
    subagent: str = ""  # the title of the turn's subagent that asks ("": the agent itself)


@dataclass(frozen=True, slots=True)
class ElicitationAnswer:
    """The answer: `action` one of `ELICITATION_ACTIONS`; `content` (accept only) maps field
    names to values (str, int, float, bool, or a list of str)."""

    action: str
    content: dict[str, Any] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        """The `elicitation/create` result: only values the schema's types allow are sent."""
        if self.action not in ELICITATION_ACTIONS:
            return {"action": ELICITATION_CANCEL}
        if self.action != ELICITATION_ACCEPT:
            return {"action": self.action}
        content = {
            name: value
            for name, value in self.content.items()
            if isinstance(name, str) and _wire_value(value)
        }
        return {"action": ELICITATION_ACCEPT, "content": content}


def _wire_value(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str | int | bool):
        return True
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


CANCELLED: Final = ElicitationAnswer(ELICITATION_CANCEL)
DECLINED: Final = ElicitationAnswer(ELICITATION_DECLINE)


class PendingElicitation:
    """An elicitation waiting for a person (like `PendingPermission`): `respond` once (later
    answers are ignored); `withdraw` when the agent cancelled its request; `complete` when the
    agent said a URL elicitation is done (`elicitation/complete`), which may come after it was
    answered."""

    def __init__(self, request: ElicitationRequest) -> None:
        self.request = request
        self.withdrawn = False
        self._answer = CANCELLED
        self._answered = anyio.Event()
        self.completed = anyio.Event()

    @property
    def answered(self) -> bool:
        return self._answered.is_set()

    @property
    def answer(self) -> ElicitationAnswer | None:
        """The answer sent (None: not answered yet)."""
        return self._answer if self.answered else None

    def respond(self, answer: ElicitationAnswer) -> None:
        if not self._answered.is_set():
            self._answer = answer
            self._answered.set()

    def withdraw(self) -> None:
        """The agent cancelled its own request (`$/cancel_request`): stop waiting."""
        self.withdrawn = True
        self.respond(CANCELLED)

    def complete(self) -> None:
        self.completed.set()

    @property
    def is_complete(self) -> bool:
        return self.completed.is_set()

    async def wait(self) -> ElicitationAnswer:
        await self._answered.wait()
        return self._answer


class OpenLinks:
    """The URL elicitations an agent asked, by `elicitationId`, for its `elicitation/complete`
    (which may come long after the answer: the person signs in, then the server tells the agent).
    The latest `limit` are kept; an id we do not know is ignored."""

    def __init__(self, limit: int = 32) -> None:
        self.limit = limit
        self._open: dict[str, PendingElicitation] = {}

    def add(self, pending: PendingElicitation) -> None:
        key = pending.request.elicitation_id
        self._open.pop(key, None)
        self._open[key] = pending
        while len(self._open) > self.limit:
            del self._open[next(iter(self._open))]

    def complete(self, params: Any) -> bool:
        """`elicitation/complete`'s params: the elicitation they name marked complete (and
        forgotten); whether it was one of ours."""
        key = params.get("elicitationId") if isinstance(params, dict) else None
        pending = self._open.pop(key, None) if isinstance(key, str) else None
        if pending is None:
            return False
        pending.complete()
        return True
