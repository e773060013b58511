"""Reading one raw JSON-RPC error `{code, message, data}` against the catalogue
(`acp.error_catalogue`): the error split into the text the patterns match and the text a person
may be shown (`split_error`: redacted, without the provider's request id or the agent's own chat
commands), then the first row that matches (`classify`), else the agent's words quoted as its
own (`unknown`). What it finds is a `Verdict`; `acp.client` builds the `AcpError` from it."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from acp._dispatch import redact_links
from acp.error_catalogue import CATALOGUE, Clue

_RE_ENVELOPE = re.compile(r"^\s*Encountered an error in the response stream:\s*", re.I)
_RE_REQUEST_ID = re.compile(
    r"\s*[\(\[]?\s*request[ _-]?id\s*[:=]\s*([A-Za-z0-9][A-Za-z0-9\-_]{3,})\s*[\)\]]?\.?\s*$", re.I
)
_RE_INTERNAL_PREFIX = re.compile(r"^\s*Internal error:\s*", re.I)
# A chat slash command in quoted provider text (kiro's `/model`, claude's `/upgrade`, `/login`):
# surfaces understand only /compact. A path such as /home/x is not one.
_RE_SLASH_COMMAND = re.compile(r"(?<![\w/.~-])/(?!compact\b)[A-Za-z][\w-]*(?![\w/.])")
_RE_CLAUSE_BREAK = re.compile(r"(\s+·\s+|(?<=[.!?;])\s+)")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The row an error matched (or `unknown`), with what a person is told."""

    kind: str
    transient: bool
    text: str  # what happened; with `advice`, without its final full stop
    model: str = ""
    advice: str = ""  # what to do, when the retries spent are to be told between the two
    code: int | None = None
    request_id: str = ""
    shown: str = ""  # the agent's own words, as a person may read them


@dataclass(frozen=True, slots=True)
class Parts:
    """A raw error as the catalogue reads it: its code, the text the patterns match, the text a
    person may be shown (redacted, without the request id or the agent's own chat commands), and
    the provider's request id."""

    code: int | None
    match_text: str
    shown_text: str
    request_id: str


def split_error(error: dict[str, Any]) -> Parts:
    code = error.get("code") if isinstance(error.get("code"), int) else None
    raw_message = error.get("message")
    message: str = raw_message if isinstance(raw_message, str) else ""
    data = error.get("data")
    match_text: str
    carried = ""  # the text `data` carries, if any
    if isinstance(data, str) and data.strip():
        # kiro: the real text is the data string; match on it alone so a phrase echoed only
        # in `message` cannot flip the verdict.
        match_text = carried = data
    elif isinstance(data, dict) and data:
        match_text = f"{message} {json.dumps(data, ensure_ascii=False)}"
        carried = next(
            (str(data[k]) for k in ("message", "details", "error") if isinstance(data.get(k), str)),
            "",
        )
    else:
        match_text = message
    # `message` leads the shown text unless it is the boilerplate "Internal error" (claude puts
    # its text after "Internal error: ", so that prefix goes and the rest is the text).
    lead = _RE_INTERNAL_PREFIX.sub("", _RE_ENVELOPE.sub("", message.strip())).strip()
    if lead.rstrip(".").lower() == "internal error":
        lead = ""
    shown = _RE_INTERNAL_PREFIX.sub("", _RE_ENVELOPE.sub("", carried.strip())).strip()
    if shown.rstrip(".").lower() == "internal error":
        shown = ""
    if not shown:
        shown = lead
    elif lead and lead.lower() not in shown.lower():
        shown = f"{lead}: {shown}"
    request_id = ""
    found = _RE_REQUEST_ID.search(shown)
    if found:
        request_id = found.group(1)
        shown = shown[: found.start()].rstrip()
    shown = redact_links(shown)
    if _RE_SLASH_COMMAND.search(shown):
        # Drop the clauses that name an agent's own chat command (surfaces understand only
        # /compact); if every clause does, blank the commands out instead.
        pieces = _RE_CLAUSE_BREAK.split(shown)
        kept = ""
        for index in range(0, len(pieces), 2):
            if not _RE_SLASH_COMMAND.search(pieces[index]):
                kept += (pieces[index - 1] if kept else "") + pieces[index]
        shown = kept.strip() or _RE_SLASH_COMMAND.sub("[command removed]", shown)
    return Parts(code, match_text, shown, request_id)


# ---- walking the catalogue ---------------------------------------------------------------
def classify(
    error: dict[str, Any],
    *,
    advertised_models: Sequence[str] | None = None,
    fresh_session: bool = False,
) -> Verdict:
    """Walk `CATALOGUE` for the first row the error matches."""
    parts = split_error(error)
    text, shown = parts.match_text, parts.shown_text
    message = error.get("message")
    for row in CATALOGUE:
        found = row.pattern.search(text)
        if found is None and row.also_in_message and isinstance(message, str):
            found = row.pattern.search(message)
        if found is None and (row.code is None or parts.code != row.code):
            continue
        model = row.model(found) if row.model is not None and found is not None else ""
        if row.when is not None and not row.when(
            Clue(model, shown, advertised_models, fresh_session)
        ):
            continue
        said = f" ({shown})" if shown else ""
        return Verdict(
            row.kind,
            row.transient,
            row.text.format(said=said, shown=shown, model=model),
            model=model,
            advice=row.advice,
            code=parts.code,
            request_id=parts.request_id,
            shown=shown,
        )
    return unknown(error, parts)


_UNKNOWN_ADVICE = "Send the message again; if the error repeats, start a new conversation."


def unknown(error: dict[str, Any], parts: Parts) -> Verdict:
    """Not a class we know: the agent's words are quoted as its own, and not retried."""
    if parts.shown_text:
        what = f'The agent reported an error: "{parts.shown_text}"'
    else:
        shown_error = dict(error)
        if isinstance(error.get("data"), dict):  # coded kinds are for us, not for people
            coded = ("errorKind", "codexErrorInfo")
            shown_error["data"] = {k: v for k, v in error["data"].items() if k not in coded}
        raw = _RE_SLASH_COMMAND.sub(
            "[command removed]", redact_links(json.dumps(shown_error, ensure_ascii=False))
        )[:500]
        what = f"The agent reported an error it did not explain: {raw}"
    return Verdict(
        "unknown",
        False,
        what,
        advice=_UNKNOWN_ADVICE,
        code=parts.code,
        request_id=parts.request_id,
    )


AUTH_KINDS = frozenset({"auth", "auth_rejected"})
# The agent's own words in a sign-in error are quoted when they say more than a label would
# ("Authentication required", "Not logged in"), and at most this long.
_INSTRUCTION_WORDS = 4
_INSTRUCTION_CHARS = 200


def instruction(shown: str) -> str:
    """The agent's own words about signing in, worth quoting: bounded (already redacted and
    without chat commands, see `split_error`)."""
    words = shown.split()
    if len(words) < _INSTRUCTION_WORDS:
        return ""
    text = " ".join(words).replace('"', "'")
    if len(text) > _INSTRUCTION_CHARS:
        text = text[: _INSTRUCTION_CHARS - 1].rstrip() + "…"
    return text
