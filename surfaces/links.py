"""Link buttons: a `Choice` with a `url` opens that page instead of coming back as a press.

A url reaches a button from the agent (an elicitation's sign-in page, a link in a tool's
output), so an adapter renders only what a browser opens as a web page: an absolute `http` or
`https` url with a host, no whitespace or control characters, within the platform's own length
limit (Discord takes 512 characters, Slack 3,000). Anything else (`javascript:`, `data:`,
`file:`, `tg://`) is dropped, never shown as a button nor as a pressable one, and logged at
debug by its scheme only (a sign-in url may carry a secret)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import urlsplit

from surfaces.base import Choice

__all__ = ["is_web_url", "links", "pressable", "renderable"]

log = logging.getLogger(__name__)

WEB_SCHEMES = frozenset({"http", "https"})


def is_web_url(url: str, max_chars: int = 0) -> bool:
    """An absolute http(s) url with a host, nothing a browser would read otherwise, within
    `max_chars` characters (0: no limit)."""
    if not url or (max_chars and len(url) > max_chars):
        return False
    if any(char.isspace() or ord(char) < 0x20 or ord(char) == 0x7F for char in url):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:  # an unbalanced IPv6 bracket
        return False
    return parts.scheme.lower() in WEB_SCHEMES and bool(parts.hostname)


def renderable(choices: Sequence[Choice], *, surface: str, max_url: int = 0) -> list[Choice]:
    """The choices an adapter shows, in order: every pressable one, and each link whose url is
    a web url (`is_web_url`, within `max_url`); the other links dropped."""
    shown = []
    for choice in choices:
        if choice.url and not is_web_url(choice.url, max_url):
            scheme = choice.url.partition(":")[0][:16] if ":" in choice.url else "(none)"
            log.debug("%s: a link button with a %r url is not shown", surface, scheme)
            continue
        shown.append(choice)
    return shown


def links(choices: Sequence[Choice]) -> list[Choice]:
    """The link buttons among `choices` (already `renderable`)."""
    return [choice for choice in choices if choice.url]


def pressable(choices: Sequence[Choice]) -> list[Choice]:
    """The buttons among `choices` that come back as presses (no url)."""
    return [choice for choice in choices if not choice.url]
