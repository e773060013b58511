"""A prompt turn's streamed text, kept cheaply however many chunks it arrives in."""

from __future__ import annotations


class GrowingText:
    """A turn's text as it streams in: kept as a few strings, not one per chunk (a long reply
    can be a hundred thousand chunks of a few characters). Every `FANOUT` strings of a level are
    joined into one of the level above, so each character is copied about log(n) times."""

    FANOUT = 64
    __slots__ = ("_chars", "_levels", "visible")

    def __init__(self) -> None:
        self._levels: list[list[str]] = [[]]  # the newest text in level 0; older ones above
        self._chars = 0
        self.visible = False  # some of it is not whitespace

    def append(self, chunk: str) -> None:
        self._chars += len(chunk)
        if not self.visible and chunk.strip():
            self.visible = True
        levels = self._levels
        levels[0].append(chunk)
        level = 0
        while len(levels[level]) >= self.FANOUT:
            joined = "".join(levels[level])
            levels[level].clear()
            if level + 1 == len(levels):
                levels.append([])
            levels[level + 1].append(joined)
            level += 1

    def tail(self, chars: int) -> str:
        """The last `chars` characters."""
        picked: list[str] = []
        needed = chars
        for level in self._levels:
            for part in reversed(level):
                picked.append(part[-needed:])
                needed -= len(picked[-1])
                if needed <= 0:
                    return "".join(reversed(picked))
        return "".join(reversed(picked))

    def __len__(self) -> int:
        return self._chars

    def __bool__(self) -> bool:
        return any(self._levels)

    def __str__(self) -> str:
        return "".join(part for level in reversed(self._levels) for part in level)
