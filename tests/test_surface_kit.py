"""The machinery the adapters share: lanes, error mapping, start-up retry, bounded maps, text."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import timedelta
from typing import ClassVar

import anyio
import pytest

from surfaces.bounded import BoundedMap
from surfaces.errors import RateLimited, SendFailed
from surfaces.lanes import Lanes
from surfaces.platform_errors import ErrorMap, retry_after
from surfaces.startup import retry_start_up
from surfaces.text import ellipsize, escape_angle_brackets, unescape_angle_brackets


@pytest.mark.anyio
async def test_lanes_keep_one_conversations_order_and_run_conversations_concurrently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[tuple[str, int]] = []
    release = anyio.Event()

    async def deliver(event: tuple[str, int]) -> None:
        if event == ("a", 1):
            await release.wait()  # "a" is busy; "b" must not wait for it
        if event == ("a", 2):
            raise RuntimeError("one bad event")
        seen.append(event)

    lanes: Lanes[str, tuple[str, int]] = Lanes(deliver, failure="failed in %s")
    assert lanes.put("a", ("a", 0)) is False  # not open yet: dropped
    async with anyio.create_task_group() as tg:
        lanes.open(tg)
        for n in range(1, 4):
            lanes.put("a", ("a", n))
        lanes.put("b", ("b", 1))
        await anyio.sleep(0.01)
        assert seen == [("b", 1)]
        release.set()
    assert seen == [("b", 1), ("a", 1), ("a", 3)]
    assert len(lanes) == 0
    assert any(r.getMessage() == "failed in a" for r in caplog.records)


class _SdkError(Exception):
    pass


class _SdkRateLimit(_SdkError):
    headers: ClassVar[dict[str, str]] = {"retry-after": "2.5"}


def test_an_error_map_takes_the_first_matching_row_and_leaves_unknown_errors_alone() -> None:
    errors = ErrorMap(
        [
            (_SdkRateLimit, lambda exc: RateLimited(retry_after(exc.headers))),
            (_SdkError, lambda exc: SendFailed(str(exc), transient=True)),
        ]
    )
    with pytest.raises(RateLimited) as limited, errors.translated():
        raise _SdkRateLimit()
    assert limited.value.retry_after == 2.5
    assert isinstance(limited.value.__cause__, _SdkRateLimit)
    with pytest.raises(SendFailed), errors.translated():
        raise _SdkError("down")
    with pytest.raises(KeyError), errors.translated():
        raise KeyError("a bug stays a bug")


def test_retry_after_reads_numbers_durations_and_headers() -> None:
    assert retry_after(3) == 3.0
    assert retry_after("1.5") == 1.5
    assert retry_after(timedelta(seconds=4)) == 4.0
    assert retry_after({"Retry-After": "7"}) == 7.0
    assert retry_after({"Retry-After": "soon"}) == 1.0
    assert retry_after({}, default=2.0) == 2.0
    assert retry_after(-5) == 0.0
    assert retry_after(None) == 1.0


@pytest.mark.anyio
async def test_start_up_is_retried_on_what_retry_on_names_and_raises_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    tries: list[int] = []

    async def flaky() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise OSError("network down")
        return "me"

    def retry_on(exc: Exception) -> str | None:
        return f"cannot reach it ({exc})" if isinstance(exc, OSError) else None

    assert await retry_start_up(flaky, retry_on=retry_on, surface="x", first_pause=0.001) == "me"
    assert [r.getMessage() for r in caplog.records] == [
        "x: cannot reach it (network down); retrying"
    ] * 2

    async def refused() -> str:
        raise ValueError("bad token")

    with pytest.raises(ValueError):
        await retry_start_up(refused, retry_on=retry_on, surface="x", first_pause=0.001)

    async def down() -> str:
        raise OSError("still down")

    with pytest.raises(OSError):
        await retry_start_up(down, retry_on=retry_on, surface="x", attempts=2, first_pause=0.001)


def test_a_bounded_map_forgets_the_least_recently_remembered() -> None:
    seen: BoundedMap[str, int] = BoundedMap(2)
    seen.remember("a", 1)
    seen.remember("b", 2)
    seen.remember("a", 3)
    seen.remember("c", 4)
    assert dict(seen) == {"a": 3, "c": 4}


def test_text_helpers() -> None:
    assert ellipsize("short", 10) == "short"
    assert ellipsize("a longer label", 8) == "a longe…"
    assert escape_angle_brackets("<b> & co") == "&lt;b&gt; &amp; co"
    assert unescape_angle_brackets(escape_angle_brackets("<b> & co")) == "<b> & co"


def test_surface_entries_are_found_in_settings_order_without_importing_a_platform_sdk() -> None:
    probe = (
        "import sys; from bot.surface_registry import surface_entries; "
        "print([e.name for e in surface_entries()]); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'telegram', 'slack_sdk', "
        "'slack_bolt', 'discord'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == ["['telegram', 'slack', 'discord', 'dashboard']", "[]"]
