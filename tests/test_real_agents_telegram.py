"""The two real agents of issue 22 through a chat surface: Qwen Code and GitHub Copilot CLI (see
tests/test_real_agents_qwen_copilot.py for the same classes through the CLI), offline against the
loopback mock model, served by `switchboard run` with the real python-telegram-bot against the
fake Bot API (tests/fakes/telegram_api.py).

These agents are slow to start, so each test is one `switchboard run` that one person talks to in
a DM, class after class: a reply from the mock model; an approval card whose buttons are the
agent's own choices and whose text names the command, the tool running only after the requester
presses allow (the marker file the command writes); `/new` answered; a reject press leaving the
tool unrun; and for Copilot its `/allow-all on` refused in one sentence with the next tool still
asking. `bash tests/fakes/install_agents.sh` installs the agents; with
SWITCHBOARD_REQUIRE_REAL_AGENTS=1 a missing install fails instead of skipping."""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import AGENT_ENV_NAMES
from tests.engine_helpers import wait_for
from tests.fakes import real_agents, real_agents_qwen_copilot
from tests.fakes.mock_model import (
    MOCK_TEXT,
    MOCK_TOOL_COMMAND,
    MOCK_TOOL_DONE_TEXT,
    MOCK_TOOL_MARKER,
    MOCK_TOOL_OUTPUT_FILE,
    MockModelServer,
)
from tests.fakes.real_agents import argv_or_skip
from tests.fakes.telegram_api import FakeBotApi, Message, People
from tests.harness.telegram import switchboard_run

pytestmark = [pytest.mark.anyio]

ALICE = People().alice
REPO = Path(__file__).resolve().parents[1]
TURN = 60.0  # seconds one agent start plus one turn may take on a loaded 2-core runner
AGENT_ENV = ",".join([*AGENT_ENV_NAMES, "OPENAI_*", "COPILOT_*"])
#: Each agent's own names for its allow-once and reject-once choices (the card's buttons).
ALLOW_ONCE = {"qwen": "Allow", "copilot": "Allow once"}
REJECT_ONCE = {"qwen": "Reject", "copilot": "Deny"}
#: The optionId each agent gives those two choices (what Switchboard must answer on the wire).
OPTION_IDS = {"qwen": ("proceed_once", "cancel"), "copilot": ("allow_once", "reject_once")}
NEW_REPLY = "Started a fresh conversation"


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        yield fake


def _env(
    agent: str, tmp_path: Path, cli_env: dict[str, str], mock: MockModelServer, api: FakeBotApi
) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    if agent == "qwen":
        agent_env = real_agents_qwen_copilot.qwen_env_mock(home, mock.url)
    else:
        agent_env = real_agents_qwen_copilot.copilot_env_mock(home, mock.url)
    env = {k: v for k, v in agent_env.items() if not k.startswith("SWITCHBOARD_")}
    env.update({k: v for k, v in cli_env.items() if k.startswith("SWITCHBOARD_")})
    env.update(real_agents.REAL_AGENT_BOUNDS)
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "SWITCHBOARD_AGENT": "generic",
            "SWITCHBOARD_AGENT_COMMAND": shlex.join(argv_or_skip(agent)),
            "SWITCHBOARD_AGENT_ENV": AGENT_ENV,
            "SWITCHBOARD_LOG_LEVEL": "debug",  # traces the frames Switchboard sends
            "SWITCHBOARD_WORKSPACE": str(tmp_path / "work"),
            "SWITCHBOARD_TELEGRAM__TOKEN": api.token,
            "SWITCHBOARD_TELEGRAM__API_URL": api.url,
            "SWITCHBOARD_TELEGRAM__ALLOWED_USERS": str(ALICE.id),
        }
    )
    return env


@asynccontextmanager
async def _running(env: dict[str, str], cwd: Path, api: FakeBotApi) -> AsyncIterator[None]:
    """`switchboard run` serving Telegram; stopped with SIGTERM, which it must exit 0 on."""
    stderr = cwd / "run.stderr"
    async with switchboard_run(env, api, cwd, ready_timeout=30, stop_timeout=20, log=stderr):
        yield
    assert "Traceback" not in stderr.read_text()


def _sent_frames(stderr: str) -> list[dict[str, Any]]:
    """The JSON-RPC frames Switchboard sent the agent, from the debug trace (`-> method#id {..}`)."""
    frames = []
    for line in stderr.splitlines():
        try:
            message = json.loads(line).get("msg", "")
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(message, str) and message.startswith("-> ") and " {" in message:
            frames.append(json.loads(message[message.index(" {") + 1 :]))
    return frames


def _prompts(frames: list[dict[str, Any]]) -> list[str]:
    return [
        block["text"]
        for frame in frames
        if frame.get("method") == "session/prompt"
        for block in frame["params"]["prompt"]
        if block.get("type") == "text"
    ]


def _permission_answers(frames: list[dict[str, Any]]) -> list[str]:
    return [
        frame["result"]["outcome"].get("optionId", "")
        for frame in frames
        if "method" not in frame and "outcome" in (frame.get("result") or {})
    ]


class _Dm:
    """Alice's private chat with the bot: what she sends, what the bot showed since."""

    def __init__(self, api: FakeBotApi) -> None:
        self.api = api
        self.seen = 0

    def send(self, text: str) -> None:
        self.seen = len(self.api.chat_messages(ALICE.id))
        self.api.dm(ALICE, text)

    def since(self) -> list[Message]:
        return self.api.chat_messages(ALICE.id)[self.seen :]

    def text_since(self) -> str:
        return "\n".join(message.text for message in self.since())

    async def shows(self, text: str, what: str) -> None:
        await wait_for(lambda: text in self.text_since(), what, TURN)

    async def card(self) -> Message:
        def card() -> Message | None:
            return next((m for m in self.since() if m.reply_markup), None)

        await wait_for(card, "the approval card", TURN)
        message = card()
        assert message is not None
        return message

    def press(self, message: Message, name: str) -> None:
        buttons = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        (button,) = [b for b in buttons if b["text"] == name]
        self.api.press(ALICE, message, button["callback_data"])


def _buttons(message: Message) -> list[str]:
    return [b["text"] for row in message.reply_markup["inline_keyboard"] for b in row]


async def _tool_card(dm: _Dm, agent: str, prompt: str) -> Message:
    dm.send(prompt)
    card = await dm.card()
    assert MOCK_TOOL_COMMAND in card.text  # the command line, not only the model's description
    buttons = _buttons(card)
    assert ALLOW_ONCE[agent] in buttons and REJECT_ONCE[agent] in buttons
    return card


@pytest.mark.parametrize("agent", ["qwen", "copilot"])
async def test_a_real_agent_through_telegram_asks_before_every_tool(
    agent: str,
    tmp_path: Path,
    cli_env: dict[str, str],
    mock_model: MockModelServer,
    api: FakeBotApi,
) -> None:
    mock_model.clear()
    workspace = tmp_path / "work"
    workspace.mkdir()
    marker = workspace / MOCK_TOOL_OUTPUT_FILE
    env = _env(agent, tmp_path, cli_env, mock_model, api)
    dm = _Dm(api)
    async with _running(env, tmp_path, api):
        dm.send("SCN_TEXT say hello")
        await dm.shows(MOCK_TEXT, "the mock model's reply")

        card = await _tool_card(dm, agent, "SCN_TOOL run it")
        assert not marker.exists()  # nothing runs while the card waits
        dm.press(card, ALLOW_ONCE[agent])
        await dm.shows(MOCK_TOOL_DONE_TEXT, "the turn to go on after the allow")
        assert marker.read_text().strip() == MOCK_TOOL_MARKER
        assert card.text.endswith(f"Answered: {ALLOW_ONCE[agent]}")
        marker.unlink()

        dm.send("/new")
        await dm.shows(NEW_REPLY, "the answer to /new")

        if agent == "copilot":
            dm.send("/allow-all on")
            await wait_for(dm.since, "the answer to /allow-all on", TURN)
            (refusal,) = dm.since()
            assert "approv" in refusal.text.lower() and refusal.text.count(". ") == 0
            assert "Permission policy" not in refusal.text  # Copilot's own answer never came

        card = await _tool_card(dm, agent, "SCN_TOOL run it again")
        assert not marker.exists()  # not even after Copilot's /allow-all on
        dm.press(card, REJECT_ONCE[agent])
        await wait_for(lambda: card.reply_markup is None, "the buttons to go", TURN)
        assert card.text.endswith(f"Answered: {REJECT_ONCE[agent]}")
        await wait_for(lambda: dm.since()[-1] is not card, "the turn to end after the reject", TURN)
    assert not marker.exists()
    assert "Permission policy" not in api.chat_text(ALICE.id)
    assert mock_model.count(api="openai", scenario="SCN_TOOL") >= 2
    sent = _sent_frames((tmp_path / "run.stderr").read_text())
    # Neither /new nor /allow-all on ever reached the agent as a prompt.
    assert _prompts(sent) == ["SCN_TEXT say hello", "SCN_TOOL run it", "SCN_TOOL run it again"]
    assert _permission_answers(sent) == list(OPTION_IDS[agent])  # exactly the presses, in order
    # /new closes the session it leaves where the agent advertises close (Copilot, not Qwen).
    assert any(f.get("method") == "session/close" for f in sent) is (agent == "copilot")
