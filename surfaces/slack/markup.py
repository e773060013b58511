"""Agent Markdown -> Slack mrkdwn (pure).

Slack's mrkdwn is not Markdown: `*bold*`, `_italic_`, `~strike~`, code, fenced blocks, `>` quotes,
`<url|text>` links, no headings and no list syntax. Only `&`, `<` and `>` are escaped (as `&amp;`,
`&lt;`, `&gt;`); once they are, nothing the agent wrote can become a mention (`<!channel>`,
`<!here>`, `<@U…>`) or a link we did not make."""

from __future__ import annotations

from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

from surfaces.text import escape_angle_brackets, unescape_angle_brackets

_PARSER = MarkdownIt("commonmark", {"html": True}).enable(["strikethrough", "table"])
_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def render(markdown: str) -> str:
    """Agent Markdown -> Slack mrkdwn."""
    if not markdown.strip():
        return escape_angle_brackets(markdown)
    tree = SyntaxTreeNode(_PARSER.parse(markdown))
    return _blocks(tree.children, tight=False).strip("\n")


def _blocks(nodes: Sequence[SyntaxTreeNode], *, tight: bool) -> str:
    parts = [_block(node, tight=tight) for node in nodes]
    return ("\n" if tight else "\n\n").join(part for part in parts if part)


def _block(node: SyntaxTreeNode, *, tight: bool) -> str:
    kind = node.type
    if kind == "paragraph":
        return _inline_of(node)
    if kind == "heading":
        return _bold(_inline_of(node, bold=False))
    if kind in ("fence", "code_block"):
        code = node.content.rstrip("\n")
        return f"```\n{escape_angle_brackets(code)}\n```"
    if kind == "blockquote":
        inner = _blocks(node.children, tight=False)
        return "\n".join("> " + line if line else ">" for line in inner.split("\n"))
    if kind in ("bullet_list", "ordered_list"):
        return _list(node)
    if kind == "hr":
        return "──────────"
    if kind == "html_block":
        return escape_angle_brackets(node.content.rstrip("\n"))
    if kind == "table":
        return _table(node)
    return (
        _blocks(node.children, tight=tight)
        if node.children
        else escape_angle_brackets(node.content)
    )


def _list(node: SyntaxTreeNode) -> str:
    ordered = node.type == "ordered_list"
    number = int(node.attrs.get("start", 1) or 1) if ordered else 0
    tight = all(
        child.hidden
        for item in node.children
        for child in item.children
        if child.type == "paragraph"
    )
    items = []
    for item in node.children:
        marker = f"{number}. " if ordered else "• "
        number += 1
        body = _blocks(item.children, tight=tight) or ""
        indent = " " * len(marker)
        lines = body.split("\n")
        items.append(
            marker
            + lines[0]
            + "".join("\n" + (indent + line if line else "") for line in lines[1:])
        )
    return ("\n" if tight else "\n\n").join(items)


def _table(node: SyntaxTreeNode) -> str:
    rows: list[str] = []
    for section in node.children:  # thead, tbody
        for row in section.children:
            cells = [_inline_of(cell) for cell in row.children]
            line = " | ".join(cells)
            rows.append(_bold(line) if section.type == "thead" and line.strip() else line)
    return "\n".join(rows)


def _bold(text: str) -> str:
    return f"*{text}*" if text.strip() else text


def _inline_of(node: SyntaxTreeNode, *, bold: bool = True) -> str:
    inline = node.children[0] if node.children and node.children[0].type == "inline" else None
    if inline is None:
        return escape_angle_brackets(node.content)
    return _inlines(inline.children, bold=bold)


def _inlines(nodes: Sequence[SyntaxTreeNode], *, bold: bool) -> str:
    return "".join(_inline(node, bold=bold) for node in nodes)


def _inline(node: SyntaxTreeNode, *, bold: bool) -> str:
    kind = node.type
    if kind == "text":
        return escape_angle_brackets(node.content)
    if kind in ("softbreak", "hardbreak"):
        return "\n"
    if kind == "code_inline":
        return f"`{escape_angle_brackets(node.content)}`"
    inner = _inlines(node.children, bold=bold)
    if kind == "strong":
        return _wrap("*", inner) if bold else inner
    if kind == "em":
        return _wrap("_", inner)
    if kind == "s":
        return _wrap("~", inner)
    if kind == "link":
        return _link(str(node.attrs.get("href", "")), inner)
    if kind == "image":
        alt = _inlines(node.children, bold=bold) or escape_angle_brackets(
            str(node.attrs.get("alt", ""))
        )
        return _link(str(node.attrs.get("src", "")), alt or "image")
    if kind == "html_inline":
        return escape_angle_brackets(node.content)
    return inner or escape_angle_brackets(node.content)


def _wrap(mark: str, inner: str) -> str:
    """Slack needs the marks against the text: `*bold*`, not `* bold *`."""
    stripped = inner.strip()
    if not stripped:
        return inner
    lead = inner[: len(inner) - len(inner.lstrip())]
    trail = inner[len(inner.rstrip()) :]
    return f"{lead}{mark}{stripped}{mark}{trail}"


def _link(href: str, label: str) -> str:
    if not href.lower().startswith(_SAFE_SCHEMES):
        return label if not href else f"{label} ({escape_angle_brackets(href)})"
    url = escape_angle_brackets(href).replace("|", "%7C")
    if (
        not label
        or unescape_angle_brackets(label) == href
        or unescape_angle_brackets(label) == href.removeprefix("mailto:")
    ):
        return f"<{url}>"
    return f"<{url}|{label.replace('|', '¦')}>"
