"""Pure conversions for the terminal: input lines -> events, Markdown -> what a terminal shows."""

from __future__ import annotations

from collections.abc import Sequence

from surfaces.base import STATUS_MARK, Choice

PROMPT = "> "  # shown on a terminal when Switchboard waits for input


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


def choice_menu(prompt: str, choices: Sequence[Choice]) -> str:
    lines = [prompt]
    lines.extend(f"  {number}) {choice.label}" for number, choice in enumerate(choices, 1))
    lines.append("Type a number to answer.")
    return "\n".join(lines)


def pick_choice(line: str, choices: Sequence[Choice]) -> Choice | None:
    """The choice a typed line selects, if it is one of the offered numbers."""
    text = line.strip()
    if not text.isdigit():
        return None
    number = int(text)
    return choices[number - 1] if 1 <= number <= len(choices) else None


def declining_choice(choices: Sequence[Choice]) -> Choice | None:
    """The option that says no (the bot styles the reject options "danger"), if there is one."""
    return next((choice for choice in choices if choice.style == "danger"), None)


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
