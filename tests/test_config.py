"""Settings (config/settings.py): SWITCHBOARD_* environment (nested with `__`), the JSON file named
by SWITCHBOARD_CONFIG, their precedence, and errors that name the setting."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from config import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("SWITCHBOARD_"):
            monkeypatch.delenv(name)


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    path = tmp_path / "switchboard.json"
    monkeypatch.setenv("SWITCHBOARD_CONFIG", str(path))

    def write(content: Any) -> Path:
        text = content if isinstance(content, str) else json.dumps(content)
        path.write_text(text, encoding="utf-8")
        return path

    return write


def test_without_any_configuration_the_defaults_apply() -> None:
    settings = load_settings()
    assert settings.agent == "kiro"
    assert settings.retry.transient_retries == 3 and settings.retry.base_delay == 2.0
    assert settings.telegram.allowed_users == []
    assert settings.allow_ungated_tools is False


def test_environment_variables_use_the_switchboard_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_AGENT", "claude")
    monkeypatch.setenv("SWITCHBOARD_PROMPT_TIMEOUT", "42.5")
    monkeypatch.setenv("SWITCHBOARD_ALLOW_UNGATED_TOOLS", "true")
    monkeypatch.setenv("AGENT", "codex")  # unprefixed: not ours
    settings = load_settings()
    assert settings.agent == "claude"
    assert settings.prompt_timeout == 42.5
    assert settings.allow_ungated_tools is True


def test_nested_settings_use_a_double_underscore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_RETRY__BASE_DELAY", "0.5")
    monkeypatch.setenv("SWITCHBOARD_RETRY__TRANSIENT_RETRIES", "5")
    monkeypatch.setenv("SWITCHBOARD_TELEGRAM__TOKEN", "123456:abc")
    monkeypatch.setenv("SWITCHBOARD_SLACK__PORT", "3100")
    settings = load_settings()
    assert settings.retry.base_delay == 0.5
    assert settings.retry.transient_retries == 5
    assert settings.retry.jitter == 0.25  # untouched siblings keep their defaults
    assert settings.telegram.token == "123456:abc"
    assert settings.slack.port == 3100


def test_the_json_file_named_by_switchboard_config_is_read_with_nested_objects(
    config_file,  # type: ignore[no-untyped-def]
) -> None:
    config_file(
        {
            "agent": "codex",
            "model": "gpt-b",
            "retry": {"transient_retries": 1, "base_delay": 0.25},
            "slack": {"bot_token": "xoxb-file", "signing_secret": "s3cret", "port": 4000},
        }
    )
    settings = load_settings()
    assert settings.agent == "codex" and settings.model == "gpt-b"
    assert settings.retry.transient_retries == 1 and settings.retry.base_delay == 0.25
    assert settings.slack.bot_token == "xoxb-file" and settings.slack.port == 4000


def test_the_environment_beats_the_file_field_by_field(
    config_file,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config_file({"agent": "codex", "retry": {"transient_retries": 1, "base_delay": 0.25}})
    monkeypatch.setenv("SWITCHBOARD_AGENT", "claude")
    monkeypatch.setenv("SWITCHBOARD_RETRY__BASE_DELAY", "0.75")
    settings = load_settings()
    assert settings.agent == "claude"
    assert settings.retry.base_delay == 0.75
    assert settings.retry.transient_retries == 1  # the file's sibling value survives


def test_explicit_overrides_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_AGENT", "claude")
    assert load_settings(agent="codex").agent == "codex"
    assert load_settings(agent=None).agent == "claude"  # None means "not given"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        pytest.param("{not json", "not valid JSON", id="invalid-json"),
        pytest.param(b"\xff\xfe{", "not valid JSON", id="not-utf8"),
        pytest.param("[1, 2]", "must hold a JSON object", id="not-an-object"),
    ],
)
def test_a_broken_config_file_is_a_logged_warning_and_defaults_not_a_crash(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    content: str | bytes,
    said: str,
) -> None:
    path = tmp_path / "broken.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    monkeypatch.setenv("SWITCHBOARD_CONFIG", str(path))
    monkeypatch.setenv("SWITCHBOARD_MODEL", "from-env")
    caplog.set_level(logging.WARNING, logger="config.settings")
    settings = load_settings()
    assert settings.agent == "kiro"
    assert settings.model == "from-env"  # the environment still applies
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and said in warnings[0].getMessage()
    assert str(path) in warnings[0].getMessage()


def test_a_missing_config_file_is_a_logged_warning_and_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SWITCHBOARD_CONFIG", str(tmp_path / "absent.json"))
    caplog.set_level(logging.WARNING, logger="config.settings")
    assert load_settings().agent == "kiro"
    assert any("does not exist" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        pytest.param("SWITCHBOARD_RETRY__BASE_DELAY", "-1", id="nested-out-of-range"),
        pytest.param("SWITCHBOARD_RETRY__BASE_DELAY", "soon", id="nested-not-a-number"),
        pytest.param("SWITCHBOARD_RETRY__JITTER", "2", id="nested-jitter-over-1"),
        pytest.param("SWITCHBOARD_PROMPT_TIMEOUT", "0", id="top-level-not-positive"),
        pytest.param("SWITCHBOARD_AGENT", "gemini", id="unknown-agent"),
        pytest.param("SWITCHBOARD_SLACK__PORT", "70000", id="port-out-of-range"),
    ],
)
def test_an_invalid_value_is_a_config_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.setting == name
    assert name in str(caught.value)
    assert caught.value.problem


def test_an_invalid_value_from_the_file_is_named_by_its_setting(
    config_file,  # type: ignore[no-untyped-def]
) -> None:
    config_file({"retry": {"base_delay": "soon"}})
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.setting == "SWITCHBOARD_RETRY__BASE_DELAY"


def test_allowlists_from_the_environment_split_on_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_TELEGRAM__ALLOWED_USERS", " 123, 456,,789 ")
    monkeypatch.setenv("SWITCHBOARD_SLACK__ALLOWED_USERS", "U01ABC")
    monkeypatch.setenv("SWITCHBOARD_DISCORD__ALLOWED_USERS", "")
    settings = load_settings()
    assert settings.telegram.allowed_users == ["123", "456", "789"]
    assert settings.slack.allowed_users == ["U01ABC"]
    assert settings.discord.allowed_users == []


def test_allowlists_from_the_file_accept_lists_numbers_and_comma_strings(
    config_file,  # type: ignore[no-untyped-def]
) -> None:
    config_file(
        {
            "telegram": {"allowed_users": [123, " 456 ", ""]},
            "slack": {"allowed_users": "U1,U2"},
            "discord": {"allowed_users": 42},
        }
    )
    settings = load_settings()
    assert settings.telegram.allowed_users == ["123", "456"]
    assert settings.slack.allowed_users == ["U1", "U2"]
    assert settings.discord.allowed_users == ["42"]


@pytest.mark.parametrize("name", ["SWITCHBOARD_RETRY", "SWITCHBOARD_TELEGRAM"])
def test_a_nested_setting_given_as_text_that_is_not_json_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "not json")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert caught.value.setting == name


def test_a_slack_bot_token_without_a_mode_is_a_config_error_naming_slack(monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_SLACK__BOT_TOKEN", "xoxb-1")
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert "SWITCHBOARD_SLACK" in str(raised.value) and "APP_TOKEN" in str(raised.value)


def test_unknown_keys_in_the_config_file_are_named_at_every_depth(
    config_file,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
) -> None:
    config_file(
        {
            "telgram": {"token": "x"},
            "telegram": {"tokn": "", "allowed_users": "1"},
            "retry": {"base_dealy": 1, "reconnects": 2},
            "agent": "claude",
        }
    )
    caplog.set_level(logging.WARNING, logger="config.settings")
    settings = load_settings()
    assert (settings.agent, settings.retry.reconnects) == ("claude", 2)  # known keys still apply
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.endswith("telgram, telegram.tokn, retry.base_dealy")


def test_a_config_file_with_only_known_keys_warns_nothing(
    config_file,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
) -> None:
    config_file({"telegram": {"token": "", "allowed_users": [1, 2]}, "model": "m"})
    caplog.set_level(logging.WARNING, logger="config.settings")
    load_settings()
    assert not caplog.records


def test_a_config_error_names_the_option_first_when_one_is_given() -> None:
    error = ConfigError("SWITCHBOARD_PROMPT_TIMEOUT", "must be greater than 0", option="--timeout")
    assert str(error) == "Invalid --timeout (SWITCHBOARD_PROMPT_TIMEOUT): must be greater than 0"
    assert (error.setting, error.option) == ("SWITCHBOARD_PROMPT_TIMEOUT", "--timeout")


def test_pydantic_wording_reads_as_what_the_value_must_be() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(prompt_timeout=-1)
    assert caught.value.problem == "must be greater than 0"
    with pytest.raises(ConfigError) as caught:
        load_settings(agent_command='my-agent --name "half')
    assert caught.value.setting == "SWITCHBOARD_AGENT_COMMAND"
    assert caught.value.problem.startswith("cannot be split into words")
