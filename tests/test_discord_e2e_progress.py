"""Issue 13 on Discord, end to end, the way back: the agent's images and files as attachments, its
plan and tool calls in the live message, the Stop button on it, the usage footer, and the agent's
commands as guild commands; through the real discord.py, our adapter and `BotApp`, against the
fake Discord and the scripted fake agent."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from surfaces.base import STATUS_MARK
from surfaces.discord.files import UPLOAD_LIMIT
from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.discord_api import Message
from tests.test_discord_e2e_files import PNG, Chat, discord_chat

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

HANGING = script({"chunk": "working on it"}, {"hang": True})


def chunk(content: dict[str, Any]) -> dict[str, Any]:
    return {"update": {"sessionUpdate": "agent_message_chunk", "content": content}}


def tool(call_id: str, title: str, kind: str, **raw: str) -> dict[str, Any]:
    update: dict[str, Any] = {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": title,
        "kind": kind,
        "status": "in_progress",
    }
    if raw:
        update["rawInput"] = raw
    return {"update": update}


def done(call_id: str) -> dict[str, Any]:
    update = {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "completed"}
    return {"update": update}


PLAN = {
    "update": {
        "sessionUpdate": "plan",
        "entries": [
            {"content": "Read the parser", "status": "completed", "priority": "high"},
            {"content": "Fix the off-by-one", "status": "in_progress", "priority": "high"},
            {"content": "Run the tests", "status": "pending", "priority": "medium"},
        ],
    }
}


def live_texts(chat: Chat, channel: str) -> list[str]:
    """Every text the bot posted or edited into `channel`, in order."""
    calls = chat.fake.routes("create_message", channel) + chat.fake.routes("edit_message", channel)
    calls.sort(key=lambda call: call.at)
    return [str((call.body or {}).get("content", "")) for call in calls]


def stop_button(chat: Chat, channel: str) -> tuple[Message, str] | None:
    """The message in `channel` that carries a Stop button now, and the button's id."""
    for message in chat.fake.bot_messages(channel):
        for button in message.buttons():
            if button.get("label") == "Stop":
                return message, str(button["custom_id"])
    return None


async def thread_of(chat: Chat, text: str) -> str:
    """Alice mentions the bot in #general with `text`; the thread the conversation moves to."""
    chat.fake.post(chat.general, chat.alice, text, mention=True)
    await wait_for(lambda: chat.fake.threads(), "the thread")
    (thread,) = chat.fake.threads()
    return thread.id


# ---- files out ----------------------------------------------------------------------------------
async def test_an_image_and_a_workspace_file_from_the_agent_arrive_as_attachments(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    report = tmp_path / "out" / "report.txt"
    report.parent.mkdir()
    report.write_text("all green\n")
    image = {"type": "image", "mimeType": "image/png", "data": base64.b64encode(PNG).decode()}
    link = {"type": "resource_link", "uri": report.as_uri(), "name": "report.txt"}
    steps = script({"chunk": "Here they are."}, chunk(image), chunk(link))
    async with discord_chat(tmp_path, fake_agent) as chat:
        chat.fake.dm(chat.alice, steps)
        await wait_for(
            lambda: sum(len(m.files) for m in chat.fake.bot_messages(chat.dm)) == 2,
            "both uploads",
        )
        await wait_for(chat.idle, "the end of the turn")
        uploads = [f for m in chat.fake.bot_messages(chat.dm) for f in m.files]
        assert "Here they are." in chat.said()
    (document,) = [f for f in uploads if f.filename == "report.txt"]
    (picture,) = [f for f in uploads if f is not document]
    assert document.data == b"all green\n"
    assert picture.data == PNG and picture.filename.endswith(".png")


async def test_an_agent_file_over_discords_upload_limit_becomes_a_note_with_its_path(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    big = tmp_path / "big.log"
    big.write_bytes(b"z" * (UPLOAD_LIMIT + 1))  # over what a bot may upload
    link = {"type": "resource_link", "uri": big.as_uri(), "name": "big.log"}
    async with discord_chat(tmp_path, fake_agent) as chat:
        chat.fake.dm(chat.alice, script({"chunk": "The log."}, chunk(link)))
        await wait_for(lambda: "big.log" in chat.said(), "the note")
        await wait_for(chat.idle, "the end of the turn")
        assert all(not m.files for m in chat.fake.bot_messages(chat.dm))
        assert "too big to upload here" in chat.said()
    assert not any(call.status == 413 for call in chat.fake.routes("create_message"))


# ---- progress in the live message ---------------------------------------------------------------
async def test_the_plan_and_tool_calls_show_in_the_live_message_and_the_final_sums_them_up(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    steps = script(
        {"chunk": "On it."},
        PLAN,
        tool("t1", "Read file", "read", path="src/a.py"),
        {"sleep": 0.4},
        done("t1"),
        tool("t2", "Search", "search", query="parse"),
        {"sleep": 0.4},
        done("t2"),
        {"chunk": " Done."},
    )
    async with discord_chat(tmp_path, fake_agent) as chat:
        chat.fake.dm(chat.alice, steps)
        await wait_for(lambda: "Tools:" in chat.said(), "the final")
        await wait_for(chat.idle, "the end of the turn")
        live = live_texts(chat, chat.dm)
        final = chat.shown()[-1]
    plan = "Plan (1/3):\n✓ Read the parser\n▸ Fix the off-by-one\n○ Run the tests"
    assert any(STATUS_MARK + "working\n" + plan in text for text in live), live
    assert any("▸ Read file (src/a.py)" in text for text in live), live
    assert any("✓ Read file (src/a.py)\n▸ Search (parse)" in text for text in live), live
    assert final == "On it. Done.\n\nTools: 1 read, 1 search"
    assert stop_button(chat, chat.dm) is None, "the final carries no button"


# ---- the Stop button ----------------------------------------------------------------------------
async def test_the_requester_presses_stop_and_the_turn_stops(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with discord_chat(tmp_path, fake_agent) as chat:
        chat.fake.dm(chat.alice, HANGING)
        await wait_for(lambda: stop_button(chat, chat.dm), "the Stop button")
        found = stop_button(chat, chat.dm)
        assert found is not None
        message, token = found
        press = chat.fake.press(chat.alice, message.id, token)
        await wait_for(lambda: "The turn was stopped." in chat.said(), "the stop")
        await wait_for(chat.idle, "the end of the turn")
        assert stop_button(chat, chat.dm) is None
    assert press.callback is not None and press.callback["type"] == 6  # acknowledged at once
    assert not press.followups, "the requester is told nothing privately"
    assert len(fake_agent.frames_in("session/cancel")) == 1


async def test_someone_else_pressing_stop_is_told_why_and_the_turn_goes_on(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with discord_chat(tmp_path, fake_agent) as chat:
        thread = await thread_of(chat, HANGING)
        await wait_for(lambda: stop_button(chat, thread), "the Stop button")
        found = stop_button(chat, thread)
        assert found is not None
        message, token = found
        bobs = chat.fake.press(chat.bob, message.id, token)  # may chat, did not ask
        await wait_for(lambda: bobs.followups, "the notice to Bob")
        (notice,) = [chat.fake.messages[i] for i in bobs.followups]
        assert notice.ephemeral and notice.content == "Only Alice or an approver can stop this."
        malloreys = chat.fake.press(chat.mallory, message.id, token)  # on no list: silence
        assert not chat.idle(thread)
        assert fake_agent.frames_in("session/cancel") == []
        alices = chat.fake.press(chat.alice, message.id, token)
        await wait_for(lambda: "The turn was stopped." in chat.said(thread), "the stop")
        assert alices.callback is not None
    assert malloreys.callback is None and not malloreys.followups
    assert len(fake_agent.frames_in("session/cancel")) == 1


# ---- the usage footer ---------------------------------------------------------------------------
async def test_the_final_carries_the_context_footer_and_the_compact_hint(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    usage = {"update": {"sessionUpdate": "usage_update", "used": 85, "size": 100}}
    async with discord_chat(tmp_path, fake_agent) as chat:
        chat.fake.dm(chat.alice, script({"chunk": "Answered."}, usage))
        await wait_for(lambda: "Context 85%" in chat.said(), "the footer")
        await wait_for(chat.idle, "the end of the turn")
        final = chat.shown()[-1]
    assert final.startswith("Answered.") and final.endswith("\n\nContext 85%")
    assert "; !compact summarises it" in final  # past 80%: the hint, in Discord's spelling


# ---- the agent's commands -----------------------------------------------------------------------
async def test_the_agents_commands_become_guild_commands_and_using_one_reaches_the_agent(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    listed = [
        {"name": "review", "description": "Review the diff", "input": {"hint": "branch"}},
        {"name": "status", "description": "The agent's status"},  # clashes with ours
    ]
    update = {"update": {"sessionUpdate": "available_commands_update", "availableCommands": listed}}
    async with discord_chat(tmp_path, fake_agent) as chat:
        thread = await thread_of(chat, script(update, {"chunk": "ok"}))
        await wait_for(lambda: chat.fake.guild_commands, "the guild's commands")
        await wait_for(lambda: chat.idle(thread), "the end of the turn")
        (published,) = chat.fake.guild_commands.values()
        review = chat.fake.slash(chat.alice, "review", channel_id=thread, options={"input": "main"})
        await wait_for(lambda: len(fake_agent.prompt_texts()) == 2, "the command's turn")
        await wait_for(lambda: chat.idle(thread), "the end of that turn")
    by_name = {command["name"]: command for command in published}
    assert sorted(by_name) == ["agent-status", "review"]
    assert by_name["review"]["options"][0]["description"] == "branch"
    assert fake_agent.prompt_texts()[1] == "/review main"
    assert review.callback is not None and review.callback["type"] == 5
    assert [c["name"] for c in chat.fake.commands].count("status") == 1, "ours stay global"


async def test_stop_works_on_a_turn_started_by_a_slash_command_whose_reply_is_its_followup(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    listed = [{"name": "work", "description": "Do the work", "input": {"hint": "what"}}]
    update = {"update": {"sessionUpdate": "available_commands_update", "availableCommands": listed}}
    async with discord_chat(tmp_path, fake_agent) as chat:
        thread = await thread_of(chat, script(update, {"chunk": "ok"}))
        await wait_for(lambda: chat.fake.guild_commands, "the guild's commands")
        await wait_for(lambda: chat.idle(thread), "the end of the first turn")
        command = chat.fake.slash(chat.alice, "work", channel_id=thread, options={"input": HANGING})
        await wait_for(lambda: stop_button(chat, thread), "the Stop button")
        found = stop_button(chat, thread)
        assert found is not None
        message, token = found
        assert message.interaction_id, "the live reply is the command's followup"
        chat.fake.press(chat.alice, message.id, token)
        await wait_for(lambda: "The turn was stopped." in chat.said(thread), "the stop")
        await wait_for(lambda: chat.idle(thread), "the end of the turn")
        assert stop_button(chat, thread) is None, "the button went with the final edit"
    assert command.followups and chat.fake.messages[command.followups[0]] is message
    assert len(fake_agent.frames_in("session/cancel")) == 1


async def test_a_reply_longer_than_the_setting_allows_arrives_as_reply_md_with_a_summary(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    first = "The short version: it works."
    body = first + "\n\n" + "\n\n".join(f"Detail {n}: " + "words " * 60 for n in range(30))
    assert len(body) > 3 * 2000  # more than two Discord messages
    async with discord_chat(tmp_path, fake_agent, reply_file_after=2) as chat:
        chat.fake.dm(chat.alice, script({"chunk": body}))
        await wait_for(lambda: any(m.files for m in chat.fake.bot_messages(chat.dm)), "the file")
        await wait_for(chat.idle, "the end of the turn")
        (upload,) = [f for m in chat.fake.bot_messages(chat.dm) for f in m.files]
        shown = [text for text in chat.shown() if text]
    assert (upload.filename, upload.data.decode()) == ("reply.md", body)
    assert f"{first}\n\n(Full reply attached: reply.md)" in shown
    assert not any("Detail 29" in text for text in shown), "the long text itself is not posted"


async def test_a_live_reply_over_two_messages_carries_one_stop_button_on_the_newest(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    long = "\n\n".join(f"Paragraph {n}: " + "text " * 40 for n in range(15))  # > 2000 chars
    async with discord_chat(tmp_path, fake_agent) as chat:
        chat.fake.dm(chat.alice, script({"chunk": long}, {"hang": True}))
        await wait_for(lambda: len(chat.shown()) >= 2, "the reply's second message")
        await wait_for(lambda: stop_button(chat, chat.dm), "the Stop button")
        messages = chat.fake.bot_messages(chat.dm)
        carrying = [m for m in messages if m.buttons()]
        assert [m.id for m in carrying] == [messages[-1].id]
        found = stop_button(chat, chat.dm)
        assert found is not None
        message, token = found
        chat.fake.press(chat.alice, message.id, token)
        await wait_for(lambda: "The turn was stopped." in chat.said(), "the stop")
        await wait_for(chat.idle, "the end of the turn")
        assert all(not m.buttons() for m in chat.fake.bot_messages(chat.dm))
