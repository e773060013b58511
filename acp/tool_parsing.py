"""A tool call as the agent describes it (`tool_call`, `tool_call_update`, a permission request's
`toolCall`) -> `ToolCall`, with the files it changes as `FileDiff`s.

An edit's change arrives in one of two shapes: a `diff` content item (`{type: "diff", path,
oldText?, newText}`, the ACP way), or only in the tool's own input (`rawInput`), as claude's tools
give it: Edit (`file_path`, `old_string`, `new_string`), MultiEdit (`file_path`, `edits: [{
old_string, new_string}]`), Write (`file_path`, `content`: the whole new file). Content items win;
the input is read only when there are none. Everything is read defensively and bounded: a
hostile agent's megabytes of "old text" must not cost difflib minutes on the frame reader's stack,
so each text is cut (`MAX_DIFF_CHARS`, `MAX_DIFF_LINES`) and a call carries at most `MAX_DIFFS`."""

from __future__ import annotations

from typing import Any

from acp.types import FileDiff, ToolCall
from config import valid_text

MAX_DIFFS = 20  # files one tool call may show as changed
MAX_DIFF_CHARS = 200_000  # per side of one file's change
MAX_DIFF_LINES = 2_000  # per side: difflib's cost grows with the product of both sides
MAX_EDITS = 50  # the edits of one MultiEdit read
MAX_PATH = 1024

_PATH_KEYS = ("file_path", "path", "filePath", "notebook_path")
_OLD_KEYS = ("old_string", "oldText", "old_str", "old_text")
_NEW_KEYS = ("new_string", "newText", "new_str", "new_text")


def valid_strings(value: Any) -> Any:
    """A JSON value with every string in it made valid Unicode (tool inputs are shown)."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {valid_text(str(k)): valid_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [valid_strings(item) for item in value]
    return value


def parse_tool(update: dict[str, Any]) -> ToolCall | None:
    tool_call_id = update.get("toolCallId")
    if not isinstance(tool_call_id, str):
        return None
    locations = []
    for location in update.get("locations") or ():
        if isinstance(location, dict) and isinstance(location.get("path"), str):
            locations.append(valid_text(location["path"]))
    raw_input = valid_strings(update.get("rawInput"))
    return ToolCall(
        tool_call_id=tool_call_id,
        title=valid_text(str(update.get("title") or "")),
        kind=valid_text(str(update.get("kind") or "")),
        status=str(update.get("status") or ""),
        raw_input=raw_input,
        locations=tuple(locations),
        diffs=content_diffs(update.get("content")) or input_diffs(raw_input, update.get("kind")),
    )


def _text(value: Any) -> str | None:
    """One side of a change, bounded; None when it is not text."""
    if not isinstance(value, str):
        return None
    text = valid_text(value[:MAX_DIFF_CHARS])
    if text.count("\n") >= MAX_DIFF_LINES:
        text = "\n".join(text.split("\n", MAX_DIFF_LINES)[:MAX_DIFF_LINES])
    return text


def _path(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return valid_text(value[:MAX_PATH])


def content_diffs(content: Any) -> tuple[FileDiff, ...]:
    """The `diff` items of a tool call's content."""
    diffs: list[FileDiff] = []
    for item in content if isinstance(content, list) else ():
        if len(diffs) >= MAX_DIFFS:
            break
        if not isinstance(item, dict) or item.get("type") != "diff":
            continue
        path, new = _path(item.get("path")), _text(item.get("newText"))
        if path is not None and new is not None:
            diffs.append(FileDiff(path, _text(item.get("oldText")), new))
    return tuple(diffs)


def _first(raw: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((raw[key] for key in keys if key in raw), None)


def input_diffs(raw: Any, kind: Any = "edit") -> tuple[FileDiff, ...]:
    """An edit's change as its input gives it (claude's Edit, MultiEdit, Write and the like); a
    whole file's `content` counts only for an `edit` kind (a tool's input named so may be
    anything else)."""
    if not isinstance(raw, dict):
        return ()
    path = _path(_first(raw, _PATH_KEYS))
    if path is None:
        return ()
    edits = raw.get("edits")
    if isinstance(edits, list):
        olds, news = [], []
        for edit in edits[:MAX_EDITS]:
            if isinstance(edit, dict):
                old, new = _text(_first(edit, _OLD_KEYS)), _text(_first(edit, _NEW_KEYS))
                if old is not None and new is not None:
                    olds.append(old)
                    news.append(new)
        if not news:
            return ()
        # the edits as one change: what the card counts and shows is the sum of them
        return (FileDiff(path, _text("\n".join(olds)), _text("\n".join(news)) or ""),)
    old, new = _text(_first(raw, _OLD_KEYS)), _text(_first(raw, _NEW_KEYS))
    if old is not None and new is not None:
        return (FileDiff(path, old, new),)
    content = _text(raw.get("content"))
    if content is not None and kind == "edit":
        return (FileDiff(path, None, content),)  # a whole file written
    return ()
