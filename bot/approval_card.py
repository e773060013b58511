"""The approval card's text, and the patch that goes with it.

`approval_prompt` says what the person approves: the tool's title and kind, the command or the
files, and for an edit each file's `path: +12 −4` with the first lines of its change as a fenced
code block. The request's tool already carries what earlier updates said of it (acp merges them
per turn, and reads an edit's change from its content or its input). The card is bounded so that
it fits the smallest message of every surface (`CARD_CHARS`); `fit_card` cuts it further for a
surface whose limit is smaller still.

`send_patch` sends the whole change as a `.diff` file (a unified diff) with the card, where the
surface takes uploads, when the change is longer than `SWITCHBOARD_DIFF_FILE_AFTER` lines: the
card shows only its first lines."""

from __future__ import annotations

import logging
import re

from acp import FileDiff, PermissionRequest
from surfaces.base import ConversationKey, OutgoingFile, Surface
from surfaces.text import ellipsize

log = logging.getLogger(__name__)

# Discord's 2,000 characters are the smallest message of any surface: the card stays under it
# whatever an edit holds, with room for the line that closes it ("Answered: Allow").
CARD_CHARS = 1_800
DIFF_CHARS = 1_000  # every diff's summary and code block together
DIFFS_SHOWN = 3
PREVIEW_LINES = 8
LINE_MAX = 160
PATCH_MAX_BYTES = 5 * 1024 * 1024
DIFF_FILE_AFTER = 40  # SWITCHBOARD_DIFF_FILE_AFTER's default
CLOSING_ROOM = 100  # characters a surface's card keeps for "Answered: ..." below it
_RE_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _clip(line: str) -> str:
    return line if len(line) <= LINE_MAX else line[: LINE_MAX - 1] + "…"


def _diff_lines(diffs: tuple[FileDiff, ...], budget: int) -> list[str]:
    """Each diff's summary and its first lines, fenced, within about `budget` characters: what
    does not fit is left out from the end (a diff past the first few named as "and ...")."""
    lines: list[str] = []
    shown = 0
    for diff in diffs[:DIFFS_SHOWN]:
        summary = "  " + _clip(diff.summary())
        if len(summary) + 1 > budget:
            break
        lines.append(summary)
        shown += 1
        room = budget - len(summary) - 1 - len("```diff\n```\n")
        body: list[str] = []
        for line in diff.preview(PREVIEW_LINES):
            # A line of backticks inside would close the fence early: shown with a space in it.
            line = _clip(line.replace("```", "`` `"))
            if len(line) + 1 > room:
                break
            body.append(line)
            room -= len(line) + 1
        block = ["```diff", *body, "```"] if body else []
        lines.extend(block)
        budget -= len(summary) + 1 + sum(len(line) + 1 for line in block)
    rest = diffs[shown:]
    if rest:
        lines.append("  " + _clip("and " + ", ".join(diff.summary() for diff in rest[:10])))
    return lines


def approval_prompt(request: PermissionRequest) -> str:
    """What the person approves, bounded to `CARD_CHARS` (see the module's docstring)."""
    tool = request.tool
    who = f"Subagent {_clip(request.subagent)}" if request.subagent else "The agent"
    lines = [f"{who} wants to use a tool:", f"  {_clip(tool.title or 'a tool')}"]
    if tool.kind:
        lines[-1] += f" ({tool.kind})"
    described = tool.describe()
    if described != (tool.title or tool.kind or "a tool"):
        detail = described[len(tool.title) :].strip(" ()") if tool.title else described
        if detail:
            lines.append(f"  {_clip(detail)}")
    if tool.locations and not any(loc in "\n".join(lines) for loc in tool.locations):
        lines.append("  files: " + _clip(", ".join(tool.locations)))
    if tool.diffs:
        budget = min(DIFF_CHARS, CARD_CHARS - sum(len(line) + 1 for line in lines))
        lines.extend(_diff_lines(tool.diffs, budget))
    return "\n".join(lines)


def fit_card(prompt: str, surface: Surface) -> str:
    """The card as it fits this surface's message, with room for the line that closes it (a
    fence the cut leaves open is closed)."""
    count = surface.capabilities.count
    limit = max(surface.capabilities.max_chars - CLOSING_ROOM, 40)
    cut = prompt
    while count(cut) > limit and len(cut) > 20:
        cut = ellipsize(cut, max(20, len(cut) - (count(cut) - limit) - 4))
    return cut + "\n```" if cut != prompt and cut.count("```") % 2 else cut


def patch_text(diffs: tuple[FileDiff, ...]) -> str:
    return "".join(diff.patch() for diff in diffs)


def _patch_name(diffs: tuple[FileDiff, ...]) -> str:
    stem = diffs[0].path.rstrip("/").rsplit("/", 1)[-1] if len(diffs) == 1 else "changes"
    stem = _RE_UNSAFE.sub("-", stem).strip("-.")[:60] or "changes"
    return f"{stem}.diff"


async def send_patch(
    surface: Surface, key: ConversationKey, request: PermissionRequest, after_lines: int
) -> None:
    """The whole change as a `.diff` file beside the card, where uploads work and the change is
    longer than `after_lines` lines. A failed upload costs the card nothing: logged."""
    diffs = request.tool.diffs
    max_bytes = surface.capabilities.max_upload_bytes
    if not diffs or max_bytes <= 0:
        return
    if sum(len(diff.lines()) for diff in diffs) <= after_lines:
        return
    data = patch_text(diffs).encode("utf-8", "replace")
    if len(data) > min(max_bytes, PATCH_MAX_BYTES):
        log.info("the patch of %s is too large to upload (%d bytes)", key, len(data))
        return
    caption = ellipsize(", ".join(diff.summary() for diff in diffs), 200)
    try:
        await surface.send_file(key, OutgoingFile(_patch_name(diffs), data, "text/x-diff", caption))
    except Exception:  # the surface: the card is what matters
        log.warning("could not send the patch of the approval in %s", key, exc_info=True)


async def card_with_patch(
    surface: Surface,
    key: ConversationKey,
    request: PermissionRequest,
    prompt: str,
    diff_file_after: int,
) -> str:
    """The card's text as it fits `surface`, its whole patch sent just before it where that is
    due (`send_patch`)."""
    await send_patch(surface, key, request, diff_file_after)
    return fit_card(prompt, surface)
