"""The command table: parsing per surface spelling, and help generated from the table."""

from __future__ import annotations

from bot.commands import COMMANDS, MODEL, NEW, STATUS, command_menu, help_text, parse_command


def test_a_slash_command_is_parsed_with_its_arguments() -> None:
    parsed = parse_command(("/",), "  /model claude-sonnet-4  ")
    assert parsed is not None and parsed.command is MODEL and parsed.args == "claude-sonnet-4"


def test_a_group_command_addressed_to_the_bot_by_name_is_recognised() -> None:
    parsed = parse_command(("/",), "/status@switchboard_bot")
    assert parsed is not None and parsed.command is STATUS


def test_a_bang_command_counts_only_where_the_surface_spells_commands_that_way() -> None:
    assert parse_command(("/",), "!new") is None
    parsed = parse_command(("/", "!"), "!new")
    assert parsed is not None and parsed.command is NEW


def test_unknown_commands_and_plain_text_are_left_for_the_agent() -> None:
    assert parse_command(("/",), "/context") is None
    assert parse_command(("/",), "please /new the file") is None
    assert parse_command(("/",), "/") is None


def test_help_lists_every_command_in_the_surfaces_first_spelling_and_the_agents_own() -> None:
    text = help_text(("!", "/"), agent_commands=("context", "new"))
    for command in COMMANDS:
        assert f"!{command.name}" in text
    agents_line = next(line for line in text.splitlines() if "agent also understands" in line)
    # one named like ours is listed in the spelling that reaches the agent
    assert "!context" in agents_line and "!!new" in agents_line and " !new" not in agents_line


def test_a_doubled_prefix_is_the_agents_command_even_when_named_like_ours() -> None:
    parsed = parse_command(("/",), "//status now")
    assert parsed is not None and parsed.command is not STATUS
    assert parsed.command.handler is None  # sent on as prompt text
    assert (parsed.command.name, parsed.args) == ("status", "now")
    bang = parse_command(("/", "!"), "!!new")
    assert bang is not None and bang.command.handler is None and bang.command.name == "new"
    assert parse_command(("/",), "// a comment") is None  # not a command at all: as typed


def test_the_menu_has_one_entry_per_command() -> None:
    assert [name for name, _ in command_menu()] == [command.name for command in COMMANDS]


def test_the_agents_command_spelled_with_another_prefix_is_the_agents() -> None:
    parsed = parse_command(("!", "/"), "!review main", agent_commands=("review", "plan"))
    assert parsed is not None and parsed.command.handler is None
    assert (parsed.command.name, parsed.args) == ("review", "main")
    assert parse_command(("!", "/"), "!unknown x", agent_commands=("review",)) is None
    # with the slash it goes to the agent as typed anyway; ours win over the agent's names
    assert parse_command(("/",), "/review", agent_commands=("review",)) is None
    ours = parse_command(("!", "/"), "!status", agent_commands=("status",))
    assert ours is not None and ours.command.handler is not None
