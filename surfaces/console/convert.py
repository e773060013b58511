"""Pure conversions for the terminal: input lines -> events, Markdown -> what a terminal shows."""

from __future__ import annotations

from collections.abc import Sequence

from surfaces.base import STATUS_MARK, Choice
from surfaces.links import links, pressable

PROMPT = "> "  # shown on a terminal when Switchboard waits for input
ANSWER_PROMPT = "answer> "  # instead, when a question waits for the next line (`ask_text`)


def render(markdown: str) -> str:
    """Terminals show Markdown source well enough; only trailing spaces are dropped."""
    return "\n".join(line.rstrip() for line in markdown.splitlines())


def split_status(text: str) -> tuple[str, str]:
    """(answer, status block) of a live reply: the status is its last paragraph, whose first
    line starts with STATUS_MARK (its lines are joined by single newlines)."""
    head, sep, tail = text.rpartition("\n\n")
    if sep and tail.startswith(STATUS_MARK):
        return head.rstrip("\n"), tail[len(STATUS_MARK) :]
    if text.startswith(STATUS_MARK) and "\n\n" not in text:
        return "", text[len(STATUS_MARK) :]
    return text, ""


def link_lines(choices: Sequence[Choice]) -> list[str]:
    """A terminal cannot open a link button: each shows as "label: url" (only `renderable`
    choices are given, so every url here is http(s))."""
    return [f"  {choice.label}: {choice.url}" for choice in links(choices)]


def choice_menu(prompt: str, choices: Sequence[Choice]) -> str:
    """The prompt, its links, then the options a number picks (`pick_choice`)."""
    lines = [prompt, *link_lines(choices)]
    options = pressable(choices)
    lines.extend(f"  {number}) {choice.label}" for number, choice in enumerate(options, 1))
    if options:
        lines.append("Type a number to answer.")
    return "\n".join(lines)


def pick_choice(line: str, choices: Sequence[Choice]) -> Choice | None:
    """The option a typed line selects, if it is one of the offered numbers (links have
    none)."""
    text = line.strip()
    if not text.isdigit():
        return None
    number = int(text)
    options = pressable(choices)
    return options[number - 1] if 1 <= number <= len(options) else None


def declining_choice(choices: Sequence[Choice]) -> Choice | None:
    """The option that says no (the bot styles the reject options "danger"), if there is one."""
    return next((choice for choice in pressable(choices) if choice.style == "danger"), None)


FILE_COMMAND = "/file"
FILE_USAGE = "Usage: /file PATH [caption] (quote a path that has spaces)."


def parse_file_line(line: str) -> tuple[str, str] | None:
    """`/file PATH [caption]` -> (path, caption); ("", "") when the path is missing or its
    quotes do not close; None for any other line."""
    text = line.strip()
    head, _, rest = text.partition(" ")
    if head != FILE_COMMAND:
        return None
    rest = rest.strip()
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        if end < 0:  # the quote does not close
            return "", ""
        return rest[1:end], rest[end + 1 :].strip()
    path, _, caption = rest.partition(" ")
    return path, caption.strip()
