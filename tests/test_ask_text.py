"""Asking a person for text (`surfaces.abilities.AsksForText`): the question is posted so that
their next message is the answer, which still arrives as an ordinary `Inbound`.

Telegram (the real python-telegram-bot against the fake Bot API): a force reply, `selective`, that
in a group targets the person by replying to their last message, or by mentioning them when the
adapter has not seen one. The terminal (the adapter on a pipe): the prompt, then "answer> ", and
the next line taken at once even while the turn that asked still runs."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import pytest

from bot.commands import command_menu
from config.settings import TelegramSettings
from surfaces.abilities import AsksForText, SurfaceAbilities
from surfaces.base import ChoiceAnswer, ConversationKey, Inbound, UserRef
from surfaces.console.adapter import CONSOLE_KEY, LOCAL_USER, ConsoleSurface
from surfaces.console.convert import ANSWER_PROMPT, PROMPT
from surfaces.telegram.adapter import TelegramSurface
from surfaces.telegram.asking import PLACEHOLDER
from tests.engine_helpers import wait_for
from tests.fakes.telegram_api import BOT_USERNAME, FakeBotApi, Message, People
from tests.harness.surface import Received, running_surface
from tests.harness.telegram import telegram_access

pytestmark = pytest.mark.anyio

GROUP = -1001234567890  # allowlisted
PEOPLE = People()
ALICE, BOB = PEOPLE.alice, PEOPLE.bob
FAST: dict[str, Any] = {"min_edit_interval": 0.01, "group_preview_interval": 0.05}
FORCE_REPLY = {"force_reply": True, "selective": True, "input_field_placeholder": PLACEHOLDER}


@pytest.fixture
async def api() -> AsyncIterator[FakeBotApi]:
    async with FakeBotApi() as fake:
        fake.add_group(GROUP, "Team")
        fake.private_chat(ALICE)
        yield fake


@asynccontextmanager
async def receiving(api: FakeBotApi) -> AsyncIterator[tuple[TelegramSurface, Received]]:
    settings = TelegramSettings(**telegram_access(api, ALICE, BOB, allowed_chats=[str(GROUP)]))
    surface = TelegramSurface(settings, poll_timeout=2.0, shutdown_timeout=3.0, **FAST)
    received = Received()
    async with running_surface(surface, received, command_menu()):
        yield surface, received


def bot_message(api: FakeBotApi, chat: int, message_id: str) -> Message:
    return api.messages[(chat, int(message_id))]


# ---- Telegram ----------------------------------------------------------------------------------
async def test_telegram_is_found_as_asking_for_text_and_slack_like_surfaces_are_not(
    api: FakeBotApi,
) -> None:
    settings = TelegramSettings(**telegram_access(api, ALICE))
    telegram = TelegramSurface(settings, **FAST)
    found = SurfaceAbilities.of([telegram])  # type: ignore[list-item]
    assert isinstance(telegram, AsksForText) and found.text_askers == {"telegram": telegram}


async def test_in_a_private_chat_the_question_carries_a_selective_force_reply(
    api: FakeBotApi,
) -> None:
    key = ConversationKey("telegram", str(ALICE.id))
    async with receiving(api) as (surface, _):
        ref = await surface.ask_text(key, "What is your name?", user=UserRef(str(ALICE.id)))
    question = bot_message(api, ALICE.id, ref.id)
    assert question.text == "What is your name?"
    assert question.reply_markup == FORCE_REPLY  # as the bot sent it; PTB never reads it back
    assert question.reply_to is None  # only the person is there


async def test_in_a_group_it_replies_to_the_persons_last_message_and_their_reply_arrives(
    api: FakeBotApi,
) -> None:
    key = ConversationKey("telegram", str(GROUP))
    async with receiving(api) as (surface, received):
        api.post_message(GROUP, ALICE, f"@{BOT_USERNAME} book a table")
        api.post_message(GROUP, BOB, f"@{BOT_USERNAME} me too")
        first, _ = await received.one(2)
        ref = await surface.ask_text(key, "For how many people?", user=first.user)
        question = bot_message(api, GROUP, ref.id)
        assert question.reply_markup == FORCE_REPLY
        # selective: it targets the sender of the message it replies to, Alice's, not Bob's
        assert question.reply_to is not None
        assert question.reply_to.sender["id"] == ALICE.id
        assert question.reply_to.text == f"@{BOT_USERNAME} book a table"
        api.post_message(GROUP, ALICE, "4", reply_to=question)  # her client's reply box
        answer = (await received.one(3))[2]
    assert (answer.key, answer.user.id, answer.text) == (key, str(ALICE.id), "4")


async def test_in_a_group_without_a_message_seen_it_mentions_the_person_by_id(
    api: FakeBotApi,
) -> None:
    key = ConversationKey("telegram", str(GROUP))
    async with receiving(api) as (surface, _):
        ref = await surface.ask_text(key, "Which <branch>?", user=UserRef(str(BOB.id), "Bob"))
    question = bot_message(api, GROUP, ref.id)
    assert question.reply_to is None and question.reply_markup == FORCE_REPLY
    assert question.text == "Bob Which <branch>?"  # the prompt's own markup escaped
    assert question.markup is not None
    assert question.markup.startswith(f'<a href="tg://user?id={BOB.id}">Bob</a> ')


async def test_the_fake_refuses_a_force_reply_that_is_not_one_and_one_on_an_edit(
    api: FakeBotApi,
) -> None:
    """The checks the tests above rely on: the fake answers malformed markup as Telegram does."""
    async with receiving(api) as (surface, _):
        bot = await surface._bot()  # the adapter's connected PTB Bot
        with pytest.raises(Exception, match=r"(?i)parse reply keyboard markup"):
            await bot.send_message(ALICE.id, "x", reply_markup={"force_reply": False})  # type: ignore[arg-type]
        sent = await bot.send_message(ALICE.id, "x")
        with pytest.raises(Exception, match=r"(?i)inline keyboard expected"):
            await bot.edit_message_text(
                "y",
                ALICE.id,
                sent.message_id,
                reply_markup={"force_reply": True},  # type: ignore[arg-type]
            )


# ---- the terminal -------------------------------------------------------------------------------
@contextmanager
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    try:
        yield read, write
    finally:
        for fd in (read, write):
            try:
                os.close(fd)
            except OSError:
                pass


class Turns:
    """The bot's side of the terminal: messages kept, none answered until `finish`."""

    def __init__(self) -> None:
        self.messages: list[Inbound] = []

    async def __call__(self, event: Inbound | ChoiceAnswer) -> None:
        assert isinstance(event, Inbound)
        self.messages.append(event)

    def finish(self) -> None:
        for message in self.messages:
            assert message.handled is not None
            message.handled.set()


async def test_a_script_s_next_line_answers_the_question_while_the_turn_still_runs() -> None:
    out = io.StringIO()
    turns = Turns()
    with pipe() as (read, write):
        console = ConsoleSurface(input_fd=read, output=out, interactive=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(console.run, turns)
            os.write(write, b"book a table\nFour\nand a window seat\n")
            await wait_for(lambda: len(turns.messages) == 1, "the first message")
            # piped, a line waits for the running turn; the turn asks for text
            ref = await console.ask_text(CONSOLE_KEY, "For how many people?", user=LOCAL_USER)
            await wait_for(lambda: len(turns.messages) == 2, "the answer, while the turn runs")
            answer = turns.messages[1]
            assert (answer.key, answer.user, answer.text) == (CONSOLE_KEY, LOCAL_USER, "Four")
            turns.finish()  # the turn ends: the line after the answer is a message of its own
            await wait_for(lambda: len(turns.messages) == 3, "the line after the turn")
            turns.finish()
            os.close(write)
    assert ref.key == CONSOLE_KEY
    shown = out.getvalue()
    assert shown.startswith("For how many people?\n")
    assert PROMPT not in shown and ANSWER_PROMPT not in shown  # nothing prompts a script


async def test_on_a_terminal_the_input_prompt_says_an_answer_is_wanted() -> None:
    out = io.StringIO()
    turns = Turns()
    with pipe() as (read, write):
        console = ConsoleSurface(input_fd=read, output=out, interactive=True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(console.run, turns)
            os.write(write, b"book a table\n")
            await wait_for(lambda: len(turns.messages) == 1, "the first message")
            await console.ask_text(CONSOLE_KEY, "For how many people?", user=LOCAL_USER)
            assert out.getvalue().endswith(f"For how many people?\n{ANSWER_PROMPT}")
            os.write(write, b"Four\n")
            await wait_for(lambda: len(turns.messages) == 2, "the answer")
            assert turns.messages[1].text == "Four"
            turns.finish()
            # the terminal echoed "Four" and its newline after "answer> ": the usual prompt next
            await wait_for(
                lambda: out.getvalue().rpartition(ANSWER_PROMPT)[2].startswith(PROMPT),
                "the usual prompt again",
            )
            os.close(write)
