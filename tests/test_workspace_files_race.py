"""The symlink race (issue 21): while a thread swaps a directory inside the workspace with a
symlink to a directory outside, thousands of times (`renameat2(RENAME_EXCHANGE)`, atomic), reads
and writes go through the real `fs/*` methods thousands of times, under openat2 and under the
component walk: the secret outside is never read and nothing is ever written outside. Then once
end to end, the scripted agent asking through its `request` step."""

from __future__ import annotations

import ctypes
import os
import platform
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from acp.beneath import Resolution
from acp.workspace_files import ClientRequestRefused, read_text_file, write_text_file
from bot.attachments import save_dated
from bot.outbound_files import _read_inside
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, script

pytestmark = pytest.mark.anyio

_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
OPERATIONS = 2000  # of each kind, per test
SWAPS = 2000  # at least, while they run
SECRET = "SECRET-outside-the-workspace"


class Swapper:
    """Exchanges two names in one atomic step, again and again, on a thread of its own."""

    def __init__(self, one: Path, other: Path) -> None:
        number = _RENAMEAT2.get(platform.machine())
        assert number is not None, f"add renameat2's syscall number for {platform.machine()}"
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        self._args = (
            ctypes.c_long(number),
            ctypes.c_int(_AT_FDCWD),
            ctypes.c_char_p(os.fsencode(one)),
            ctypes.c_int(_AT_FDCWD),
            ctypes.c_char_p(os.fsencode(other)),
            ctypes.c_uint(_RENAME_EXCHANGE),
        )
        self.swaps = 0
        self.failure = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._libc.syscall(*self._args) != 0:
                self.failure = ctypes.get_errno()
                return
            self.swaps += 1

    def __enter__(self) -> Swapper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def race(workspace: Path, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """`box` (a directory inside) and `door` (a symlink to the secret's directory), to swap."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(SECRET, encoding="utf-8")
    (workspace / "box").mkdir()
    (workspace / "box" / "f.txt").write_text("inside", encoding="utf-8")
    target = outside if request.param == "absolute" else Path("../outside")
    (workspace / "door").symlink_to(target, target_is_directory=True)
    yield outside


LINKS = pytest.mark.parametrize("race", ["absolute", "relative"], indirect=True)
HOW = pytest.mark.parametrize("how", [Resolution.OPENAT2, Resolution.WALK], ids=lambda h: h.value)


@LINKS
@HOW
async def test_reads_never_reach_the_secret_while_a_symlink_is_swapped_in(
    workspace: Path, race: Path, how: Resolution
) -> None:
    read, refused = 0, 0
    with Swapper(workspace / "box", workspace / "door") as swapper:
        while read + refused < OPERATIONS or swapper.swaps < SWAPS:
            assert not swapper.failure, os.strerror(swapper.failure)
            for name in ("box", "door"):
                params = {"path": f"{workspace}/{name}/f.txt"}
                try:
                    reply = await read_text_file(workspace, params, how=how)
                except ClientRequestRefused as refusal:
                    assert SECRET not in refusal.reason
                    assert "outside the workspace" in refusal.reason, refusal.reason
                    refused += 1
                else:
                    assert reply == {"content": "inside"}
                    read += 1
    assert read and refused  # both sides of the race were met


@LINKS
@HOW
async def test_writes_never_land_outside_while_a_symlink_is_swapped_in(
    workspace: Path, race: Path, how: Resolution
) -> None:
    written, refused = 0, 0
    with Swapper(workspace / "box", workspace / "door") as swapper:
        while written + refused < OPERATIONS or swapper.swaps < SWAPS:
            assert not swapper.failure, os.strerror(swapper.failure)
            n = written + refused
            for path in (f"box/w{n}.txt", f"door/w{n}.txt", f"box/sub{n % 7}/w{n}.txt"):
                params = {"path": f"{workspace}/{path}", "content": "mine"}
                try:
                    await write_text_file(workspace, params, how=how)
                except ClientRequestRefused as refusal:
                    assert "outside the workspace" in refusal.reason, refusal.reason
                    refused += 1
                else:
                    written += 1
    assert os.listdir(race) == ["f.txt"]
    assert race.joinpath("f.txt").read_text(encoding="utf-8") == SECRET
    assert written and refused


@pytest.mark.parametrize("race", ["absolute"], indirect=True)
async def test_the_agents_own_requests_during_the_race_never_reach_the_secret(
    fake_agent: FakeAgent, workspace: Path, race: Path
) -> None:
    steps = [
        {
            "request": {
                "method": "fs/read_text_file",
                "params": {"path": f"{workspace}/{name}/f.txt"},
            }
        }
        for _ in range(100)
        for name in ("box", "door")
    ]
    with anyio.fail_after(60):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            with Swapper(workspace / "box", workspace / "door") as swapper:
                replies = texts(await collect_turn(session, script(*steps)))
            assert not swapper.failure and swapper.swaps
    answers = [t for t in replies if t.startswith("reply:")]
    assert len(answers) == 200
    assert all(SECRET not in answer for answer in answers)
    assert any('"content":"inside"' in answer for answer in answers)
    assert any("outside the workspace" in answer for answer in answers)


@pytest.mark.parametrize("race", ["absolute", "relative"], indirect=True)
async def test_files_the_agent_hands_back_during_the_race_never_carry_the_secret(
    workspace: Path, race: Path
) -> None:
    """The bot reads the files an agent links after its reply (bot/outbound_files.py) with its
    own rights: the same swap must never make it upload the file outside."""
    read, refused = 0, 0
    with Swapper(workspace / "box", workspace / "door") as swapper:
        while read + refused < OPERATIONS or swapper.swaps < SWAPS:
            assert not swapper.failure, os.strerror(swapper.failure)
            for name in ("box", "door"):
                found = _read_inside(workspace, f"{workspace}/{name}/f.txt", 1000)
                if isinstance(found, bytes):
                    assert found == b"inside"
                    read += 1
                else:
                    assert SECRET not in found and "outside the workspace" in found, found
                    refused += 1
    assert read and refused


@pytest.mark.parametrize("race", ["absolute", "relative"], indirect=True)
async def test_files_people_attach_are_never_saved_outside_during_the_race(
    workspace: Path, race: Path
) -> None:
    """The bot saves a person's attachments into the workspace with its own rights
    (bot/attachments.py `save_dated`): the swapped folder must never take them outside."""
    saved, refused = 0, 0
    with Swapper(workspace / "box", workspace / "door") as swapper:
        while saved + refused < OPERATIONS or swapper.swaps < SWAPS:
            assert not swapper.failure, os.strerror(swapper.failure)
            for name in ("box", "door"):
                try:
                    save_dated(workspace, Path(name), f"a{saved}.txt", b"attached", now=0)
                except OSError as exc:
                    assert "outside the workspace" in str(exc), exc
                    refused += 1
                else:
                    saved += 1
    assert os.listdir(race) == ["f.txt"]  # no folder, no file made outside
    assert saved and refused
