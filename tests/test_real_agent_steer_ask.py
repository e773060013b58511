"""The REAL claude-agent-acp on the wire, without Switchboard: steering a running turn,
AskUserQuestion as an ACP form elicitation, and its `allow_always` option for a Bash command.

Driven by tests/fakes/raw_acp_probe.py against the loopback mock model (scenarios `SCN_STEER`,
`SCN_ASK`, `SCN_TOOL`). These pin what the agent does, so the end-to-end tests through Switchboard
(tests/test_real_agent_e2e_*.py) rest on facts. `bash tests/fakes/install_agents.sh` installs the
agent; without it these tests fail with that hint."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fakes import real_agents
from tests.fakes.mock_model import (
    MOCK_ASK_ANSWERED,
    MOCK_ASK_OPTIONS,
    MOCK_ASK_QUESTION,
    MOCK_ASK_TOOL,
    MOCK_ASK_UNAVAILABLE,
    MOCK_SLOW_PREFIX,
    MOCK_STEER_SEEN,
    MOCK_TOOL_COMMAND,
    MOCK_TOOL_DONE_TEXT,
    MockModelServer,
    RecordedRequest,
)
from tests.fakes.raw_acp_probe import RawAcpProbe

# Upper bounds for one request of a real node agent on a loaded 2-core machine, never measured.
BOUND = 90.0
STEER_TEXT = "No, use the other file instead"


def wait_until(condition: Callable[[], bool], bound: float) -> bool:
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def claude_argv() -> list[str]:
    argv = real_agents.claude_acp_argv()
    if argv is None:
        pytest.fail("claude-agent-acp is not installed; run: bash tests/fakes/install_agents.sh")
    return argv


class Claude:
    """One claude-agent-acp process on the mock, initialized, with one session in mode
    `default` (the mode that asks before every tool)."""

    def __init__(
        self,
        tmp_path: Path,
        mock: MockModelServer,
        *,
        elicitation: bool,
        answer: Callable[[dict], dict] | None = None,
        permission: str = "allow_once",
    ) -> None:
        home, self.workspace = tmp_path / "home", tmp_path / "work"
        home.mkdir()
        self.workspace.mkdir()
        self.probe = RawAcpProbe(
            claude_argv(),
            real_agents.claude_env_mock(home, mock.url),
            str(self.workspace),
            lambda frame: None,
            permission=permission,
            elicitation=answer,
        )
        caps: dict = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
        if elicitation:
            caps["elicitation"] = {"form": {}}
        self.probe.start()
        self.init = self.probe.request(
            "initialize", {"protocolVersion": 1, "clientCapabilities": caps}, BOUND
        )
        new = self.probe.request(
            "session/new", {"cwd": str(self.workspace), "mcpServers": []}, BOUND
        )
        self.sid = new["result"]["sessionId"]
        mode = self.probe.request(
            "session/set_config_option",
            {"sessionId": self.sid, "configId": "mode", "value": "default"},
            BOUND,
        )
        assert "error" not in mode, mode

    def prompt(self, text: str, during: Callable[[float], None] | None = None) -> dict:
        return self.probe.request(
            "session/prompt",
            {"sessionId": self.sid, "prompt": [{"type": "text", "text": text}]},
            BOUND,
            during=during,
        )

    def updates(self, kind: str) -> list[dict]:
        return [
            f["params"]["update"]
            for f in self.probe.frames
            if f.get("method") == "session/update"
            and f["params"]["update"].get("sessionUpdate") == kind
        ]

    def said(self) -> str:
        return "".join(u["content"].get("text", "") for u in self.updates("agent_message_chunk"))

    def requests(self, method: str) -> list[dict]:
        return [f for f in self.probe.frames if f.get("method") == method and "id" in f]


@pytest.fixture
def mock_model() -> Iterator[MockModelServer]:
    """A mock per test (conftest's is per module): each test counts only its own requests."""
    with MockModelServer() as server:
        yield server


@pytest.fixture
def claude(tmp_path: Path, mock_model: MockModelServer) -> Iterator[Callable[..., Claude]]:
    made: list[Claude] = []

    def make(**kw: object) -> Claude:
        agent = Claude(tmp_path, mock_model, **kw)  # type: ignore[arg-type]
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.probe.stop()


# ---- steering ------------------------------------------------------------------------------


def test_claude_advertises_steering_at_the_top_of_its_initialize_answer(claude):
    agent = claude(elicitation=False)
    result = agent.init["result"]
    assert result["_meta"]["steering"] == {"supported": True}
    assert "steering" not in json.dumps(result.get("agentCapabilities", {}))


def test_a_steer_reaches_the_model_within_the_same_turn(claude, mock_model):
    agent = claude(elicitation=False)
    steer: dict[str, int] = {}

    def once_streaming(_elapsed: float) -> None:
        # steer while the slow reply streams: the model is mid-generation
        if "id" not in steer and MOCK_SLOW_PREFIX in agent.said():
            steer["id"] = agent.probe.send_request(
                "_session/steering",
                {"sessionId": agent.sid, "prompt": [{"type": "text", "text": STEER_TEXT}]},
            )

    answer = agent.prompt("SCN_STEER write the report", during=once_streaming)

    assert answer["result"]["stopReason"] == "end_turn"
    assert agent.probe.responses[steer["id"]]["result"]["outcome"] == "injected"

    def slow() -> list[RecordedRequest]:
        return [r for r in mock_model.filtered(scenario="SCN_STEER") if r.response == "slow"]

    # the mock sees the dropped stream at its next write: wait for that stream to end
    assert wait_until(lambda: all(r.done for r in slow()), mock_model.slow_duration + BOUND)
    (cut,) = slow()
    assert cut.disconnected  # the steer pre-empted the generation
    scenario = mock_model.filtered(scenario="SCN_STEER")
    seen = [r for r in scenario if r.response == "steer_seen"]
    assert seen and seen[0].injected_texts == [STEER_TEXT]
    assert seen[0].seq > cut.seq
    # the model's answer to the steer streamed before the one prompt's answer
    assert f"{MOCK_STEER_SEEN} {STEER_TEXT}" in agent.said()
    frames = agent.probe.frames
    last_chunk = max(
        i
        for i, f in enumerate(frames)
        if f.get("method") == "session/update"
        and f["params"]["update"].get("sessionUpdate") == "agent_message_chunk"
    )
    assert last_chunk < frames.index(answer)


def test_a_steer_with_no_turn_running_asks_for_a_prompt_when_the_client_opts_in(claude, mock_model):
    agent = claude(elicitation=False)
    answer = agent.probe.request(
        "_session/steering",
        {
            "sessionId": agent.sid,
            "prompt": [{"type": "text", "text": STEER_TEXT}],
            "_meta": {"steering": {"idleBehavior": "promptRequired"}},
        },
        BOUND,
    )
    assert answer["result"]["outcome"] == "promptRequired"
    assert mock_model.count(endpoint="messages", has_tools=True) == 0


# ---- AskUserQuestion -----------------------------------------------------------------------


def pick(label: str) -> Callable[[dict], dict]:
    return lambda params: {"action": "accept", "content": {"question_0": label}}


def test_ask_user_question_arrives_as_a_form_elicitation_tied_to_its_tool_call(claude):
    agent = claude(elicitation=True, answer=pick("Blue"))
    answer = agent.prompt("SCN_ASK choose")
    assert answer["result"]["stopReason"] == "end_turn"
    (request,) = agent.requests("elicitation/create")
    params = request["params"]
    assert params["mode"] == "form"
    assert params["sessionId"] == agent.sid
    assert params["message"] == MOCK_ASK_QUESTION
    tool_call_ids = {u["toolCallId"] for u in agent.updates("tool_call")}
    assert params["toolCallId"] in tool_call_ids
    schema = params["requestedSchema"]
    assert schema["type"] == "object"
    assert "required" not in schema  # every field may be skipped
    question, other = schema["properties"]["question_0"], schema["properties"]["question_0_custom"]
    assert question["type"] == "string" and question["title"] == "Colour"
    assert [(o["const"], o["title"]) for o in question["oneOf"]] == [
        (label, label) for label in MOCK_ASK_OPTIONS
    ]
    assert other["type"] == "string" and other["title"] == "Other"
    assert list(schema["properties"]) == ["question_0", "question_0_custom"]


def test_the_picked_option_reaches_the_model_as_the_tool_result(claude, mock_model):
    agent = claude(elicitation=True, answer=pick("Blue"))
    agent.prompt("SCN_ASK choose")
    answered = mock_model.filtered(scenario="SCN_ASK")
    results = [r.tool_results[-1] for r in answered if r.response == "ask_answered"]
    assert results
    assert f'"{MOCK_ASK_QUESTION}"="Blue"' in results[0]
    assert f"{MOCK_ASK_ANSWERED} " in agent.said() and '="Blue"' in agent.said()
    assert not agent.requests("session/request_permission")  # the question is not a tool card


def test_a_typed_other_answer_reaches_the_model(claude, mock_model):
    typed = "Green with white stripes"
    agent = claude(
        elicitation=True,
        answer=lambda params: {"action": "accept", "content": {"question_0_custom": typed}},
    )
    agent.prompt("SCN_ASK choose")
    answered = [r for r in mock_model.filtered(scenario="SCN_ASK") if r.response == "ask_answered"]
    assert f'"{MOCK_ASK_QUESTION}"="{typed}"' in answered[0].tool_results[-1]


def test_a_declined_question_tells_the_model_and_the_turn_goes_on(claude, mock_model):
    agent = claude(elicitation=True, answer=lambda params: {"action": "decline"})
    answer = agent.prompt("SCN_ASK choose")
    assert answer["result"]["stopReason"] == "end_turn"
    answered = [r for r in mock_model.filtered(scenario="SCN_ASK") if r.response == "ask_answered"]
    assert answered[0].tool_results[-1] == "The user did not answer the questions."


def test_a_cancelled_question_fails_the_tool_call_and_the_turn_goes_on(claude, mock_model):
    agent = claude(elicitation=True, answer=lambda params: {"action": "cancel"})
    answer = agent.prompt("SCN_ASK choose")
    assert answer["result"]["stopReason"] == "end_turn"
    answered = [r for r in mock_model.filtered(scenario="SCN_ASK") if r.response == "ask_answered"]
    assert "Tool use aborted" in answered[0].tool_results[-1]
    assert "failed" in [u.get("status") for u in agent.updates("tool_call_update")]


def test_without_form_elicitation_claude_does_not_offer_the_model_ask_user_question(
    claude, mock_model
):
    agent = claude(elicitation=False)
    answer = agent.prompt("SCN_ASK choose")
    assert answer["result"]["stopReason"] == "end_turn"
    turn = mock_model.filtered(scenario="SCN_ASK")
    assert turn and all(MOCK_ASK_TOOL not in r.tool_names for r in turn)
    assert MOCK_ASK_UNAVAILABLE in agent.said()
    assert not agent.requests("elicitation/create")


# ---- allow_always --------------------------------------------------------------------------


def test_claude_offers_allow_always_for_bash_and_asks_again_for_the_same_command(
    claude, mock_model
):
    """Claude writes the rule to .claude/settings.local.json, yet asks again for this very
    command (its rule `Bash(echo switchboard-tool-ran *)` does not cover the redirection): a
    client that wants the second run unasked must remember the choice itself."""
    agent = claude(elicitation=False, permission="allow_always")
    for n in (1, 2):
        assert agent.prompt(f"SCN_TOOL run {n}")["result"]["stopReason"] == "end_turn"
    first, second = (r["params"] for r in agent.requests("session/request_permission"))
    options = [(o["optionId"], o["kind"]) for o in first["options"]]
    assert options == [
        ("allow-once", "allow_once"),
        ("allow-with-updates", "allow_always"),
        ("reject", "reject_once"),
    ]
    assert first["toolCall"]["rawInput"]["command"] == MOCK_TOOL_COMMAND
    assert second["toolCall"]["rawInput"] == first["toolCall"]["rawInput"]
    assert second["toolCall"]["toolCallId"] != first["toolCall"]["toolCallId"]
    settings = json.loads((agent.workspace / ".claude" / "settings.local.json").read_text())
    assert settings["permissions"]["allow"] == ["Bash(echo switchboard-tool-ran *)"]
    assert agent.said().count(MOCK_TOOL_DONE_TEXT) == 2
