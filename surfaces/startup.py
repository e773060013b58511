"""Start-up retry: the first call a surface makes (who am I, log in) may meet a network that is not
up yet, so it is tried a few times with a growing pause; anything else fails at once.

    me = await retry_start_up(
        lambda: client.auth_test(),
        retry_on=lambda exc: f"cannot reach Slack ({exc!r})" if is_network(exc) else None,
        surface="slack",
    )

`retry_on(exc)` says whether a failure is worth another try: a reason to log (a WARNING naming
the surface) or None to raise it now. After the last attempt the failure is raised as it is,
for the caller to translate (a rejected token into a `ConfigError`, the rest into `SendFailed`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import stamina

__all__ = ["retry_start_up"]

log = logging.getLogger(__name__)

T = TypeVar("T")


async def retry_start_up(
    attempt: Callable[[], Awaitable[T]],
    *,
    retry_on: Callable[[Exception], str | None],
    surface: str,
    attempts: int = 4,
    first_pause: float = 1.0,
    logger: logging.Logger = log,
) -> T:
    """`attempt()` until it succeeds, at most `attempts` times, pausing `first_pause` seconds
    after the first failure and twice as long after each next one."""

    async for trying in stamina.retry_context(
        on=lambda exc: retry_on(exc) is not None,
        attempts=attempts,
        timeout=None,
        wait_initial=first_pause,
        wait_max=first_pause * 2 ** max(0, attempts - 2),
        wait_jitter=0.0,
    ):
        with trying:
            try:
                return await attempt()
            except Exception as exc:
                reason = retry_on(exc)
                if reason is not None and trying.num < attempts:
                    logger.warning("%s: %s; retrying", surface, reason)
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")
