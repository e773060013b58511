"""Text that is always valid Unicode. Every layer may import `config/`, so this is the one place
that decides what text from outside (a platform, an agent, argv, stdin) may contain:

- a lone UTF-16 surrogate (U+D800..U+DFFF: from a JSON `\\ud800` escape, or an undecodable byte
  that `surrogateescape` kept) becomes U+FFFD; a surrogate pair split over two code points is
  joined into the character it encodes;
- NUL and the other C0 controls except tab, newline and carriage return, DEL and the C1 controls
  are removed: they are invisible, some platforms reject them, and a terminal would act on them;
- noncharacters (U+FDD0..U+FDEF and the last two code points of every plane) become U+FFFD.

Such text can be encoded as UTF-8 or UTF-16 anywhere without raising."""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"

_ASTRAL_PLANES = "".join(
    f"{chr(plane << 16)}-{chr(plane << 16 | 0xFFFD)}" for plane in range(1, 17)
)
# What may stay, as ranges: one negated class scans fast even for astral text.
_RE_NOT_ALLOWED = re.compile(
    f"[^\t\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufdcf\ufdf0-\ufffd{_ASTRAL_PLANES}]"
)
_RE_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def valid_text(text: str) -> str:
    """`text` as valid Unicode (see the module docstring); valid text is returned as it is."""
    # The usual case costs one scan: printable text has no control character, surrogate or
    # noncharacter (categories Cc, Cs, Cn), and the class finds the rest allowed.
    if text.isprintable() or _RE_NOT_ALLOWED.search(text) is None:
        return text
    # UTF-16 with surrogatepass joins split pairs; decoding with "replace" turns what is left
    # of a surrogate into U+FFFD.
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return _RE_NOT_ALLOWED.sub(REPLACEMENT, _RE_CONTROL.sub("", joined))
