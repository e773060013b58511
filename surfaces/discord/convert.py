"""Pure conversions for Discord: message text -> what the bot is told, the command menu ->
application commands, Markdown -> Discord's dialect, and plain text made safe to show.

Discord renders most of the Markdown models write, so `render` is mostly a passthrough. What it
changes: `__bold__` (underline on Discord) becomes `**bold**`, headings below `###` (not rendered)
become bold lines, `![alt](url)` images become links, pipe tables (not rendered) become code
blocks, and every mention is neutralised. Mentions are defused twice: `allowed_mentions` on every
message stops the ping, and a zero-width space after the `@` stops the highlight and the
`@everyone` banner an agent's text could otherwise show."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from surfaces.text import ELLIPSIS, ellipsize

MAX_CHARS = 2000
THREAD_NAME_CHARS = 80  # Discord allows 100
LABEL_CHARS = 80
DESCRIPTION_CHARS = 100  # of an application command
MAX_BUTTONS = 25  # 5 rows of 5
MAX_URL = 512  # a link button's url, in characters
ZWSP = "\u200b"

# Answered only to the person who asked: they are about this person's view of the conversation.
EPHEMERAL_COMMANDS = frozenset({"status", "help", "model", "sessions"})
# Options of application commands, by name (the engine's menu is (name, description) only).
COMMAND_OPTIONS: dict[str, list[dict[str, Any]]] = {
    "model": [
        {
            "type": 3,  # string
            "name": "id",
            "description": "the model to switch to (leave empty to list them)",
            "required": False,
        }
    ],
    "resume": [
        {
            "type": 3,  # string
            "name": "id",
            "description": "the session to resume (an id, or its start, as /sessions shows)",
            "required": True,
        }
    ],
}
_RE_COMMAND_NAME = re.compile(r"[a-z0-9_-]{1,32}")

# ---- what people typed --------------------------------------------------------------------------


def mention_pattern(user_id: int | str) -> re.Pattern[str]:
    return re.compile(rf"<@!?{re.escape(str(user_id))}>")


def mentions(content: str, user_id: int | str) -> bool:
    return mention_pattern(user_id).search(content) is not None


def strip_mention(content: str, user_id: int | str) -> str:
    """The text without the bot's mentions (`<@id>` or the old `<@!id>`), trimmed."""
    return mention_pattern(user_id).sub(" ", content).strip()


def thread_name(text: str, fallback: str) -> str:
    """A thread title from the first line of the message that opened it."""
    first = " ".join(text.strip().split("\n", 1)[0].split())
    first = re.sub(r"<[@#][!&]?\d+>", "", first).strip() or fallback
    return ellipsize(first, THREAD_NAME_CHARS)


# ---- application commands -----------------------------------------------------------------------


def command_payloads(commands: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The engine's menu as global chat-input commands (`PUT /applications/{id}/commands`)."""
    payloads: list[dict[str, Any]] = []
    for name, description in commands:
        slug = name.lower()
        if not _RE_COMMAND_NAME.fullmatch(slug):
            continue  # Discord would refuse the whole batch
        summary = " ".join(description.split()) or slug
        entry: dict[str, Any] = {
            "type": 1,
            "name": slug,
            "description": ellipsize(summary, DESCRIPTION_CHARS),
        }
        if slug in COMMAND_OPTIONS:
            entry["options"] = COMMAND_OPTIONS[slug]
        payloads.append(entry)
    return payloads[:100]


def command_argument(options: Sequence[tuple[str, object]]) -> str:
    """An application command's option values, as typed after its name."""
    values = [str(value).strip() for _, value in options if value is not None and str(value)]
    return " ".join(value for value in values if value)


def command_text(name: str, options: Sequence[tuple[str, object]]) -> str:
    """An application command as the text the bot parses: `/model gpt-5`."""
    return f"/{name} {command_argument(options)}".rstrip()


def is_ephemeral(name: str) -> bool:
    return name in EPHEMERAL_COMMANDS


# ---- buttons ------------------------------------------------------------------------------------


def button_label(label: str) -> str:
    return ellipsize(" ".join(label.split()) or ELLIPSIS, LABEL_CHARS)


def closed_choice_text(prompt: str, outcome: str) -> str:
    """An approval message once answered: what was asked, then what happened."""
    shown = plain(outcome)
    if prompt:
        shown = f"{prompt}\n\n{shown}"
    return fit(shown)


# ---- text out -----------------------------------------------------------------------------------

_RE_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_RE_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.DOTALL)
_RE_USER_MENTION = re.compile(r"<@([!&]?\d+)>")
_RE_MASS_MENTION = re.compile(r"@(everyone|here)\b")
_RE_DEEP_HEADING = re.compile(r"^ {0,3}#{4,6}\s+(.*?)\s*#*\s*$")
_RE_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
_RE_DOUBLE_UNDERSCORE = re.compile(r"(?<![\w_])__(?=\S)(.+?)(?<=\S)__(?![\w_])")
_RE_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_RE_URL = re.compile(r"https?://\S+")
_RE_ESCAPE = re.compile(r"([\\*_~`|\[\]])")
_RE_LINE_MARK = re.compile(r"^(\s*)(>|#|-#)", re.MULTILINE)


def neutralize_mentions(text: str) -> str:
    """`<@123>`, `<@&123>`, `@everyone` and `@here` shown as text, never as mentions."""
    text = _RE_USER_MENTION.sub(lambda m: f"<@{ZWSP}{m.group(1)}>", text)
    return _RE_MASS_MENTION.sub(lambda m: f"@{ZWSP}{m.group(1)}", text)


def _outside_code_spans(line: str, convert: Callable[[str], str]) -> str:
    parts: list[str] = []
    last = 0
    for span in _RE_CODE_SPAN.finditer(line):
        parts.append(convert(line[last : span.start()]))
        parts.append(span.group(0))
        last = span.end()
    parts.append(convert(line[last:]))
    return "".join(parts)


def _inline(text: str) -> str:
    text = _RE_IMAGE.sub(r"[\1](\2)", text)
    text = _RE_DOUBLE_UNDERSCORE.sub(r"**\1**", text)
    return neutralize_mentions(text)


def _is_table_row(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("|") and stripped.count("|") >= 2


def render(markdown: str) -> str:
    """Model Markdown -> Discord Markdown (see the module docstring)."""
    lines = markdown.split("\n")
    out: list[str] = []
    fence = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = _RE_FENCE.match(line)
        if fence:
            out.append(line)
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                if not line.strip()[len(marker.group(1)) :].strip():
                    fence = ""
            index += 1
            continue
        if marker:
            fence = marker.group(1)
            out.append(line)
            index += 1
            continue
        if (
            _is_table_row(line)
            and index + 1 < len(lines)
            and _RE_TABLE_RULE.match(lines[index + 1])
        ):
            end = index + 2
            while end < len(lines) and _is_table_row(lines[end]):
                end += 1
            out.append("```")
            out.extend(lines[index:end])
            out.append("```")
            index = end
            continue
        heading = _RE_DEEP_HEADING.match(line)
        if heading:
            line = f"**{heading.group(1)}**" if heading.group(1) else ""
        out.append(_outside_code_spans(line, _inline))
        index += 1
    return "\n".join(out)


def _escape_markdown(text: str) -> str:
    parts: list[str] = []
    last = 0
    for url in _RE_URL.finditer(text):  # links stay clickable: no backslashes inside them
        parts.append(_RE_ESCAPE.sub(r"\\\1", text[last : url.start()]))
        parts.append(url.group(0))
        last = url.end()
    parts.append(_RE_ESCAPE.sub(r"\\\1", text[last:]))
    return _RE_LINE_MARK.sub(lambda m: f"{m.group(1)}\\{m.group(2)}", "".join(parts))


def plain(text: str) -> str:
    """Text shown exactly as written: Markdown marks escaped, mentions neutralised."""
    return neutralize_mentions(_escape_markdown(text))


def fit(text: str, limit: int = MAX_CHARS) -> str:
    """At most `limit` characters (a safety net: the bot splits replies before sending), never
    empty (Discord refuses empty messages)."""
    if not text.strip():
        return ELLIPSIS
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    trailing = len(cut) - len(cut.rstrip("\\"))
    if trailing % 2:  # never leave half of an escape at the end
        cut = cut[:-1]
    return cut + ELLIPSIS
