"""Text helpers every platform needs: shortening to a limit and escaping for markup.

Platforms cap labels, names and notices at different lengths and refuse what is longer, so text
is cut with a visible ellipsis (`ellipsize`). Telegram's HTML and Slack's mrkdwn both treat `&`,
`<` and `>` as markup, so plain text is escaped the same way for both (`escape_angle_brackets`)."""

from __future__ import annotations

__all__ = ["ELLIPSIS", "ellipsize", "escape_angle_brackets", "unescape_angle_brackets"]

ELLIPSIS = "…"


def ellipsize(text: str, limit: int) -> str:
    """`text` if it has at most `limit` characters, else its start and an ellipsis, `limit` in
    all (for limits counted in characters; UTF-16 limits are the adapter's own)."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + ELLIPSIS


def escape_angle_brackets(text: str) -> str:
    """Plain text -> markup that shows exactly that text: `&`, `<` and `>` as entities."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape_angle_brackets(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
