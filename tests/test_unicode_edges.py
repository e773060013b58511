"""Text that cannot be encoded never gets in: `config.valid_text` itself, the neutral surface types
that every adapter builds, and the agent side (what the agent sends us and what we write to it)
against the scripted fake agent as a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from acp import EventKind
from config import valid_text
from surfaces.base import ChoiceAnswer, ConversationKey, Inbound, UserRef, count_utf16
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, script

WAIT = 20  # seconds: an upper bound, never a measurement
# A lone surrogate, NUL, an escape sequence, an emoji and an astral noncharacter in one text.
HOSTILE = "a\ud800b\x00c \x1b[31m😀 \U0010ffff"
MADE_VALID = "a\ufffdbc [31m😀 \ufffd"


def encodes(text: str) -> bool:
    text.encode("utf-8")
    text.encode("utf-16-le")
    return True


# ---- valid_text -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "expected"),
    [
        pytest.param(
            "plain text, tabs\tand\nlines\r\n", "plain text, tabs\tand\nlines\r\n", id="kept"
        ),
        pytest.param("日本語 😀 é", "日本語 😀 é", id="astral-kept"),
        pytest.param("x\ud800y\udfffz", "x\ufffdy\ufffdz", id="lone-surrogates"),
        pytest.param("caf\udce9", "caf\ufffd", id="surrogateescape-byte"),
        pytest.param("\ud83d\ude00", "😀", id="split-pair-joined"),
        pytest.param("\x00nul\x07bell\x7fdel\x9bcsi", "nulbelldelcsi", id="controls-removed"),
        pytest.param("\ufdd0\ufffe\U0001ffff", "\ufffd\ufffd\ufffd", id="noncharacters"),
        pytest.param(HOSTILE, MADE_VALID, id="mixed"),
    ],
)
def test_valid_text_keeps_valid_unicode_and_repairs_the_rest(given: str, expected: str) -> None:
    assert valid_text(given) == expected
    assert encodes(valid_text(given))


def test_valid_text_returns_valid_text_unchanged() -> None:
    text = "nothing to repair here " * 10
    assert valid_text(text) is text


def test_utf16_length_is_counted_on_valid_text_and_never_raises() -> None:
    assert count_utf16("😀") == 2
    assert count_utf16("a\ud800") == 2  # the surrogate counts as the U+FFFD it becomes
    assert count_utf16("a\x00b") == 2
    assert count_utf16(HOSTILE) == len(MADE_VALID.encode("utf-16-le")) // 2


def test_every_surface_type_is_valid_unicode_however_an_adapter_built_it() -> None:
    key = ConversationKey("telegram", "chat\x00\ud800", "thread\udcff")
    user = UserRef("id\ud800", "Name\x00\U0010ffff")
    inbound = Inbound(key, user, HOSTILE, "event\ud800")
    answer = ChoiceAnswer(key, user, "token\x00\ud800", "event\x00")
    assert (key.chat, key.thread) == ("chat\ufffd", "thread\ufffd")
    assert (user.id, user.name) == ("id\ufffd", "Name\ufffd")
    assert (inbound.text, inbound.event_id) == (MADE_VALID, "event\ufffd")
    assert (answer.token, answer.event_id) == ("token\ufffd", "event")
    assert inbound.key == ConversationKey("telegram", "chat\ufffd", "thread\ufffd")


# ---- the agent side ---------------------------------------------------------------------------
@pytest.mark.anyio
async def test_agent_text_tool_titles_and_commands_reach_us_as_valid_unicode(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    tool = {
        "sessionUpdate": "tool_call",
        "toolCallId": "call_1",
        "title": "Run \ud800",
        "kind": "execute",
        "rawInput": {"command": ["echo", "\x00\udcff"]},
    }
    commands = {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [{"name": "x\ud800"}],
    }
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            # UTF-8 bytes of a surrogate (ED A0 80): decoded with surrogatepass, then repaired
            raw = (
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": {
                            "sessionId": session.session_id,
                            "update": {
                                "sessionUpdate": "agent_message_chunk",
                                "content": {"type": "text", "text": "raw-SURROGATE"},
                            },
                        },
                    }
                )
                .encode()
                .replace(b"SURROGATE", b"\xed\xa0\x80")
            )
            events = await collect_turn(
                session,
                script(
                    {"chunk": HOSTILE},
                    {"raw_hex": raw.hex()},
                    {"update": tool},
                    {"update": commands},
                    {"stop": "end_turn"},
                ),
            )
    assert texts(events) == [MADE_VALID, "raw-\ufffd"]
    (call,) = [event.tool for event in events if event.kind is EventKind.TOOL_CALL]
    assert call is not None
    assert call.describe() == "Run \ufffd (echo \ufffd)"
    (listed,) = [event.commands for event in events if event.kind is EventKind.COMMANDS]
    assert listed == ("x\ufffd",)


@pytest.mark.anyio
async def test_a_prompt_with_a_lone_surrogate_is_written_to_the_agent_as_valid_utf8(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    """The transport's last defence: text that got past every edge still cannot break a frame."""
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(fake_agent, workspace)) as client:
            session = await client.open_session()
            events = await collect_turn(session, "left \ud800 right")
            assert client.runtime.alive
    assert texts(events) == ["Echo: ", "left \ufffd right"]
    (sent,) = fake_agent.frames_in("session/prompt")
    assert sent["params"]["prompt"][0]["text"] == "left \ufffd right"
