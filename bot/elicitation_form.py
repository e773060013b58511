"""What a person sees of the agent's question (ACP elicitation) and how what they do is read:
pure text and values, no I/O (the broker, bot/elicitation_broker.py, shows and waits).

A form asks its fields one after another, one card each ("Question 1 of 3"); the agent's
message heads every card (whole on the first, one line on the next ones), with whose answer is
wanted. A single choice and a boolean are buttons (a numbered menu on the terminal); any other
field (text, a number, several choices) is the person's next message. Every card offers
Decline and Cancel, and Skip for an optional field; typed, a reply that is only "skip",
"decline" or "cancel" does the same (the terminal has no buttons beside a typed answer).

An optional free-text field that directly follows an optional single choice shown as buttons is
that choice's companion (claude's AskUserQuestion sends each question so: the pick and an
"Other" box): it has no card of its own unless asked for. The choice's card offers it as one more
button, "Other…" (the field's title), so one tap answers the question: an option picked leaves
the companion out, "Other…" leaves the choice out and asks for the text next, Skip leaves both
out. A companion is not counted in "1 of 3". A URL
question is one card: the message, who must open the link, the link as a button, and Done /
Decline / Cancel.

A button's token stands for one of the values below (`OK`, `SKIP`, `DECLINE`, `CANCEL`, or
`VALUE_PREFIX` and the index of a choice), never the value itself: what the person picks is
looked up here, from the card it was offered on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from acp import ElicitationField, ElicitationRequest

__all__ = [
    "CANCEL",
    "DECLINE",
    "MAX_TRIES",
    "OK",
    "OTHER",
    "SKIP",
    "VALUE_PREFIX",
    "Card",
    "Offer",
    "button_value",
    "companion",
    "field_card",
    "typed_action",
    "url_card",
    "url_host",
]

OK = "ok"  # a form without fields sent as it is; a URL opened ("Done")
SKIP = "skip"
OTHER = "other"  # a choice's companion text field asked for instead of an option
DECLINE = "decline"
CANCEL = "cancel"
VALUE_PREFIX = "v:"  # v:<index> of a choice; v:true / v:false for a boolean
MAX_TRIES = 3  # values a field may be given that are not valid before the question is cancelled

MESSAGE_MAX = 1500  # the agent's message on the first card (it is the agent's text: bounded)
HEADLINE_MAX = 120  # the message as one line, on the later cards
DESCRIPTION_MAX = 300
CHOICES_LISTED = 25  # the options of a typed choice listed in the text, numbered
BUTTONS_MAX = 12  # a single choice with more options than this is typed (by number or name)

_TYPED = (SKIP, DECLINE, CANCEL)
_BOOLEAN_LABELS = ((f"{VALUE_PREFIX}true", "Yes"), (f"{VALUE_PREFIX}false", "No"))
_FORMATS = {
    "email": "an email address",
    "uri": "a web address",
    "date": "a date (2026-12-31)",
    "date-time": "a date and time (2026-12-31T18:00)",
}


@dataclass(frozen=True, slots=True)
class Offer:
    """One button: what pressing it stands for, its label and its style."""

    value: str
    label: str
    style: str = "default"


@dataclass(frozen=True, slots=True)
class Card:
    """One card of the question: its text, its buttons, and whether a typed reply answers it."""

    text: str
    offers: tuple[Offer, ...]
    wants_text: bool


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _clipped(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def url_host(url: str) -> str:
    """The host a link goes to, as the card names it (the person sees where before opening)."""
    try:
        return urlsplit(url).hostname or url
    except ValueError:
        return url


def _heading(request: ElicitationRequest, asked: str, first: bool) -> list[str]:
    message = request.message.strip()
    who = f"Subagent {_one_line(request.subagent, HEADLINE_MAX)}" if request.subagent else ""
    lines = [f"{who or 'The agent'} asks {asked}:"]
    if message:
        lines.append(_clipped(message, MESSAGE_MAX) if first else _one_line(message, HEADLINE_MAX))
    return lines


def _hint(field: ElicitationField, buttons: bool) -> list[str]:
    """What kind of reply the field takes, for a field answered by typing."""
    kind = field.kind
    if kind == "choices":
        lines = ["Reply with the numbers of your choices, separated by commas:"]
        listed = field.choices[:CHOICES_LISTED]
        lines.extend(f"  {n}. {_one_line(label, 80)}" for n, (_, label) in enumerate(listed, 1))
        if len(field.choices) > CHOICES_LISTED:
            lines.append(f"  … {len(field.choices) - CHOICES_LISTED} more (reply with their names)")
        return lines
    if kind in ("number", "integer"):
        what = "a whole number" if kind == "integer" else "a number"
        low, high = field.minimum, field.maximum
        if low is not None and high is not None:
            what += f" from {low:g} to {high:g}"
        elif low is not None:
            what += f" of at least {low:g}"
        elif high is not None:
            what += f" of at most {high:g}"
        return [f"Reply with {what}."]
    if kind == "choice":  # too many options for buttons: typed
        lines = ["Reply with the number of your choice:"]
        listed = field.choices[:CHOICES_LISTED]
        lines.extend(f"  {n}. {_one_line(label, 80)}" for n, (_, label) in enumerate(listed, 1))
        if len(field.choices) > CHOICES_LISTED:
            lines.append(f"  … {len(field.choices) - CHOICES_LISTED} more (reply with its name)")
        return lines
    what = _FORMATS.get(field.format, "your answer")
    return [f"Reply with {what}."]


def _typed_words(field: ElicitationField | None) -> str:
    skip = '"skip" to leave it out, ' if field is not None and not field.required else ""
    return f'(Or reply {skip}"decline" to refuse, "cancel" to dismiss the question.)'


def _buttoned_choice(field: ElicitationField) -> bool:
    return field.kind == "choice" and 0 < len(field.choices) <= BUTTONS_MAX


def companion(fields: Sequence[ElicitationField], index: int) -> bool:
    """Field `index` is the companion of the choice before it (see the module's doc): optional
    free text right after an optional single choice shown as buttons."""
    if not 0 < index < len(fields):
        return False
    before, field = fields[index - 1], fields[index]
    return (
        _buttoned_choice(before)
        and not before.required
        and field.kind == "string"
        and not field.required
    )


def _numbering(fields: Sequence[ElicitationField], index: int) -> str:
    """ "Question 2 of 3: " for field `index`, companions not counted (one shares its choice's
    number); "" for a form of one question."""
    shown = [n for n in range(len(fields)) if not companion(fields, n)]
    if len(shown) < 2:
        return ""
    number = sum(1 for n in shown if n <= index)
    return f"Question {number} of {len(shown)}: "


def field_card(
    request: ElicitationRequest,
    index: int,
    asked: str,
    *,
    buttons: bool,
) -> Card:
    """The card for field `index` of a form (a form without fields: one card to send it).
    `asked`: whose answer is wanted, as the card says it ("Ann (or an approver)"). `buttons`:
    the surface shows a choice's buttons beside the conversation, so a typed reply can answer
    the same card (not so on the terminal, whose menu takes the next line)."""
    fields = request.fields
    text = _heading(request, asked, index == 0)
    if not fields:
        send = Offer(OK, "Send", "primary")
        return Card("\n".join(text), (send, *_closing(None)), wants_text=False)
    field = fields[index]
    count = _numbering(fields, index)
    required = "" if field.required else " (optional)"
    text.append(f"{count}{_one_line(field.title or field.name, HEADLINE_MAX)}{required}")
    if field.description:
        text.append(_clipped(field.description, DESCRIPTION_MAX))
    offers: tuple[Offer, ...]
    if field.kind == "boolean":
        offers = tuple(Offer(value, label, "primary") for value, label in _BOOLEAN_LABELS)
        return Card("\n".join(text), (*offers, *_closing(field)), wants_text=False)
    if _buttoned_choice(field):
        offers = tuple(
            Offer(f"{VALUE_PREFIX}{n}", _one_line(label, 60), "primary")
            for n, (_, label) in enumerate(field.choices)
        )
        if companion(fields, index + 1):
            other = fields[index + 1]
            offers += (Offer(OTHER, _one_line(other.title or other.name, 58) + "…"),)
        return Card("\n".join(text), (*offers, *_closing(field)), wants_text=False)
    text.extend(_hint(field, buttons))
    if not buttons:
        text.append(_typed_words(field))
    return Card("\n".join(text), _closing(field) if buttons else (), wants_text=True)


def _closing(field: ElicitationField | None) -> tuple[Offer, ...]:
    """Skip (optional fields), Decline, Cancel. Decline is the first "danger" button: a
    terminal whose input ended answers with it."""
    skip = (Offer(SKIP, "Skip"),) if field is not None and not field.required else ()
    return (*skip, Offer(DECLINE, "Decline", "danger"), Offer(CANCEL, "Cancel"))


def url_card(request: ElicitationRequest, asked: str) -> Card:
    """The one card of a URL question: the message, who must open the link and where it goes;
    the link itself is a button the broker adds (`Choice.url`). Done answers `accept`."""
    host = url_host(request.url)
    text = _heading(request, asked, True)
    text.append(f"Open the link to {host}, then press Done.")
    offers = (Offer(OK, "Done", "primary"), *_closing(None))
    return Card("\n".join(text), offers, wants_text=False)


def typed_action(text: str) -> str | None:
    """A typed reply that is one of the card's words ("skip", "decline", "cancel"), else None."""
    word = text.strip().strip(".!").lower()
    return word if word in _TYPED else None


def button_value(field: ElicitationField | None, value: str) -> Any:
    """The value a pressed button stands for (`VALUE_PREFIX...`) on `field`'s card."""
    choice = value[len(VALUE_PREFIX) :]
    if choice in ("true", "false"):
        return choice == "true"
    assert field is not None
    return field.choices[int(choice)][0]
