"""Split a long Markdown text into messages that each fit a platform's limit.

Breaks are tried in the order that disturbs a reader least: a blank line between paragraphs, a
line break, a space, and only then a hard cut, which never separates a character from the marks,
joiners or surrogate half that belong to it. A break inside a fenced code block closes the fence at
the end of the part and reopens it, with the same info string, at the start of the next, so every
part renders on its own; those added lines are counted against the limit like any other text."""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

# CommonMark: up to three spaces of indent, then three or more backticks or tildes.
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_JOINERS = ("\u200d", "\ufe0e", "\ufe0f")  # zero-width joiner, text/emoji variation selectors


@dataclass(frozen=True, slots=True)
class _Fence:
    opener: str  # the opening line without indent, e.g. "```python": what a continuation repeats
    marker: str  # the backtick or tilde run; the closer repeats it

    @property
    def closer(self) -> str:
        return "\n" + self.marker


@dataclass(frozen=True, slots=True)
class _Line:
    start: int
    end: int  # index of the "\n" that ends the line, or len(text)
    before: _Fence | None  # the fence open when the line starts
    after: _Fence | None  # ... and once the line is complete

    @property
    def is_fence(self) -> bool:
        return self.before != self.after


def _scan(text: str) -> list[_Line]:
    lines: list[_Line] = []
    fence: _Fence | None = None
    start = 0
    while True:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        before = fence
        match = _FENCE.fullmatch(text, start, end)
        if match:
            marker, info = match.group(1), match.group(2)
            if fence is None:
                if not (marker[0] == "`" and "`" in info):  # backticks in the info: inline code
                    fence = _Fence(text[start:end].strip(), marker)
            elif (
                marker[0] == fence.marker[0]
                and len(marker) >= len(fence.marker)
                and not info.strip()
            ):
                fence = None
        lines.append(_Line(start, end, before, fence))
        if end == len(text):
            return lines
        start = end + 1


def _is_safe_cut(text: str, cut: int) -> bool:
    """Whether text[:cut] ends on a whole character (code point plus its marks and joiners)."""
    before, after = text[cut - 1], text[cut]
    if "\ud800" <= before <= "\udbff" or "\udc00" <= after <= "\udfff":  # lone surrogate halves
        return False
    if before == "\u200d" or after in _JOINERS or unicodedata.category(after).startswith("M"):
        return False
    # Emoji skin-tone modifiers and tag characters (subdivision flags) belong to the emoji before.
    if "\U0001f3fb" <= after <= "\U0001f3ff" or "\U000e0020" <= after <= "\U000e007f":
        return False
    # A flag is a pair of regional indicators: never cut after the first of a pair.
    run = 0
    while cut - run > 0 and _is_regional_indicator(text[cut - run - 1]):
        run += 1
    return run % 2 == 0 or not _is_regional_indicator(after)


def _is_regional_indicator(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"


class _Splitter:
    def __init__(self, text: str, max_units: int, count: Callable[[str], int]) -> None:
        self.text = text
        self.max_units = max_units
        self.count = count
        self.lines = _scan(text)
        self.starts = [line.start for line in self.lines]

    def line_at(self, pos: int) -> _Line:
        return self.lines[bisect.bisect_right(self.starts, pos) - 1]

    def fence_at(self, cut: int) -> _Fence | None:
        """The fence open after text[:cut], judging the line the cut falls in as a whole."""
        line = self.line_at(cut)
        return line.after if cut >= line.end else line.before

    def build(self, head: str, start: int, cut: int) -> str:
        fence = self.fence_at(cut)
        # The last part keeps the text as written, even an unclosed fence.
        closer = fence.closer if fence is not None and cut < len(self.text) else ""
        return head + self.text[start:cut] + closer

    def fits(self, head: str, start: int, cut: int) -> bool:
        return self.count(self.build(head, start, cut)) <= self.max_units

    def largest_fit(self, head: str, start: int) -> int:
        """The largest cut whose part fits, or `start` if none does. Gallops, then bisects: a part
        grows with its cut (apart from a closer it may stop needing), and `count` may be slow."""
        low, high, step = start, len(self.text), max(1, self.max_units)
        while low + step < high and self.fits(head, start, low + step):
            low, step = low + step, step * 2
        high = min(high, low + step)
        while high - low > 1:
            middle = (low + high) // 2
            if self.fits(head, start, middle):
                low = middle
            else:
                high = middle
        return low

    def is_good_break(self, head: str, start: int, cut: int) -> bool:
        line = self.line_at(cut)
        if cut < line.end and line.is_fence:
            return False  # a split fence line is no fence at all
        if cut == line.end and line.before is None and line.after is not None:
            return False  # right after an opener: the part would end in an empty code block
        return bool(self.text[start:cut].strip()) and self.fits(head, start, cut)

    @staticmethod
    def break_order(start: int, limit: int) -> list[tuple[str, int]]:
        """(separator, earliest cut) pairs, best first. A break in the second half of the window
        beats a better kind of break near its top, which would leave a stub message; any paragraph
        or line break beats a space, which inside a code block would split a line of code."""
        half = start + (limit - start) // 2
        return [("\n\n", half), ("\n", half), ("\n\n", start + 1), ("\n", start + 1), (" ", half)]

    def choose_cut(self, head: str, start: int, limit: int) -> tuple[int, int]:
        """Where to end this part and where the next one resumes (separators are dropped)."""
        text = self.text
        for separator, least in self.break_order(start, limit):
            cut = text.rfind(separator, start, limit + len(separator))
            while cut >= least:
                while cut > start and text[cut - 1] == separator[0]:
                    cut -= 1  # cut before the whole run of blank lines or spaces
                if cut >= least and self.is_good_break(head, start, cut):
                    resume = cut
                    while resume < len(text) and text[resume] == separator[0]:
                        resume += 1
                    return cut, resume
                cut = text.rfind(separator, start, cut + len(separator) - 1)
        cut = limit
        while cut > start + 1 and not _is_safe_cut(text, cut):
            cut -= 1
        line = self.line_at(cut)
        if cut < line.end and line.is_fence and line.start > start:
            cut = line.start  # keep a fence line whole, in the next part
        return cut, cut

    def split(self) -> list[str]:
        return [self.build(head, start, cut) for head, start, cut, _ in self.spans()]

    def spans(self) -> list[tuple[str, int, int, int]]:
        """Each part as (head, start, cut, resume): it is `build(head, start, cut)`, and the next
        one starts at `resume`."""
        text, parts = self.text, []
        start, reopen = 0, None
        while start < len(text) and text[start:].strip():
            head = reopen.opener + "\n" if reopen is not None else ""
            if self.fits(head, start, len(text)):
                parts.append((head, start, len(text), len(text)))
                break
            limit = self.largest_fit(head, start)
            if limit == start:
                # Not even one character fits beside the fence lines: the limit is unrealistic.
                # Make progress anyway, one character over.
                cut, resume = start + 1, start + 1
            else:
                cut, resume = self.choose_cut(head, start, limit)
            reopen = self.fence_at(cut)
            if reopen is not None and resume < len(text):
                line = self.line_at(resume)
                if line.start == resume and line.before == reopen and line.after is None:
                    # The text resumes at this fence's own closer, which our closer already
                    # stands for: skip it rather than open an empty block.
                    resume, reopen = line.end, None
                    while resume < len(text) and text[resume] == "\n":
                        resume += 1
            parts.append((head, start, cut, resume))
            start = resume
        return parts


def split_message(text: str, max_units: int, count: Callable[[str], int]) -> list[str]:
    """Split `text` into parts with `count(part) <= max_units`, each with balanced code fences.

    An empty text has no parts; a text that fits is returned as is. Only whitespace at a break is
    dropped. If `max_units` cannot hold one character plus a fence's opener and closer, parts go
    over it rather than loop forever."""
    if not text:
        return []
    if count(text) <= max_units:
        return [text]
    return _Splitter(text, max_units, count).split()


def settled_parts(text: str, max_units: int, count: Callable[[str], int]) -> list[str]:
    """The leading parts of `split_message(text, ...)` that no text appended to `text` can change:
    a reply's earlier parts, final while the rest is still being written.

    A part is decided by the text from its start to one separator past the most it can hold
    (`count` counts each character as at least one unit, as code points and UTF-16 both do, so no
    cut lies further) and by whether each line there is a fence line. So it is settled once the
    text reaches past that window, the line still being written cannot turn into a fence line
    (or, being one, into another kind), and the part is not the last; the parts before it being
    settled too, since they fix where it starts and whether it reopens a fence."""
    if not text or count(text) <= max_units:
        return []
    splitter = _Splitter(text, max_units, count)
    writing = splitter.lines[-1]  # the line text appended to would extend
    settled: list[str] = []
    for head, start, cut, resume in splitter.spans()[:-1]:
        reach = max(start + max_units + 2, resume + 1)
        unsure = writing.start < reach and _may_become_fence(text[writing.start :])
        if reach > len(text) or unsure:
            break
        settled.append(splitter.build(head, start, cut))
    return settled


def _may_become_fence(line: str) -> bool:
    """Whether more characters after `line` could make it a fence line, or change its fence."""
    rest = line.lstrip(" ")
    if len(line) - len(rest) > 3:
        return False  # indented code, never a fence
    if not rest:
        return True
    if rest[0] not in "`~":
        return False
    run = len(rest) - len(rest.lstrip(rest[0]))
    return run >= 3 or run == len(rest)
