"""Markdown -> the HTML subset Telegram accepts, and that HTML -> plain text for the fallback
(pure)."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from surfaces.text import escape_angle_brackets

_LINK_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_RE_LANGUAGE = re.compile(r"[^\w+#.-]")

_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["strikethrough", "table"])


def _attribute(text: str) -> str:
    return escape_angle_brackets(text).replace('"', "&quot;")


def markdown_to_html(markdown: str) -> str:
    """Model Markdown -> Telegram's HTML subset (b, i, s, code, pre, a, blockquote), tags always
    balanced; headings become bold lines, lists bullets or numbers, tables aligned text."""
    renderer = _HtmlRenderer()
    renderer.blocks(_PARSER.parse(markdown))
    return "".join(renderer.out).strip("\n")


def html_to_plain(text: str) -> str:
    """The fallback when Telegram rejects the markup: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]*>", "", text))


class _HtmlRenderer:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.lists: list[list[Any]] = []  # [ordered, next number] per open list
        self.quotes = 0
        self.fresh = True  # a block may start here without a separator

    def _open_block(self) -> None:
        if not self.fresh:
            self.out.append("\n" if self.lists else "\n\n")
        self.fresh = False

    def blocks(self, tokens: Sequence[Token]) -> None:
        index = 0
        while index < len(tokens):
            token = tokens[index]
            kind = token.type
            if kind in ("paragraph_open", "html_block"):
                self._open_block()
                if kind == "html_block":
                    self.out.append(escape_angle_brackets(token.content.rstrip("\n")))
            elif kind == "heading_open":
                self._open_block()
                self.out.append("<b>")
            elif kind == "heading_close":
                self.out.append("</b>")
            elif kind == "inline":
                self.inline(token.children or [])
            elif kind in ("bullet_list_open", "ordered_list_open"):
                self._open_block()
                self.fresh = True
                start = token.attrGet("start")
                self.lists.append([kind == "ordered_list_open", int(start) if start else 1])
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
            elif kind == "list_item_open":
                self._open_block()
                ordered, number = self.lists[-1]
                indent = "   " * (len(self.lists) - 1)
                if ordered:
                    self.out.append(f"{indent}{number}. ")
                    self.lists[-1][1] = number + 1
                else:
                    self.out.append(indent + ("• " if len(self.lists) == 1 else "◦ "))
                self.fresh = True
            elif kind == "blockquote_open":
                self._open_block()
                if self.quotes == 0:  # Telegram does not nest quotes
                    self.out.append("<blockquote>")
                self.quotes += 1
                self.fresh = True
            elif kind == "blockquote_close":
                self.quotes -= 1
                if self.quotes == 0:
                    self.out.append("</blockquote>")
            elif kind in ("fence", "code_block"):
                self._open_block()
                self._code_block(token)
            elif kind == "hr":
                self._open_block()
                self.out.append("──────────")
            elif kind == "table_open":
                index = self._table(tokens, index)
            index += 1

    def _code_block(self, token: Token) -> None:
        code = escape_angle_brackets(token.content.rstrip("\n"))
        if self.quotes:  # no pre inside a quote
            self.out.append(code)
            return
        language = _RE_LANGUAGE.sub("", token.info.split()[0]) if token.info.strip() else ""
        if language:
            self.out.append(f'<pre><code class="language-{language}">{code}</code></pre>')
        else:
            self.out.append(f"<pre>{code}</pre>")

    def _table(self, tokens: Sequence[Token], index: int) -> int:
        """A table as aligned columns of plain text; returns the index of table_close."""
        rows: list[list[str]] = []
        while tokens[index].type != "table_close":
            token = tokens[index]
            if token.type == "tr_open":
                rows.append([])
            elif token.type == "inline" and rows:
                rows[-1].append(_plain_inline(token.children or []))
            index += 1
        widths = [
            max(len(row[col]) for row in rows if col < len(row))
            for col in range(max(map(len, rows), default=0))
        ]
        lines = [
            " | ".join(cell.ljust(widths[col]) for col, cell in enumerate(row)).rstrip()
            for row in rows
        ]
        if len(lines) > 1:
            lines.insert(1, "-+-".join("-" * width for width in widths))
        self._open_block()
        text = escape_angle_brackets("\n".join(lines))
        self.out.append(text if self.quotes else f"<pre>{text}</pre>")
        return index

    def inline(self, children: Sequence[Token]) -> None:
        links: list[bool] = []
        for token in children:
            kind = token.type
            if kind == "text" or kind == "html_inline":
                self.out.append(escape_angle_brackets(token.content))
            elif kind in ("softbreak", "hardbreak"):
                self.out.append("\n")
            elif kind == "code_inline":
                self.out.append(f"<code>{escape_angle_brackets(token.content)}</code>")
            elif kind in _INLINE_TAGS:
                self.out.append(_INLINE_TAGS[kind])
            elif kind == "link_open":
                href = str(token.attrGet("href") or "")
                linked = href.lower().startswith(_LINK_SCHEMES)
                if linked:
                    self.out.append(f'<a href="{_attribute(href)}">')
                links.append(linked)
            elif kind == "link_close":
                if links and links.pop():
                    self.out.append("</a>")
            elif kind == "image":
                src = str(token.attrGet("src") or "")
                alt = token.content or src
                if src.lower().startswith(_LINK_SCHEMES):
                    self.out.append(f'<a href="{_attribute(src)}">{escape_angle_brackets(alt)}</a>')
                else:
                    self.out.append(escape_angle_brackets(alt))
            elif token.content:
                self.out.append(escape_angle_brackets(token.content))


_INLINE_TAGS = {
    "strong_open": "<b>",
    "strong_close": "</b>",
    "em_open": "<i>",
    "em_close": "</i>",
    "s_open": "<s>",
    "s_close": "</s>",
}


def _plain_inline(children: Sequence[Token]) -> str:
    parts = []
    for token in children:
        if token.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif token.type in ("text", "code_inline", "html_inline", "image"):
            parts.append(token.content)
    return "".join(parts).strip()
