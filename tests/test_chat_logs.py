"""In `switchboard chat` the terminal is the conversation: at the default log level no log line
(the audit channel's approval record included) is written between the approval menu and the
reply. The real CLI with stderr and stdout on one pipe, as a terminal shows them, and a real fake
agent."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import FakeAgent
from tests.test_chat_cli import chat_argv

MENU_END = "Type a number to answer."
REPLY = "permission:allow_once"


def _chat_as_a_terminal_shows_it(
    env: dict[str, str], agent: FakeAgent, cwd: Path, **extra: str
) -> str:
    proc = subprocess.run(
        chat_argv(agent),
        input="SCN_PERMISSION\n1\n",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=60,
        env={**env, **extra},
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def test_no_audit_line_lands_between_the_menu_and_the_reply(cli_env, fake_agent, tmp_path, run_cli):
    shown = _chat_as_a_terminal_shows_it(cli_env, fake_agent, tmp_path)
    between = shown[shown.index(MENU_END) : shown.index(REPLY)]
    assert between == f"{MENU_END}\nAnswered: Yes\n"
    assert "switchboard.audit" not in shown and '"level"' not in shown
    audit = run_cli("audit")  # the approval is recorded all the same
    assert audit.returncode == 0, audit.stderr
    assert '"outcome": "allow_once"' in audit.stdout


def test_at_info_level_the_audit_line_is_written_on_stderr(cli_env, fake_agent, tmp_path):
    shown = _chat_as_a_terminal_shows_it(
        cli_env, fake_agent, tmp_path, SWITCHBOARD_LOG_LEVEL="info"
    )
    assert '"logger": "switchboard.audit"' in shown
