"""Pure conversions for the dashboard: Markdown -> safe HTML, the refusal card, and the frames a
browser sends, read as hostile.

Safety of what the page shows rests here: the agent's text reaches the browser only as HTML this
module produced. markdown-it runs with raw HTML off (a `<script>` in the text is escaped to
`&lt;script&gt;`), its link check refuses `javascript:`, `vbscript:`, `file:` and `data:` links,
and the page's Content-Security-Policy (page.py) forbids inline script and foreign images on top.
Plain text (the live reply, notices) is escaped, never parsed.

A link button (a `Choice` with a url) travels to the page as its label and url only, never a
token (`button_frame`), and only with an http(s) url (`surfaces.links`); the page makes it an
`<a>` that opens a new tab with `rel="noopener noreferrer"`, as the text's links do.

A refusal is one card: the bot ends a refused turn with the paragraph `refusal_card_text` builds,
whose first line is always `REFUSAL_LEAD`; the paragraph that starts with it is rendered as
`<div class="refusal" data-testid="refusal">`, one line per field."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from surfaces.base import STATUS_MARK, Choice

__all__ = [
    "MAX_FRAME_TEXT",
    "REFUSAL_LEAD",
    "BrowserFrame",
    "FrameRefused",
    "button_frame",
    "parse_frame",
    "plain_html",
    "render",
]

# The lead line of bot.notices.refusal_card_text (tests/test_dashboard.py keeps the two equal).
REFUSAL_LEAD = "The model declined to answer this request."
MAX_FRAME_TEXT = 16_000  # characters a person may send in one message
_MAX_ID = 64

_PARSER = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["strikethrough", "table"]
)


def _fence(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    """A code block with a copy button (the page's script copies the block's text)."""
    inner = RendererHTML.fence(self, tokens, idx, options, env)
    return (
        '<div class="code"><button type="button" class="copy" data-testid="copy">Copy</button>'
        f"{inner}</div>\n"
    )


def _link_open(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    tokens[idx].attrSet("target", "_blank")
    return self.renderToken(tokens, idx, options, env)


_PARSER.add_render_rule("fence", _fence)
_PARSER.add_render_rule("code_block", _fence)
_PARSER.add_render_rule("link_open", _link_open)


def button_frame(choice: Choice) -> dict[str, str]:
    """A button as the page reads it: a link opens its url (no token to press back); any other
    comes back as its token."""
    if choice.url:
        return {"label": choice.label, "style": choice.style, "url": choice.url}
    return {"token": choice.token, "label": choice.label, "style": choice.style}


def plain_html(text: str) -> str:
    """Plain text shown exactly as it is (the page keeps its line breaks)."""
    return f'<div class="plain">{html.escape(text)}</div>' if text else ""


def _refusal_card(paragraph: str) -> str:
    lines = "".join(f"<p>{html.escape(line)}</p>" for line in paragraph.splitlines() if line)
    return f'<div class="refusal" data-testid="refusal">{lines}</div>\n'


def _status(line: str) -> str:
    return f'<p class="status">{html.escape(line)}</p>\n'


def render(markdown: str) -> str:
    """Model Markdown -> HTML safe to put into the page; the refusal card and the live status
    line kept out of Markdown (they are the bot's plain sentences)."""
    out: list[str] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            out.append(_PARSER.render("\n\n".join(pending)))
            pending.clear()

    for paragraph in _paragraphs(markdown):
        if paragraph.startswith(REFUSAL_LEAD):
            flush()
            out.append(_refusal_card(paragraph))
        elif paragraph.startswith(STATUS_MARK) and "\n" not in paragraph:
            flush()
            out.append(_status(paragraph))
        else:
            pending.append(paragraph)
    flush()
    return "".join(out)


def _paragraphs(markdown: str) -> list[str]:
    """Blank-line separated blocks, a fenced code block never cut (its blank lines are its own)."""
    blocks: list[str] = []
    current: list[str] = []
    fence = ""
    for line in markdown.split("\n"):
        stripped = line.lstrip()
        if fence:
            current.append(line)
            if stripped.startswith(fence):
                fence = ""
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            current.append(line)
            continue
        if not line.strip():
            if current:
                blocks.append("\n".join(current))
                current = []
            continue
        current.append(line)
    if current:
        blocks.append("\n".join(current))
    return blocks


# ---- frames from the browser ------------------------------------------------------------------
class FrameRefused(ValueError):
    """A frame from the browser this surface will not act on; `reason` says why, for the log."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"Refused a dashboard frame: {reason}")


@dataclass(frozen=True, slots=True)
class BrowserFrame:
    """One checked frame: `send` (text into tab), `press` (a button's token in tab), `new_tab`."""

    type: str
    tab: str = ""
    text: str = ""
    token: str = ""


def _field(data: Mapping[str, Any], name: str, limit: int) -> str:
    value = data.get(name, "")
    if not isinstance(value, str):
        raise FrameRefused(f"{name} is not a string")
    if len(value) > limit:
        raise FrameRefused(f"{name} is longer than {limit} characters")
    return value


def _identifier(data: Mapping[str, Any], name: str) -> str:
    value = _field(data, name, _MAX_ID)
    if not value or not all(ch.isalnum() or ch in "-_" for ch in value):
        raise FrameRefused(f"{name} is not an identifier")
    return value


def parse_frame(data: object) -> BrowserFrame:
    """A decoded JSON frame -> a `BrowserFrame`, or `FrameRefused`."""
    if not isinstance(data, dict):
        raise FrameRefused("not a JSON object")
    kind = data.get("type")
    if kind == "send":
        text = _field(data, "text", MAX_FRAME_TEXT)
        if not text.strip():
            raise FrameRefused("empty message")
        return BrowserFrame("send", tab=_identifier(data, "tab"), text=text)
    if kind == "press":
        token = _field(data, "token", 128)
        if not token:
            raise FrameRefused("empty token")
        # only a token this surface showed in that tab is acted on (the adapter checks)
        return BrowserFrame("press", tab=_identifier(data, "tab"), token=token)
    if kind == "new_tab":
        return BrowserFrame("new_tab")
    raise FrameRefused("unknown frame type")
