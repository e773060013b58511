"""Contract tests against two more REAL agents from npm, driven as `--agent generic` through the
`switchboard` CLI, offline against the loopback mock model's OpenAI Chat Completions API:
Qwen Code 0.24.4 (`cli-entry.js --acp`) and GitHub Copilot CLI 1.0.102 (`copilot --acp`, in its
bring-your-own-key mode).

Neither is configured to ask by Switchboard's operator: the gate must find each one's asking
state itself (Qwen starts in its mode `auto` and offers `default`, "Require approval for file edits
or shell commands"; Copilot asks while its `allow_all` option of category `permissions` is `off`,
and its modes are URIs). Neither calls `terminal/create`: both run their shell tool themselves, so
what stands between the model and the workspace is their asking state, kept by Switchboard.

`bash tests/fakes/install_agents.sh` installs them; CI sets SWITCHBOARD_REQUIRE_REAL_AGENTS=1 so a
missing install fails instead of skipping. What each agent was seen to do on the wire:
tests/fakes/REAL_AGENTS_NOTES.md."""

from __future__ import annotations

import json
import re
import shlex
import uuid
from pathlib import Path

import pytest

from tests.conftest import AGENT_ENV_NAMES, CliResult, run_chat
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

AGENTS = ("qwen", "copilot")
TURN = 60.0  # seconds one agent start plus one turn may take on a loaded 2-core runner
#: Names the generic preset's allowlist must pass for these agents to reach the mock.
AGENT_ENV = ",".join([*AGENT_ENV_NAMES, "OPENAI_*", "COPILOT_*"])
#: Each agent's numbered choices in its approval menu, in its own order: (number, name).
ALLOW_ONCE = {"qwen": ("3", "Allow"), "copilot": ("1", "Allow once")}
REJECT_ONCE = {"qwen": ("4", "Reject"), "copilot": ("3", "Deny")}
#: How each agent continues an earlier session on a new process (what it advertises).
RESUME_METHOD = {"qwen": "session/resume", "copilot": "session/load"}
MENU = "The agent wants to use a tool:"
NOT_RESTORED = "could not be restored"


def _env(agent: str, home: Path, mock: MockModelServer) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    if agent == "qwen":
        return real_agents_qwen_copilot.qwen_env_mock(home, mock.url)
    return real_agents_qwen_copilot.copilot_env_mock(home, mock.url)


def _sent(stderr: str, method: str) -> bool:
    """Whether the debug frame trace shows `method` sent by Switchboard (`-> method#id`)."""
    return re.search(rf"-> {re.escape(method)}#\d+", stderr) is not None


def _bodies_with(mock: MockModelServer, text: str) -> list[str]:
    bodies = [json.dumps(r.body) for r in mock.requests if r.body is not None]
    return [body for body in bodies if text in body]


class _Chat:
    """`switchboard chat --agent generic` on one real agent; HOME, workspace and state file
    persist across the runs of one test. Frames are traced (debug log on stderr) so a test can
    tell which session methods went out."""

    def __init__(
        self, agent: str, tmp_path: Path, cli_env: dict[str, str], mock: MockModelServer
    ) -> None:
        self.agent = agent
        self.argv = argv_or_skip(agent)
        self.tmp_path = tmp_path
        self.workspace = tmp_path / "work"
        self.workspace.mkdir(exist_ok=True)
        agent_env = _env(agent, tmp_path / "home", mock)
        ours = {k: v for k, v in cli_env.items() if k.startswith("SWITCHBOARD_")}
        self.env = {k: v for k, v in agent_env.items() if not k.startswith("SWITCHBOARD_")}
        self.env.update(ours)
        self.env.update(real_agents.REAL_AGENT_BOUNDS)
        self.env["SWITCHBOARD_AGENT_ENV"] = AGENT_ENV
        self.env["SWITCHBOARD_LOG_LEVEL"] = "debug"

    @property
    def marker(self) -> Path:
        return self.workspace / MOCK_TOOL_OUTPUT_FILE

    def run(self, lines: list[str]) -> CliResult:
        result = run_chat(
            "generic",
            self.argv,
            self.workspace,
            lines,
            env=self.env,
            cwd=self.tmp_path,
            timeout=TURN + 30,
        )
        assert "Traceback" not in result.stdout + result.stderr
        return result


@pytest.fixture(autouse=True)
def _fresh_mock(mock_model):  # type: ignore[no-untyped-def]
    """The mock model serves the whole module: each test counts only its own requests."""
    mock_model.clear()


@pytest.fixture
def chat(tmp_path, cli_env, mock_model):  # type: ignore[no-untyped-def]
    def make(agent: str) -> _Chat:
        return _Chat(agent, tmp_path, cli_env, mock_model)

    return make


def _ask(agent: str, run_cli, tmp_path: Path, mock: MockModelServer, prompt: str) -> CliResult:  # type: ignore[no-untyped-def]
    argv = argv_or_skip(agent)
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    env = _env(agent, tmp_path / "home", mock)
    env = {k: v for k, v in env.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_AGENT_ENV"] = AGENT_ENV
    env.update(real_agents.REAL_AGENT_BOUNDS)
    return run_cli(
        *("ask", "--agent", "generic", "--agent-command", shlex.join(argv)),
        *("--cwd", str(workspace), "--timeout", "60", prompt),
        env=env,
        timeout=TURN + 30,
    )


# --------------------------------------------------------------------------------------------
# ask and chat
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", AGENTS)
def test_ask_answers_from_the_mock_model(agent, run_cli, tmp_path, mock_model):
    result = _ask(agent, run_cli, tmp_path, mock_model, "SCN_TEXT say hello")
    assert result.returncode == 0, result.stderr
    assert MOCK_TEXT in result.stdout
    assert mock_model.count(api="openai", scenario="SCN_TEXT") >= 1


@pytest.mark.parametrize("agent", AGENTS)
def test_ask_stops_a_tool_nobody_can_approve_before_it_runs(agent, run_cli, tmp_path, mock_model):
    result = _ask(agent, run_cli, tmp_path, mock_model, "SCN_TOOL run it")
    assert result.returncode != 0
    sentence = result.stderr.strip().splitlines()[-1]
    assert "approv" in sentence and "Traceback" not in result.stderr
    assert mock_model.count(api="openai", scenario="SCN_TOOL") >= 1  # the model did ask for it
    assert not (tmp_path / "work" / MOCK_TOOL_OUTPUT_FILE).exists()


@pytest.mark.parametrize("agent", AGENTS)
def test_a_chat_approval_names_the_command_and_only_an_approved_tool_runs(agent, chat):
    session = chat(agent)
    number, name = ALLOW_ONCE[agent]
    approved = session.run(["SCN_TOOL run it", number])
    assert approved.returncode == 0, approved.stderr
    menu = approved.stdout[approved.stdout.index(MENU) : approved.stdout.index("Answered:")]
    assert MOCK_TOOL_COMMAND in menu  # the person sees the command line, not only a title
    assert f"  {number}) {name}\n" in menu
    assert f"Answered: {name}\n" in approved.stdout
    assert approved.stdout.index("Answered:") < approved.stdout.index(MOCK_TOOL_DONE_TEXT)
    assert session.marker.read_text().strip() == MOCK_TOOL_MARKER
    session.marker.unlink()

    number, name = REJECT_ONCE[agent]
    rejected = session.run(["/new", "SCN_TOOL run it again", number])
    assert rejected.returncode == 0, rejected.stderr
    assert MENU in rejected.stdout
    assert f"Answered: {name}\n" in rejected.stdout
    assert not session.marker.exists()


# --------------------------------------------------------------------------------------------
# /model, /new, resume
# --------------------------------------------------------------------------------------------


def test_model_in_a_qwen_chat_switches_the_model_of_the_next_turn(chat, mock_model):
    session = chat("qwen")
    prompt = f"SCN_TEXT after the switch {uuid.uuid4().hex[:8]}"
    # Qwen's model ids carry their provider: `mock-model-2(openai)`, named `mock-model-2`.
    result = session.run(["/model mock-model-2(openai)", prompt])
    assert result.returncode == 0, result.stderr
    assert "Model set to mock-model-2(openai)." in result.stdout
    assert MOCK_TEXT in result.stdout
    turn = [r for r in mock_model.filtered(scenario="SCN_TEXT") if prompt in json.dumps(r.body)]
    assert turn and {r.model for r in turn} == {"mock-model-2"}


def test_model_in_a_copilot_chat_says_it_offers_none_and_sends_nothing(chat, mock_model):
    # In its own-key mode Copilot offers no model over ACP (no option, no `models`): /model says
    # so in one sentence, is never handed to the agent's own `/model`, and the model stays.
    session = chat("copilot")
    prompt = f"SCN_TEXT after {uuid.uuid4().hex[:8]}"
    result = session.run(["/model", "/model mock-model-2", prompt])
    assert result.returncode == 0, result.stderr
    assert "Model set to" not in result.stdout
    answers = result.stdout[: result.stdout.index(MOCK_TEXT)].strip().splitlines()
    assert answers and all("model" in line.lower() for line in answers)
    assert not re.search(r"-> session/prompt#\d+ .*/model", result.stderr)
    turn = [r for r in mock_model.requests if r.body and prompt in json.dumps(r.body)]
    assert turn and {r.model for r in turn} == {"mock-model"}


@pytest.mark.parametrize("agent", AGENTS)
def test_new_starts_a_fresh_session_and_closes_the_old_one_where_advertised(
    agent, chat, mock_model
):
    session = chat(agent)
    remembered = f"zebra-{uuid.uuid4().hex[:8]}"
    fresh = f"SCN_TEXT fresh {uuid.uuid4().hex[:8]}"
    result = session.run([f"SCN_TEXT remember {remembered}", "/new", fresh])
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(MOCK_TEXT) == 2
    after = _bodies_with(mock_model, fresh)
    assert after and not any(remembered in body for body in after)
    # Copilot advertises sessionCapabilities.close, Qwen does not.
    assert _sent(result.stderr, "session/close") is (agent == "copilot")


@pytest.mark.parametrize("agent", AGENTS)
def test_a_chat_resumes_its_session_after_a_restart_and_keeps_its_gate(agent, chat, mock_model):
    # Qwen answers session/resume with its mode back at `auto` (approves by itself): the gate
    # must set the asking mode again before the first tool of the resumed session.
    session = chat(agent)
    remembered = f"zebra-{uuid.uuid4().hex[:8]}"
    first = session.run([f"SCN_TEXT remember {remembered}"])
    assert first.returncode == 0, first.stderr
    assert MOCK_TEXT in first.stdout

    number, name = REJECT_ONCE[agent]
    after = f"SCN_TOOL after the restart {uuid.uuid4().hex[:8]}"
    second = session.run([after, number])
    assert second.returncode == 0, second.stderr
    assert NOT_RESTORED not in second.stdout
    assert _sent(second.stderr, RESUME_METHOD[agent])
    assert MOCK_TEXT not in second.stdout  # the earlier turn is not replayed to the person
    assert MENU in second.stdout and f"Answered: {name}\n" in second.stdout
    assert not session.marker.exists()
    resumed = _bodies_with(mock_model, after)
    assert resumed and all(remembered in body for body in resumed)


# --------------------------------------------------------------------------------------------
# The agent's own approval-disabling commands
# --------------------------------------------------------------------------------------------

COPILOT_UNGATING = ("/allow-all on", "/permissions allow-all", "/autopilot on")


@pytest.mark.parametrize("command", COPILOT_UNGATING)
def test_copilots_approval_disabling_command_is_refused_and_its_tools_still_ask(
    command, chat, mock_model
):
    session = chat("copilot")
    number, name = REJECT_ONCE["copilot"]
    result = session.run([command, "SCN_TOOL run it", number])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # Not sent on: Copilot's own answer ("Permission policy: Allow All ...") never comes.
    assert "Permission policy" not in out and "Allow All" not in out
    assert not re.search(rf"-> session/prompt#\d+ .*{re.escape(command)}", result.stderr)
    told = out[: out.index(MENU)].strip().splitlines()
    assert len(told) == 1 and "approv" in told[0].lower()  # one sentence, before anything ran
    assert f"Answered: {name}\n" in out
    assert not session.marker.exists()
    assert mock_model.count(api="openai", scenario="SCN_TOOL") >= 1


def test_copilots_help_leaves_out_its_approval_disabling_commands(chat):
    session = chat("copilot")
    result = session.run(["/help"])
    assert result.returncode == 0, result.stderr
    assert "blame" in result.stdout  # one of the commands Copilot announces before any prompt
    for command in ("/allow-all", "/permissions", "/autopilot"):
        assert command not in result.stdout


@pytest.mark.parametrize("agent", AGENTS)
def test_a_bad_key_says_so_and_is_never_a_refusal(agent, run_cli, tmp_path, mock_model):
    """The model service answers 401. Qwen ends the prompt with an error naming it: our
    credentials sentence. Copilot says it in its own reply (an error chunk, then end_turn),
    which reaches the person as it wrote it. Neither is a refusal card."""
    result = _ask(agent, run_cli, tmp_path, mock_model, "SCN_E401 hello")
    shown = result.stdout + result.stderr
    assert "Traceback" not in shown and "refused" not in shown.lower(), shown
    if agent == "qwen":
        assert result.returncode == 1
        assert "rejected its credentials" in result.stderr, result.stderr
    else:
        assert "Authentication failed" in result.stdout and "401" in result.stdout, shown
