"""From a platform SDK's exceptions to the surface's (`surfaces.errors`), in one table per SDK.

An adapter lists its SDK's exceptions once, most specific first, each with what it becomes:

    TELEGRAM = ErrorMap([
        (RetryAfter, lambda exc: RateLimited(retry_after(exc.retry_after))),
        (Forbidden, lambda exc: SendFailed(f"Telegram refused: {exc.message}", transient=False)),
        (NetworkError, lambda exc: SendFailed(str(exc), transient=True)),
    ])

and wraps its platform calls: `with TELEGRAM.translated(): ...` or `await TELEGRAM.call(coro)`.
The first row whose type matches decides; an exception no row matches passes unchanged (a bug
shows as one). The translated error is raised `from` the SDK's, so the traceback keeps both.

`retry_after` is the one reader of a platform's "wait this long" however it comes: seconds (a
number or a string), a `timedelta`, or the headers of a response (`Retry-After`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypeVar

from surfaces.errors import SurfaceError

__all__ = ["ErrorMap", "retry_after"]

T = TypeVar("T")

# One row: an SDK exception type and what it becomes (None: not ours, let it pass).
Row = tuple[type[BaseException], Callable[[Any], SurfaceError | None]]


def retry_after(value: object, *, default: float = 1.0) -> float:
    """Seconds to wait, never negative, from seconds, a `timedelta` or response headers (the
    `Retry-After` header, any case); `default` when there is nothing readable."""
    if isinstance(value, Mapping):
        for name, header in value.items():
            if isinstance(name, str) and name.lower() == "retry-after":
                return retry_after(header, default=default)
        return default
    if isinstance(value, timedelta):
        return max(value.total_seconds(), 0.0)
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            return max(float(value), 0.0)
        except ValueError:
            return default
    return default


class ErrorMap:
    """An ordered table from SDK exception types to the surface's errors."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.rows = tuple(rows)

    def translate(self, exc: BaseException) -> SurfaceError | None:
        """What `exc` becomes, or None when no row takes it."""
        for kind, becomes in self.rows:
            if isinstance(exc, kind):
                return becomes(exc)
        return None

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Raise the surface's error for any SDK exception the body raises."""
        try:
            yield
        except SurfaceError:
            raise
        except Exception as exc:
            error = self.translate(exc)
            if error is None:
                raise
            raise error from exc

    async def call(self, call: Awaitable[T]) -> T:
        """Await one platform call, its failures translated."""
        with self.translated():
            return await call
