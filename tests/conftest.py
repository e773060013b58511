"""Shared test fixtures: the scripted fake agent (a real subprocess; `FakeAgent` builds its
command line and reads its log, `script()` the prompts that script it) and the real CLI."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.logs import quiet_retry_library
from config import Settings
from tests.fakes.mock_model import MockModelServer
from tests.harness.clock import backend_for

ROOT = Path(__file__).resolve().parent.parent

quiet_retry_library()  # as `switchboard` configures its logging: our retries log their own lines
FAKE_AGENT = ROOT / "tests" / "fakes" / "fake_agent.py"

# Tests that are not about isolation run their agents unsandboxed, as before issue 21: the
# scripted agent logs to pytest's tmp dirs, which a sandbox's private /tmp would hide, and the
# suite's agents read names of their own (FAKE_AGENT_*, the real agents' hermetic XDG_* and
# vendor switches) that the allowlist passes only when listed. Settings built in this process
# get these as their defaults (many tests clear every SWITCHBOARD_* variable first); a CLI run
# gets them in its environment (FAST_ENV). The isolation tests (tests/test_sandbox*.py) set the
# sandbox themselves and check what an agent sees.
AGENT_ENV_NAMES = [
    "FAKE_AGENT_*",
    "XDG_*",
    "IS_SANDBOX",
    "NO_BROWSER",
    "DISABLE_AUTOUPDATER",
    "GEMINI_*",
    "GOOGLE_GEMINI_BASE_URL",
    "OPENCODE_*",
]
AGENT_PINS = {
    "SWITCHBOARD_AGENT_SANDBOX": "off",
    "SWITCHBOARD_AGENT_ENV": ",".join(AGENT_ENV_NAMES),
}


def _pin_agent_defaults() -> None:
    fields = Settings.model_fields
    fields["agent_sandbox"].default = "off"
    fields["agent_env"].default = AGENT_ENV_NAMES
    Settings.model_rebuild(force=True)


_pin_agent_defaults()

# Fast ladders and graces for tests; the production defaults are in config/settings.py.
FAST_ENV = {
    **AGENT_PINS,
    "SWITCHBOARD_RETRY__BASE_DELAY": "0.01",
    "SWITCHBOARD_CANCEL_GRACE": "1",
    "SWITCHBOARD_SHUTDOWN_GRACE": "0.5",
    "SWITCHBOARD_REQUEST_TIMEOUT": "10",
    "SWITCHBOARD_INITIALIZE_TIMEOUT": "10",
    "SWITCHBOARD_HTTP__PORT": "0",  # `switchboard run`'s HTTP server on any free port
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SWITCHBOARD_*, FAKE_AGENT* or SLACK_* (read by slack_sdk) setting of the caller's shell
    leaks into a test."""
    for name in list(os.environ):
        if name.startswith(("SWITCHBOARD_", "FAKE_AGENT", "SLACK_")):
            monkeypatch.delenv(name)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """asyncio, or trio in virtual time for a test marked `tests.harness.clock.virtual_time`."""
    return backend_for(getattr(request, "param", None))


def script(*steps: dict[str, Any]) -> str:
    """A prompt that makes the fake agent run these steps (see tests/fakes/fake_agent.py)."""
    return "SCRIPT:" + json.dumps(list(steps))


# An agent that ignores session/cancel, stdin EOF and SIGTERM, and forks a child: the worst case
# for prompt endings.
STUBBORN = script({"ignore_cancel": True}, {"chunk": "stuck "}, {"hang": True})
STUBBORN_OPTS = ("--fork-child", "--ignore-stdin-eof", "--ignore-sigterm")


def lists_commands(*commands: tuple[str, str]) -> tuple[str, str]:
    """Fake-agent options: right after session/new it lists these (name, description) commands,
    as agents do in an `available_commands_update`."""
    listed = [{"name": name, "description": about} for name, about in commands]
    update = {"sessionUpdate": "available_commands_update", "availableCommands": listed}
    return ("--after-new", json.dumps([{"method": "session/update", "params": {"update": update}}]))


# An agent that has a /compact command of its own (/compact is sent on only to such an agent).
LISTS_COMPACT = lists_commands(("compact", "compact the context"))


def production_graces(env: dict[str, str]) -> dict[str, str]:
    """The environment without the fast test graces: the defaults are what is promised."""
    return {
        k: v
        for k, v in env.items()
        if k not in ("SWITCHBOARD_CANCEL_GRACE", "SWITCHBOARD_SHUTDOWN_GRACE")
    }


@dataclass
class FakeAgent:
    """Builds command lines for the fake agent and reads what it logged."""

    log_path: Path
    state_dir: Path

    def argv(self, *options: str, dialect: str = "kiro") -> list[str]:
        return [
            sys.executable,
            str(FAKE_AGENT),
            "--dialect",
            dialect,
            "--log",
            str(self.log_path),
            "--state-dir",
            str(self.state_dir),
            *options,
        ]

    def command(self, *options: str, dialect: str = "kiro") -> str:
        return shlex.join(self.argv(*options, dialect=dialect))

    def records(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line]

    def frames_in(self, method: str | None = None) -> list[dict[str, Any]]:
        frames = [r["frame"] for r in self.records() if r.get("dir") == "in" and "frame" in r]
        return [f for f in frames if method is None or f.get("method") == method]

    def prompt_texts(self) -> list[str]:
        """The text of every prompt the agent was sent, in order (a prompt's blocks joined)."""
        return [
            "\n".join(block.get("text", "") for block in frame["params"]["prompt"])
            for frame in self.frames_in("session/prompt")
        ]

    def spawns(self) -> int:
        return sum(1 for r in self.records() if r.get("event") == "start")

    def pids(self) -> set[int]:
        pids = set()
        for record in self.records():
            if record.get("event") == "start":
                pids.add(record["pid"])
            if record.get("event") == "child":
                pids.add(record["pid"])
        return pids


@pytest.fixture
def fake_agent(tmp_path: Path) -> FakeAgent:
    state = tmp_path / "agent-state"
    state.mkdir()
    return FakeAgent(log_path=tmp_path / "agent-log.jsonl", state_dir=state)


@pytest.fixture
def reap_agents(fake_agent: FakeAgent) -> Iterator[None]:
    """A SIGKILLed switchboard cannot stop its agent; the agent ends at stdin EOF, and whatever is
    left when a test fails is killed here."""
    yield
    for pid in fake_agent.pids():
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def mock_model() -> Iterator[MockModelServer]:
    """The loopback mock model API the real npm agents are pointed at."""
    with MockModelServer() as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty directory for the agent to work in."""
    path = tmp_path / "workspace"
    path.mkdir()
    return path.resolve()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_chat(
    preset: str,
    argv: list[str],
    workspace: Path,
    lines: list[str] | tuple[str, ...],
    *,
    env: dict[str, str],
    cwd: Path,
    timeout: float,
) -> CliResult:
    """`switchboard chat` on a real agent, fed `lines` on stdin (one turn or command each)."""
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "bot", "chat", "--agent", preset),
            *("--agent-command", shlex.join(argv), "--cwd", str(workspace), "--timeout", "60"),
        ],
        input="".join(line + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SWITCHBOARD_") and not k.startswith("FAKE_AGENT")
    }
    env.update(FAST_ENV)
    env["SWITCHBOARD_STATE"] = str(tmp_path / "state.db")
    yield env


@pytest.fixture
def run_cli(cli_env: dict[str, str], tmp_path: Path):  # type: ignore[no-untyped-def]
    def run(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "bot", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**cli_env, **(env or {})},
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)

    return run


# -- the state store's backends (issue 16): SQLite and a real Redis server ---------------------
from tests.store_backends import backend, redis_server, redis_url  # noqa: E402, F401
