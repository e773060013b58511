"""Maps an adapter keeps about the platform (aliases it handed out, threads it takes part in,
messages it posted) that must not grow with every chat ever seen: past `limit` entries the
least recently remembered is forgotten, which costs at most a fallback (a press on a very old
button, a thread the bot no longer recognises)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import TypeVar

__all__ = ["BoundedMap"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMap(OrderedDict[K, V]):
    """A dict that forgets its oldest entries past `limit`; `remember` refreshes an entry."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: K, value: V) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)
