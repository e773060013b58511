"""Garbage-collector settings for a long-running server, applied while `BotApp.serve` runs.

Why: CPython's cyclic collector runs whenever 700 more container objects were allocated than
freed, and every so often walks the whole heap. A bot streaming a thousand conversations holds
a large heap of long-lived state (tasks, reply streams, sessions) and allocates a few objects per
streamed chunk, so with the defaults the collector took about 15% of the CPU and its full
collections stopped the event loop for 200 ms to over a second: every chat's live text froze
meanwhile. Nearly all of that state is freed by reference counting; cycles are rare and small.

So while serving:

- everything that exists once start-up is done (imported modules, settings, the app) is moved
  into the collector's permanent generation with `gc.freeze()`, after one collection so no
  garbage is frozen with it: it is never walked again;
- the youngest generation is collected after `GEN0_THRESHOLD` net allocations rather than 700,
  and the older ones less often, so collections are rare and the rare full one walks only what
  the running conversations hold.

Leaving restores the previous thresholds and unfreezes what was frozen (so a process that serves
more than once, like the test suite, still collects it). Nested or concurrent `serve` calls in
one process share one tuning: the outermost applies and restores it.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

# Net container allocations between two young collections (CPython's default is 700). Big
# enough that a burst of chunks across every conversation triggers few collections; each one
# still only walks objects allocated since the last, which are few once freed by refcount.
GEN0_THRESHOLD = 50_000
# Young collections per middle one, and middle ones per full one (defaults 10 and 10). A full
# collection also waits until a quarter of the long-lived heap is new (CPython's own rule).
GEN1_THRESHOLD = 20
GEN2_THRESHOLD = 100

_depth = 0
_saved: tuple[int, int, int] | None = None


@asynccontextmanager
async def tuned_for_serving() -> AsyncIterator[None]:
    """Apply the server's GC settings for the duration of the block (see the module docstring).
    Asynchronous only so it can share `serve`'s `async with`; it never awaits."""
    global _depth, _saved
    if _depth == 0:
        _saved = gc.get_threshold()
        gc.collect()
        gc.freeze()
        gc.set_threshold(GEN0_THRESHOLD, GEN1_THRESHOLD, GEN2_THRESHOLD)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            gc.unfreeze()
            _saved = None
