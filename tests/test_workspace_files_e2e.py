"""The sparse-file attack (issue 21) against `switchboard run` with the Telegram fake: the scripted
agent asks for the line after a 1 GiB line of NULs; Switchboard's peak RSS grows by a few MiB, not
by the gigabyte it used to read, and the person gets the agent's answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import FakeBotApi, People
from tests.harness.process import run_env
from tests.harness.telegram import switchboard_run, telegram_env

pytestmark = pytest.mark.anyio

ALICE = People().alice
GIB = 1024 * 1024 * 1024
GROWTH_BOUND_KIB = 64 * 1024  # reading the whole 1 GiB line could never stay under this


def peak_rss_kib(pid: int) -> int:
    """The process's high-water mark of resident memory (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no VmHWM line")


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        yield fake


async def test_switchboard_run_reads_past_a_one_gib_line_in_a_few_mib(
    tmp_path: Path, workspace: Path, fake_agent: FakeAgent, api: FakeBotApi, cli_env: dict[str, str]
) -> None:
    sparse = workspace / "sparse.log"
    with sparse.open("wb") as file:
        file.truncate(GIB)  # line 1: a gigabyte of NULs, never written to disk
        file.seek(0, 2)
        file.write(b"\nthe second line\n")
    ask = {"path": str(sparse), "line": 2, "limit": 1}
    prompt = script({"request": {"method": "fs/read_text_file", "params": ask}})
    env = cli_env | run_env(fake_agent, workspace) | telegram_env(api, ALICE)
    async with switchboard_run(env, api, tmp_path) as process:
        chat = api.private_chat(ALICE)["id"]
        api.dm(ALICE, "warm up")  # the agent started and one turn done before measuring
        await wait_for(lambda: "Echo: warm up" in api.chat_text(chat), "the first reply", 30)
        before = peak_rss_kib(process.pid)
        api.dm(ALICE, prompt)
        answered = '{"result":{"content":"the second line\\n"}}'
        await wait_for(lambda: answered in api.chat_text(chat), "the read's reply", 60)
        grew = peak_rss_kib(process.pid) - before
    assert grew < GROWTH_BOUND_KIB, f"peak RSS grew by {grew} KiB"
