"""Commands that keep their word, through `switchboard chat` (the real CLI, stdin not a terminal)
and a real fake-agent subprocess: /compact never reaches the model as text for an agent without
one, /help knows the agent's commands before the first prompt, /status names the mode and the
model, and the tools summary counts only the tools that ran."""

from __future__ import annotations

from tests.conftest import lists_commands, script
from tests.test_chat_cli import chat, prompts  # noqa: F401 - `chat` is the fixture

COMPRESS = lists_commands(("review", "review the diff"), ("compress", "shrink the context"))
SUMMARIZE = lists_commands(("squash", "Summarize the conversation so far"))
NOTHING_LIKE_IT = lists_commands(("review", "review the diff"))


def test_compact_offers_the_agents_compress_command_and_sends_nothing(chat, fake_agent):  # noqa: F811
    result = chat(fake_agent, ["hello", "/compact"], agent_opts=COMPRESS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(
        "This agent has no /compact; it compacts with /compress: send //compress.\n"
    )
    assert prompts(fake_agent) == ["hello"]


def test_compact_finds_a_compacting_command_by_its_description(chat, fake_agent):  # noqa: F811
    result = chat(fake_agent, ["/compact"], agent_opts=SUMMARIZE)
    assert result.returncode == 0, result.stderr
    assert "it compacts with /squash: send //squash." in result.stdout
    assert prompts(fake_agent) == []


def test_compact_says_the_agent_has_no_way_to_compact(chat, fake_agent):  # noqa: F811
    result = chat(fake_agent, ["hello", "/compact"], agent_opts=NOTHING_LIKE_IT)
    assert result.returncode == 0, result.stderr
    assert "This agent has no way to compact the conversation" in result.stdout
    assert "/new starts a fresh session instead." in result.stdout
    assert prompts(fake_agent) == ["hello"]


def test_the_offered_command_reaches_the_agent_doubled(chat, fake_agent):  # noqa: F811
    result = chat(fake_agent, ["/compact", "//compress"], agent_opts=COMPRESS)
    assert result.returncode == 0, result.stderr
    assert prompts(fake_agent) == ["/compress"]


def test_help_before_the_first_prompt_lists_the_agents_commands(chat, fake_agent):  # noqa: F811
    result = chat(fake_agent, ["/help"], agent_opts=COMPRESS)
    assert result.returncode == 0, result.stderr
    assert "The agent also understands: /review, /compress" in result.stdout
    assert prompts(fake_agent) == []


MODES = "https://agentclientprotocol.com/modes#ask=Ask before edits,https://x.test/modes#auto=Auto"
MODELS = "gpt-5=GPT-5,small=Small"


def test_status_names_the_mode_and_the_model_from_the_config_options(chat, fake_agent):  # noqa: F811
    opts = ("--modes", MODES, "--models", MODELS, "--config-options")
    result = chat(fake_agent, ["hello", "/status"], agent_opts=opts)
    assert result.returncode == 0, result.stderr
    assert "\nModel: GPT-5 (gpt-5)\n" in result.stdout
    assert "\nMode: Ask before edits\n" in result.stdout
    assert "Mode: https" not in result.stdout


def test_status_shows_a_mode_given_only_as_a_uri_by_its_last_part(chat, fake_agent):  # noqa: F811
    result = chat(fake_agent, ["hello", "/status"], agent_opts=("--modes", MODES))
    assert result.returncode == 0, result.stderr
    assert "\nMode: ask\n" in result.stdout
    assert "Mode: https" not in result.stdout


def _tool(call_id: str, title: str, kind: str) -> dict:  # type: ignore[type-arg]
    update = {"sessionUpdate": "tool_call", "toolCallId": call_id, "title": title, "kind": kind}
    return {"update": {**update, "status": "pending"}}


def _status(call_id: str, status: str) -> dict:  # type: ignore[type-arg]
    return {
        "update": {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": status}
    }


def test_the_tools_summary_leaves_out_a_tool_whose_approval_was_rejected(chat, fake_agent):  # noqa: F811
    steps = script(
        _tool("read_1", "Read a.py", "read"),
        _status("read_1", "completed"),
        _tool("call_1", "Run echo hi", "execute"),
        {"permission": {}},
        _status("call_1", "failed"),
        {"chunk": " done"},
    )
    result = chat(fake_agent, [steps, "3"])  # 3) No
    assert result.returncode == 0, result.stderr
    assert "Tools: 1 read\n" in result.stdout
    assert "command" not in result.stdout.split("Answered: No", 1)[1]


def test_the_tools_summary_counts_an_allowed_tool(chat, fake_agent):  # noqa: F811
    steps = script(
        _tool("call_1", "Run echo hi", "execute"),
        {"permission": {}},
        _status("call_1", "completed"),
        {"chunk": " done"},
    )
    result = chat(fake_agent, [steps, "1"])  # 1) Yes
    assert result.returncode == 0, result.stderr
    assert "Tools: 1 command" in result.stdout
