"""The REAL claude-agent-acp through Telegram, offline against the loopback mock model, served by
`switchboard run` with the real python-telegram-bot against the fake Bot API: a message sent
while the agent works steered into the running turn with **Steer now** or typed as
`/steer TEXT` (the mock sees it in the same turn, the reply goes on in the same message), the
agent's AskUserQuestion answered by pressing an option's button, and the agent's `allow_always`
option remembered so that the next identical command runs without a card.

What claude-agent-acp does on the wire is pinned by tests/test_real_agent_steer_ask.py.
`bash tests/fakes/install_agents.sh` installs the agent; without it these tests fail with that
hint."""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import AGENT_ENV_NAMES
from tests.engine_helpers import wait_for
from tests.fakes import real_agents
from tests.fakes.mock_model import (
    MOCK_ASK_ANSWERED,
    MOCK_ASK_OPTIONS,
    MOCK_ASK_QUESTION,
    MOCK_SLOW_PREFIX,
    MOCK_STEER_SEEN,
    MOCK_TEXT,
    MOCK_TOOL_COMMAND,
    MOCK_TOOL_DONE_TEXT,
    MockModelServer,
)
from tests.fakes.telegram_api import FakeBotApi, Message, People
from tests.harness.telegram import switchboard_run

pytestmark = [pytest.mark.anyio]

ALICE = People().alice
REPO = Path(__file__).resolve().parents[1]
TURN = 60.0  # seconds one agent start plus one turn may take on a loaded 2-core runner, a bound
STEER_TEXT = "No, use the other file instead"
STEER_NOW = "Steer now"
CARD = "The agent wants"
REFUSED = "User refused permission"


def claude_argv() -> list[str]:
    argv = real_agents.claude_acp_argv()
    if argv is None:
        pytest.fail("claude-agent-acp is not installed; run: bash tests/fakes/install_agents.sh")
    return argv


@pytest.fixture
def mock_model() -> Any:
    """A mock per test (conftest's is per module): each test counts only its own requests."""
    with MockModelServer() as server:
        yield server


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        yield fake


def _env(
    tmp_path: Path, cli_env: dict[str, str], mock: MockModelServer, api: FakeBotApi
) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "work").mkdir()
    agent_env = real_agents.claude_env_mock(home, mock.url)
    env = {k: v for k, v in agent_env.items() if not k.startswith("SWITCHBOARD_")}
    env.update({k: v for k, v in cli_env.items() if k.startswith("SWITCHBOARD_")})
    env.update(real_agents.REAL_AGENT_BOUNDS)
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "SWITCHBOARD_AGENT": "claude",
            "SWITCHBOARD_AGENT_COMMAND": shlex.join(claude_argv()),
            "SWITCHBOARD_AGENT_ENV": ",".join(AGENT_ENV_NAMES),
            "SWITCHBOARD_LOG_LEVEL": "debug",  # traces the frames Switchboard sends
            "SWITCHBOARD_WORKSPACE": str(tmp_path / "work"),
            "SWITCHBOARD_TELEGRAM__TOKEN": api.token,
            "SWITCHBOARD_TELEGRAM__API_URL": api.url,
            "SWITCHBOARD_TELEGRAM__ALLOWED_USERS": str(ALICE.id),
        }
    )
    return env


@asynccontextmanager
async def _running(tmp_path: Path, env: dict[str, str], api: FakeBotApi) -> AsyncIterator[None]:
    """`switchboard run` serving Telegram; stopped with SIGTERM, which it must exit 0 on."""
    stderr = tmp_path / "run.stderr"
    async with switchboard_run(env, api, tmp_path, ready_timeout=30, stop_timeout=20, log=stderr):
        yield
    assert "Traceback" not in stderr.read_text()


def _sent_frames(tmp_path: Path) -> list[dict[str, Any]]:
    """The JSON-RPC frames Switchboard sent the agent, from the debug trace (`-> method#id {..}`)."""
    frames = []
    for line in (tmp_path / "run.stderr").read_text().splitlines():
        try:
            message = json.loads(line).get("msg", "")
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(message, str) and message.startswith("-> ") and " {" in message:
            try:
                frames.append(json.loads(message[message.index(" {") + 1 :]))
            except json.JSONDecodeError:
                continue  # a long frame traced cut short
    return frames


def _prompts(frames: list[dict[str, Any]]) -> list[str]:
    return [
        block["text"]
        for frame in frames
        if frame.get("method") == "session/prompt"
        for block in frame["params"]["prompt"]
        if block.get("type") == "text"
    ]


def _buttons(message: Message) -> list[str]:
    markup = message.reply_markup or {}
    return [b["text"] for row in markup.get("inline_keyboard", []) for b in row]


class _Dm:
    """Alice's private chat with the bot."""

    def __init__(self, api: FakeBotApi) -> None:
        self.api = api

    def send(self, text: str) -> None:
        self.api.dm(ALICE, text)

    def messages(self) -> list[Message]:
        return self.api.chat_messages(ALICE.id)

    def text(self) -> str:
        return self.api.chat_text(ALICE.id)

    async def shows(self, text: str, what: str) -> None:
        await wait_for(lambda: text in self.text(), what, TURN)

    async def with_buttons(self, wanted: Callable[[list[str]], bool], what: str) -> Message:
        def found() -> Message | None:
            return next((m for m in self.messages() if wanted(_buttons(m))), None)

        await wait_for(found, what, TURN)
        message = found()
        assert message is not None
        return message

    def press(self, message: Message, wanted: Callable[[str], bool]) -> None:
        buttons = [b for row in (message.reply_markup or {})["inline_keyboard"] for b in row]
        (button,) = [b for b in buttons if wanted(b["text"])]
        self.api.press(ALICE, message, button["callback_data"])


@pytest.mark.parametrize("how", ["Steer now", "/steer"])
async def test_a_message_steered_into_the_running_turn_reaches_the_model_in_that_turn(
    how: str,
    tmp_path: Path,
    cli_env: dict[str, str],
    mock_model: MockModelServer,
    api: FakeBotApi,
) -> None:
    dm = _Dm(api)
    async with _running(tmp_path, _env(tmp_path, cli_env, mock_model, api), api):
        dm.send("SCN_STEER write the report")

        def streaming() -> bool:  # the model is mid-reply: a steer now lands in this turn
            return any(r.response == "slow" for r in mock_model.filtered(scenario="SCN_STEER"))

        await wait_for(streaming, "the slow reply to start", TURN)
        if how == STEER_NOW:  # a message sent meanwhile is queued; its card's button steers it
            dm.send(STEER_TEXT)
            queued = await dm.with_buttons(lambda b: STEER_NOW in b, "the Queued card's button")
            dm.press(queued, lambda label: label == STEER_NOW)
        else:
            dm.send(f"/steer {STEER_TEXT}")
        steered = f"{MOCK_STEER_SEEN} {STEER_TEXT}"
        await dm.shows(steered, "the model's reply to the steer")
        dm.send("SCN_TEXT and now something else")  # the next turn: the steer was not queued too
        await dm.shows(MOCK_TEXT, "the reply to the next message")
    seen = [r for r in mock_model.filtered(scenario="SCN_STEER") if r.response == "steer_seen"]
    assert seen and seen[0].injected_texts == [STEER_TEXT]
    # the reply went on in the same live message
    assert any(MOCK_SLOW_PREFIX in m.text and steered in m.text for m in dm.messages())
    frames = _sent_frames(tmp_path)
    assert _prompts(frames) == ["SCN_STEER write the report", "SCN_TEXT and now something else"]
    steers = [f for f in frames if f.get("method") == "_session/steering"]
    assert [s["params"]["prompt"] for s in steers] == [[{"type": "text", "text": STEER_TEXT}]]


async def test_the_agents_question_is_answered_by_pressing_an_options_button(
    tmp_path: Path, cli_env: dict[str, str], mock_model: MockModelServer, api: FakeBotApi
) -> None:
    dm = _Dm(api)
    async with _running(tmp_path, _env(tmp_path, cli_env, mock_model, api), api):
        dm.send("SCN_ASK choose a colour")
        card = await dm.with_buttons(lambda b: "Blue" in b, "the question's option buttons")
        assert MOCK_ASK_QUESTION in card.text
        assert [label for label in _buttons(card) if label in MOCK_ASK_OPTIONS] == list(
            MOCK_ASK_OPTIONS
        )
        dm.press(card, lambda label: label == "Blue")  # one tap answers claude's question
        await dm.shows(MOCK_ASK_ANSWERED, "the model's reply to the answer")
    answered = [r for r in mock_model.filtered(scenario="SCN_ASK") if r.response == "ask_answered"]
    assert answered, "the answer never reached the model"
    assert f'"{MOCK_ASK_QUESTION}"="Blue"' in answered[0].tool_results[-1]
    assert CARD not in dm.text()  # a question, not an approval card
    frames = _sent_frames(tmp_path)
    assert _prompts(frames) == ["SCN_ASK choose a colour"]
    answers = [f["result"] for f in frames if "method" not in f and "action" in f.get("result", {})]
    assert answers == [{"action": "accept", "content": {"question_0": "Blue"}}]


async def test_other_then_a_typed_reply_answers_the_agents_question(
    tmp_path: Path, cli_env: dict[str, str], mock_model: MockModelServer, api: FakeBotApi
) -> None:
    typed = "Green with white stripes"
    dm = _Dm(api)
    async with _running(tmp_path, _env(tmp_path, cli_env, mock_model, api), api):
        dm.send("SCN_ASK choose a colour")
        card = await dm.with_buttons(lambda b: "Other…" in b, "the question's Other… button")
        dm.press(card, lambda label: label == "Other…")

        def asked() -> bool:  # Telegram asks for the text with a force reply
            return any((m.reply_markup or {}).get("force_reply") for m in dm.messages())

        await wait_for(asked, "the question for the typed answer", TURN)
        dm.send(typed)  # the next message from the person who asked is the answer
        await dm.shows(MOCK_ASK_ANSWERED, "the model's reply to the answer")
    answered = [r for r in mock_model.filtered(scenario="SCN_ASK") if r.response == "ask_answered"]
    assert answered, "the answer never reached the model"
    assert f'"{MOCK_ASK_QUESTION}"="{typed}"' in answered[0].tool_results[-1]
    frames = _sent_frames(tmp_path)
    assert _prompts(frames) == ["SCN_ASK choose a colour"]  # the typed answer was not a prompt
    answers = [f["result"] for f in frames if "method" not in f and "action" in f.get("result", {})]
    assert answers == [{"action": "accept", "content": {"question_0_custom": typed}}]


async def test_allow_always_is_remembered_for_the_next_identical_command(
    tmp_path: Path, cli_env: dict[str, str], mock_model: MockModelServer, api: FakeBotApi
) -> None:
    # claude-agent-acp asks again for this very command (tests/test_real_agent_steer_ask.py):
    # only Switchboard remembering the answer spares the second card.
    dm = _Dm(api)
    async with _running(tmp_path, _env(tmp_path, cli_env, mock_model, api), api):
        dm.send("SCN_TOOL run it")
        card = await dm.with_buttons(
            lambda b: any(label.startswith("Yes, and") for label in b), "the approval card"
        )
        assert MOCK_TOOL_COMMAND in card.text
        dm.press(card, lambda label: label.startswith("Yes, and"))  # the agent's allow_always
        await dm.shows(MOCK_TOOL_DONE_TEXT, "the first command to run")
        dm.send("SCN_TOOL run it again")
        await wait_for(
            lambda: dm.text().count(MOCK_TOOL_DONE_TEXT) >= 2, "the second command to run", TURN
        )
    cards = [m for m in dm.messages() if m.text.startswith(CARD)]
    assert cards == [card]
    answers = [
        f["result"]["outcome"].get("optionId", "cancelled")
        for f in _sent_frames(tmp_path)
        if "method" not in f and "outcome" in (f.get("result") or {})
    ]
    assert answers == ["allow-with-updates", "allow-with-updates"]
    last = mock_model.filtered(scenario="SCN_TOOL")[-1]
    assert len(last.tool_results) == 2 and not any(REFUSED in t for t in last.tool_results)
