"""Issue 21's settings: `SWITCHBOARD_AGENT_ENV` as a comma-separated or JSON list, and the
agent plan's environment and isolation built from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.agent_plans import agent_plan
from config import ConfigError, load_settings


@pytest.mark.parametrize(
    "written",
    ['["GITHUB_TOKEN", "MY_TOOL_*"]', "GITHUB_TOKEN, MY_TOOL_*", "GITHUB_TOKEN,MY_TOOL_*"],
)
def test_agent_env_is_a_comma_separated_or_json_list(
    monkeypatch: pytest.MonkeyPatch, written: str
) -> None:
    monkeypatch.setenv("SWITCHBOARD_AGENT_ENV", written)
    assert load_settings().agent_env == ["GITHUB_TOKEN", "MY_TOOL_*"]


def test_a_broken_json_list_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_AGENT_ENV", '["GITHUB_TOKEN",')
    with pytest.raises(ConfigError, match="SWITCHBOARD_AGENT_ENV: is not a JSON list"):
        load_settings()


def test_an_unknown_sandbox_mode_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_AGENT_SANDBOX", "docker")
    with pytest.raises(ConfigError, match="SWITCHBOARD_AGENT_SANDBOX"):
        load_settings()


def test_the_agent_plan_passes_listed_names_and_the_agent_home_never_switchboards(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "listed")
    monkeypatch.setenv("MY_TOOL_MODE", "listed by prefix")
    monkeypatch.setenv("OTHER_SECRET", "not listed")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "claude's own")
    monkeypatch.setenv("SWITCHBOARD_AGENT_ENV", "GITHUB_TOKEN,MY_TOOL_*,SWITCHBOARD_STATE")
    monkeypatch.setenv("SWITCHBOARD_STATE", str(tmp_path / "state" / "state.db"))
    monkeypatch.setenv("SWITCHBOARD_AGENT_SANDBOX", "bwrap")
    settings = load_settings(agent="claude", agent_command="claude-agent-acp", workspace=tmp_path)
    spec, _ = agent_plan(settings)
    home = tmp_path / "state" / "agent-home"
    assert spec.env["GITHUB_TOKEN"] == "listed"
    assert spec.env["MY_TOOL_MODE"] == "listed by prefix"
    assert spec.env["ANTHROPIC_API_KEY"] == "claude's own"
    assert spec.env["HOME"] == str(home)
    assert "OTHER_SECRET" not in spec.env
    assert not [name for name in spec.env if name.startswith("SWITCHBOARD_")]
    assert spec.isolation.sandboxed and spec.isolation.home == home
    assert tmp_path / "state" in spec.isolation.hidden


def test_the_suite_runs_agents_unsandboxed_unless_a_test_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tests/conftest.py's pin holds with every SWITCHBOARD_* variable cleared (as many tests
    do); a test about isolation sets the sandbox itself."""
    monkeypatch.delenv("SWITCHBOARD_AGENT_SANDBOX", raising=False)
    monkeypatch.delenv("SWITCHBOARD_AGENT_ENV", raising=False)
    assert load_settings().agent_sandbox == "off"
    assert "FAKE_AGENT_*" in load_settings().agent_env
    monkeypatch.setenv("SWITCHBOARD_AGENT_SANDBOX", "auto")
    assert load_settings().agent_sandbox == "auto"
