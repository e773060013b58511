"""The reply stream: fence-safe splitting, pacing, coalesced live edits and guaranteed delivery,
against the recording surface of tests/engine_helpers.py with tiny limits."""

from __future__ import annotations

import itertools
import logging
import random
import re
import time
from typing import Any

import anyio
import pytest

from bot.markdown_split import settled_parts
from bot.reply import open_reply, split_message
from surfaces.base import (
    STATUS_MARK,
    Choice,
    ConversationKey,
    MessageRef,
    count_chars,
    count_utf16,
)
from surfaces.errors import MessageGone, RateLimited, SendFailed
from surfaces.pacing import ChatPacer
from tests.engine_helpers import ScriptedSurface, wait_for
from tests.harness.clock import virtual_time

KEY = ConversationKey("test", "chat-1")
FENCE_LINE = re.compile(r" {0,3}```")


def recording_surface(*, max_chars: int = 40, **options: Any) -> ScriptedSurface:
    """The recording surface, named "test" and with a tiny limit so that replies split."""
    return ScriptedSurface("test", max_chars=max_chars, **options)


def fast_pacer() -> ChatPacer:
    return ChatPacer(0.01)


def balanced(part: str) -> bool:
    return sum(1 for line in part.split("\n") if FENCE_LINE.match(line)) % 2 == 0


def content(text: str) -> str:
    """The text without fence lines and whitespace: what splitting must preserve."""
    kept = [line for line in text.split("\n") if not FENCE_LINE.match(line)]
    return "".join("".join(kept).split())


def random_markdown(rng: random.Random, emoji: bool = False) -> str:
    words = ["ok", "reply", "agent", "switchboard", "x" * 55, "a-very-long-identifier_name"]
    if emoji:
        words += ["😀", "👩‍💻", "é", "🇺🇦", "👍🏽"]
    blocks = []
    for _ in range(rng.randint(1, 12)):
        if rng.random() < 0.3:
            lang = rng.choice(["", "python", "bash"])
            code = [
                " " * rng.randint(0, 6) + " ".join(rng.choices(words, k=rng.randint(0, 6)))
                for _ in range(rng.randint(0, 8))
            ]
            blocks.append("\n".join([f"```{lang}", *code, "```"]))
        else:
            lines = [
                " ".join(rng.choices(words, k=rng.randint(1, 14))) for _ in range(rng.randint(1, 4))
            ]
            blocks.append("\n".join(lines))
    return rng.choice(["\n\n", "\n", "\n\n\n"]).join(blocks)


# -- split_message --------------------------------------------------------------------------------


def test_a_text_that_fits_is_one_part_and_an_empty_text_none() -> None:
    assert split_message("hello", 40, len) == ["hello"]
    assert split_message("", 40, len) == []


def test_splits_prefer_paragraphs_then_lines_then_words() -> None:
    paragraphs = "first paragraph is here\n\nsecond paragraph, also"
    assert split_message(paragraphs, 30, len) == [
        "first paragraph is here",
        "second paragraph, also",
    ]
    lines = "first line is here\nsecond line is here"
    assert split_message(lines, 30, len) == ["first line is here", "second line is here"]
    words = "one two three four five six seven"
    assert split_message(words, 20, len) == ["one two three four", "five six seven"]
    assert split_message("x" * 50, 20, len) == ["x" * 20, "x" * 20, "x" * 10]


def test_a_split_inside_a_fence_closes_it_and_reopens_it_with_its_language() -> None:
    code = "\n".join(f"value_{i} = {i}" for i in range(10))
    text = f"Here is the code:\n\n```python\n{code}\n```\n\nDone."
    parts = split_message(text, 40, len)
    assert len(parts) > 2
    for part in parts:
        assert len(part) <= 40
        assert balanced(part), part
    inner = [p for p in parts if "value_" in p]
    assert all(p.startswith("```python\n") and p.endswith("\n```") for p in inner)
    assert not any(p.strip() in {"```python\n```", "```"} for p in parts)  # no empty blocks
    assert content("\n".join(parts)) == content(text)


def test_random_texts_split_within_the_limit_with_balanced_fences_and_nothing_lost() -> None:
    rng = random.Random(20240601)
    for _ in range(400):
        text = random_markdown(rng)
        limit = rng.randint(30, 120)
        parts = split_message(text, limit, len)
        assert parts, text
        for part in parts:
            assert len(part) <= limit, (limit, part)
            assert balanced(part), (limit, part)
            assert part.strip()
        assert content("\n".join(parts)) == content(text)


def test_random_texts_with_emoji_fit_in_utf16_units_without_splitting_a_character() -> None:
    rng = random.Random(7)
    for _ in range(300):
        text = random_markdown(rng, emoji=True)
        limit = rng.randint(30, 90)
        parts = split_message(text, limit, count_utf16)
        for part in parts:
            assert count_utf16(part) <= limit, (limit, part)
            assert balanced(part)
            # no part starts with what must follow a character, or ends inside a ZWJ sequence
            assert not part.startswith(("\u200d", "\ufe0f", "\U0001f3fd")), part
            assert not part.endswith("\u200d"), part
        assert content("\n".join(parts)) == content(text)


def test_a_zwj_sequence_is_never_cut_apart() -> None:
    coder = "👩‍💻"  # woman, zero-width joiner, laptop: one picture
    parts = split_message(coder * 10, 6, count_utf16)
    assert parts == [coder] * 10
    flags = "🇺🇦🇫🇷🇯🇵"  # pairs of regional indicators
    assert split_message(flags * 3, 6, count_utf16) == ["🇺🇦", "🇫🇷", "🇯🇵"] * 3


# -- ChatPacer ------------------------------------------------------------------------------------


@pytest.mark.anyio
@virtual_time
async def test_the_pacer_spaces_turns_by_its_interval() -> None:
    pacer = ChatPacer(0.03, clock=anyio.current_time)
    stamps = []
    for _ in range(4):
        await pacer.wait_turn()
        stamps.append(anyio.current_time())
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(gap >= 0.025 for gap in gaps), gaps


@pytest.mark.anyio
@virtual_time
async def test_a_penalty_holds_back_every_turn_of_the_chat_including_reserved_ones() -> None:
    pacer = ChatPacer(0.01, clock=anyio.current_time)
    await pacer.wait_turn()
    begun = anyio.current_time()
    done: list[float] = []

    async def waiter() -> None:
        await pacer.wait_turn()
        done.append(anyio.current_time() - begun)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        tg.start_soon(waiter)
        await anyio.sleep(0.002)
        pacer.penalize(0.1)  # arrives while both are already waiting for their turn
    assert pacer.is_penalized() is False
    assert len(done) == 2 and min(done) >= 0.09, done


def test_chat_pacers_share_one_pacer_per_chat_across_threads() -> None:
    surface = recording_surface()
    pacers = surface.capabilities.pacing
    one = pacers.for_chat(ConversationKey("test", "c", "t1").chat)
    assert pacers.for_chat(ConversationKey("test", "c", "t2").chat) is one
    assert pacers.for_chat(ConversationKey("test", "d").chat) is not one
    assert one.min_interval == surface.capabilities.min_edit_interval


def test_settled_parts_are_those_no_appended_text_can_change() -> None:
    rng = random.Random(20261201)
    for _ in range(40):
        text = random_markdown(rng, emoji=rng.random() < 0.3)
        limit = rng.randint(30, 90)
        count = rng.choice([count_chars, count_utf16])
        whole = split_message(text, limit, count)
        seen = 0
        end = 0
        while end < len(text):
            end += rng.randint(1, 4)
            settled = settled_parts(text[:end], limit, count)
            assert settled == whole[: len(settled)], (text[:end], limit)
            assert len(settled) >= seen  # what settled stays settled
            seen = len(settled)
        assert seen >= len(whole) - 2 or len(whole) <= 1


def test_a_part_settles_only_once_the_text_is_past_its_window_and_its_fences_are_known() -> None:
    first = "a" * 20 + " " + "b" * 9  # 30 characters: a whole part, if a break followed
    # With one character more the cut is not known yet: a space next keeps the b's in the first
    # part, a longer word moves them to the second.
    assert settled_parts(first + "x", 30, len) == []
    assert split_message(first + " more", 30, len)[0] == first
    assert split_message(first + "xyz", 30, len)[0] == "a" * 20
    assert settled_parts(first + " more", 30, len) == [first]
    assert settled_parts(first + "xyz", 30, len) == ["a" * 20]
    # The line being written might still open a fence, which would change where parts break.
    line = "a" * 20 + "\n"
    assert settled_parts(line + "`" * 12, 30, len) == []
    assert settled_parts(line + "  ~~~ " + "y" * 8, 30, len) == []
    assert settled_parts(line + "``x" + "y" * 9, 30, len) == ["a" * 20]
    assert settled_parts(line + "    ```" + "y" * 5, 30, len) == ["a" * 20]  # indented: code
    assert settled_parts(line + "words " * 2, 30, len) == ["a" * 20]


# -- ReplyStream ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_rapid_updates_are_coalesced_into_few_edits_and_the_last_shows_the_final_text() -> (
    None
):
    surface = recording_surface(max_chars=4000)
    text = ""
    async with open_reply(surface, KEY, ChatPacer(0.05)) as reply:
        for i in range(100):
            text += f"w{i} "
            reply.update(text)
            await anyio.sleep(0.002)
        assert await reply.finish(text.strip()) is True
    operations = surface.ops("send", "edit")
    assert len(operations) < 20, len(operations)
    assert operations[-1].text == text.strip()
    assert list(surface.shown().values()) == [text.strip()]


@pytest.mark.anyio
async def test_unchanged_live_text_is_not_sent_again_and_the_final_is_one_formatted_edit() -> None:
    surface = recording_surface()
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        reply.update("hello")
        await anyio.sleep(0.05)
        reply.update("hello")
        reply.set_status(None)
        await anyio.sleep(0.05)
        assert await reply.finish("hello") is True
        assert await reply.finish("hello") is True  # a second finish has nothing left to do
    calls = [(c.op, c.text, c.formatted) for c in surface.ops("send", "edit")]
    assert calls == [("send", "hello", False), ("edit", "hello", True)]


@pytest.mark.anyio
async def test_a_long_reply_is_split_at_the_limit_without_breaking_fences() -> None:
    surface = recording_surface(max_chars=40)
    code = "\n".join(f"print({i} * {i})" for i in range(12))
    final = f"The answer is below.\n\n```python\n{code}\n```\n\nThat prints squares."
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        for end in range(10, len(final), 15):
            reply.update(final[:end])
            await anyio.sleep(0.005)
        assert await reply.finish(final) is True
    for call in surface.ops("send", "edit"):
        assert len(call.text) <= 40, call
    shown = list(surface.shown().values())
    assert shown == split_message(final, 40, count_chars)
    assert all(balanced(part) for part in shown)
    assert any(part.startswith("```python\n") and "print(" in part for part in shown[2:])


@pytest.mark.anyio
async def test_parts_that_rendering_grows_are_split_tighter() -> None:
    surface = recording_surface(max_chars=40, render_with=lambda md: md.replace("&", "&amp;"))
    final = " ".join(["R&D"] * 30)
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        assert await reply.finish(final) is True
    shown = list(surface.shown().values())
    assert all(len(part) <= 40 for part in shown), shown
    assert " ".join(shown).replace("&amp;", "&") == final


@pytest.mark.anyio
async def test_a_429_delays_the_chats_next_operation_by_retry_after_and_the_final_arrives() -> None:
    surface = recording_surface()
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        reply.update("first")
        await anyio.sleep(0.03)
        surface.fail_next(RateLimited(0.2))
        reply.update("first and second")
        await anyio.sleep(0.03)
        assert await reply.finish("first, second, third") is True
    limited = next(i for i, c in enumerate(surface.calls) if isinstance(c.error, RateLimited))
    following = [c for c in surface.calls[limited + 1 :] if c.op != "typing"]
    assert following[0].at - surface.calls[limited].at >= 0.18
    assert list(surface.shown().values()) == ["first, second, third"]


@pytest.mark.anyio
async def test_transient_failures_are_retried_and_the_final_is_delivered() -> None:
    surface = recording_surface()
    async with open_reply(surface, KEY, fast_pacer(), retry_delay=0.01) as reply:
        surface.fail_next(SendFailed("502 bad gateway", transient=True), times=3)
        assert await reply.finish("the answer") is True
    sends = [c for c in surface.calls if c.op == "send"]
    assert len(sends) == 4 and sends[-1].error is None
    assert list(surface.shown().values()) == ["the answer"]


@pytest.mark.anyio
async def test_delivery_gives_up_after_max_attempts_returns_false_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    surface = recording_surface()
    caplog.set_level(logging.WARNING, logger="bot.reply")
    async with open_reply(surface, KEY, fast_pacer(), max_attempts=3, retry_delay=0.001) as reply:
        surface.fail_next(SendFailed("503", transient=True), times=100)
        assert await reply.finish("never arrives") is False
    assert len([c for c in surface.calls if c.op == "send"]) == 3
    assert any(r.name == "bot.reply" and r.levelno == logging.ERROR for r in caplog.records)


@pytest.mark.anyio
async def test_a_permanent_failure_gives_up_on_that_part_at_once_and_delivers_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    surface = recording_surface(can_edit=False)
    caplog.set_level(logging.WARNING, logger="bot.reply")
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        surface.fail_next(SendFailed("400 can't parse entities", transient=False))
        assert (
            await reply.finish("first paragraph is here\n\nsecond paragraph is here too") is False
        )
    sends = [c for c in surface.calls if c.op == "send"]
    assert len(sends) == 2  # one attempt at the refused part, then the next part
    assert isinstance(sends[0].error, SendFailed) and sends[1].error is None
    assert any("can't parse entities" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_a_message_gone_at_edit_is_replaced_by_a_new_message() -> None:
    surface = recording_surface()
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        reply.update("draft")
        await anyio.sleep(0.03)
        surface.fail_next(MessageGone(), on="edit")
        assert await reply.finish("the final answer") is True
    sends = surface.ops("send")
    assert [c.text for c in sends] == ["draft", "the final answer"]
    assert surface.shown()[sends[-1].message] == "the final answer"


@pytest.mark.anyio
async def test_without_edits_nothing_streams_and_only_the_final_parts_are_sent() -> None:
    surface = recording_surface(can_edit=False)
    final = "word " * 20
    async with open_reply(surface, KEY, fast_pacer(), typing_interval=0.01) as reply:
        for i in range(1, 20):
            reply.update(final[: i * 5])
            reply.set_status("thinking")
            await anyio.sleep(0.003)
        assert surface.ops("send", "edit") == []
        assert await reply.finish(final) is True
    assert surface.ops("edit") == []
    assert [c.text for c in surface.ops("send")] == split_message(final, 40, count_chars)


@pytest.mark.anyio
async def test_utf16_counting_keeps_every_part_within_the_limit() -> None:
    surface = recording_surface(max_chars=40, count=count_utf16)
    final = " ".join(["done 😀👍🏽", "👩‍💻 coding", "🇺🇦 ok"] * 12)
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        for end in range(5, len(final), 9):
            reply.update(final[:end])
            await anyio.sleep(0.003)
        assert await reply.finish(final) is True
    for call in surface.ops("send", "edit"):
        assert count_utf16(call.text) <= 40, call
    assert content("\n".join(surface.shown().values())) == content(final)


@pytest.mark.anyio
async def test_the_status_line_shows_under_the_live_text_and_not_in_the_final() -> None:
    surface = recording_surface()
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        reply.update("Listing files")
        reply.set_status("running: ls -la")
        await anyio.sleep(0.05)
        live = [c.text for c in surface.ops("send", "edit")]
        assert live[-1] == f"Listing files\n\n{STATUS_MARK}running: ls -la"
        assert await reply.finish("Listing files: done") is True
    assert list(surface.shown().values()) == ["Listing files: done"]


@pytest.mark.anyio
async def test_a_live_message_the_final_no_longer_needs_is_blanked() -> None:
    surface = recording_surface()
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        reply.update("a short answer that is thirty")
        reply.set_status("running: a long command line")
        await anyio.sleep(0.06)
        assert len(surface.shown()) == 2
        assert await reply.finish("a short answer that is thirty") is True
    assert list(surface.shown().values()) == ["a short answer that is thirty", "…"]


@pytest.mark.anyio
async def test_typing_is_shown_while_nothing_was_sent_and_stops_after() -> None:
    surface = recording_surface()
    async with open_reply(surface, KEY, fast_pacer(), typing_interval=0.01) as reply:
        await anyio.sleep(0.06)
        assert len(surface.ops("typing")) >= 2
        reply.update("here it is")
        await anyio.sleep(0.05)
        assert await reply.finish("here it is") is True
    first_send = next(i for i, c in enumerate(surface.calls) if c.op == "send")
    assert all(c.op != "typing" for c in surface.calls[first_send:])


@pytest.mark.anyio
async def test_leaving_on_an_error_delivers_the_partial_text_and_reraises_it_unwrapped() -> None:
    surface = recording_surface(can_edit=False)
    with pytest.raises(KeyError):
        async with open_reply(surface, KEY, fast_pacer()) as reply:
            reply.update("partial output")
            raise KeyError("boom")
    assert [c.text for c in surface.ops("send")] == ["partial output"]


@pytest.mark.anyio
async def test_a_cancelled_turn_still_delivers_its_partial_text_and_stays_cancelled() -> None:
    surface = recording_surface()
    with anyio.move_on_after(0.1) as scope:
        async with open_reply(surface, KEY, fast_pacer()) as reply:
            reply.update("partial")
            await anyio.sleep(0.03)
            reply.update("partial, then more")
            await anyio.sleep(10)
    assert scope.cancelled_caught
    assert list(surface.shown().values()) == ["partial, then more"]


class SlowAnswers(ScriptedSurface):
    """The platform takes a message at once but its answer is slow to come back."""

    async def send(self, key: ConversationKey, text: str, *, formatted: bool = False) -> MessageRef:
        ref = await super().send(key, text, formatted=formatted)
        await anyio.sleep(0.2)
        return ref


@pytest.mark.anyio
async def test_a_final_part_in_flight_when_the_turn_is_cancelled_is_sent_once() -> None:
    surface = SlowAnswers("test", can_edit=False)
    with anyio.move_on_after(0.05) as scope:
        async with open_reply(surface, KEY, fast_pacer()) as reply:
            await reply.finish("the answer")
    assert scope.cancel_called  # while the answer was on its way
    assert [call.text for call in surface.ops("send")] == ["the answer"]


@pytest.mark.anyio
async def test_leaving_the_block_is_bounded_even_when_the_platform_keeps_refusing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    surface = recording_surface(can_edit=False)
    caplog.set_level(logging.WARNING, logger="bot.reply")
    begun = time.monotonic()
    async with open_reply(surface, KEY, fast_pacer(), close_timeout=0.05) as reply:
        surface.fail_next(RateLimited(30), times=5)
        reply.update("partial")
    assert time.monotonic() - begun < 5
    assert surface.ops("send") == []
    assert any("not delivered" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_live_edits_are_plain_and_only_the_final_parts_are_marked_formatted() -> None:
    surface = recording_surface(max_chars=200, render_with=lambda md: md.replace("*", "!"))
    async with open_reply(surface, KEY, ChatPacer(0.0)) as reply:
        reply.update("a *bold*")
        await wait_for(lambda: any(c.op == "send" for c in surface.calls), "the first send")
        assert await reply.finish("a *bold* word")
    live = [c for c in surface.calls if c.op in ("send", "edit") and "*" in c.text]
    final = [c for c in surface.calls if c.op in ("send", "edit") and c.text == "a !bold! word"]
    assert live and not any(c.formatted for c in live)
    assert final and all(c.formatted for c in final)


@pytest.mark.anyio
async def test_a_surface_with_drafts_previews_live_and_sends_the_final_as_messages() -> None:
    surface = recording_surface(max_chars=200, can_edit=False, drafts=True)
    async with open_reply(surface, KEY, ChatPacer(0.0)) as reply:
        for n in range(1, 6):
            reply.update("word " * n)
            await anyio.sleep(0.02)
        await wait_for(lambda: any(c.op == "preview" for c in surface.calls), "a preview")
        assert await reply.finish("the final answer")
    ops = [c.op for c in surface.calls if c.op != "typing"]
    assert "preview" in ops and "edit" not in ops
    sends = [c for c in surface.calls if c.op == "send"]
    assert [c.text for c in sends] == ["the final answer"] and sends[0].formatted


def _formatted_per_message(surface: ScriptedSurface) -> dict[str, list[str]]:
    formatted: dict[str, list[str]] = {}
    for call in surface.ops("send", "edit"):
        if call.formatted:
            formatted.setdefault(call.message, []).append(call.text)
    return formatted


@pytest.mark.anyio
async def test_a_part_the_text_has_grown_past_is_delivered_once_in_final_form_while_streaming() -> (
    None
):
    surface = recording_surface(max_chars=40, render_with=lambda md: md.replace("*", "!"))
    words = [f"*w{i}*" for i in range(40)]
    final = " ".join(words)
    async with open_reply(surface, KEY, ChatPacer(0.0)) as reply:
        for n in range(1, len(words) + 1):
            reply.update(" ".join(words[:n]))
            await anyio.sleep(0.005)
        await wait_for(lambda: len(_formatted_per_message(surface)) >= 2, "settled parts")
        before_finish = len(surface.calls)
        assert await reply.finish(final) is True
    expected = [surface.render(part) for part in split_message(final, 40, count_chars)]
    assert list(surface.shown().values()) == expected
    early = surface.calls[:before_finish]
    first = [c for c in early if c.formatted]
    assert first and first[0].text == expected[0]  # the first part, final, before the end
    # Each message gets its final form once, and nothing after it.
    per_message = _formatted_per_message(surface)
    assert all(len(texts) == 1 for texts in per_message.values()), per_message
    for message in per_message:
        calls = [c for c in surface.ops("send", "edit") if c.message == message]
        assert calls[-1].formatted
    # finish() only had the parts that had not settled left to deliver.
    late = [c for c in surface.calls[before_finish:] if c.op in ("send", "edit")]
    assert len(late) <= 2, late


@pytest.mark.anyio
async def test_settled_parts_that_the_final_text_does_not_keep_are_corrected() -> None:
    surface = recording_surface(max_chars=40, render_with=lambda md: md.replace("*", "!"))
    streamed = " ".join(f"*w{i}*" for i in range(30))
    async with open_reply(surface, KEY, ChatPacer(0.0)) as reply:
        reply.update(streamed)
        await wait_for(lambda: _formatted_per_message(surface), "a settled part")
        # The turn ends with another text (an error notice, a rewritten answer).
        final = "**Note:** " + streamed
        assert await reply.finish(final) is True
    expected = [surface.render(part) for part in split_message(final, 40, count_chars)]
    assert list(surface.shown().values())[: len(expected)] == expected
    assert all(text == "…" for text in list(surface.shown().values())[len(expected) :])


@pytest.mark.anyio
async def test_streamed_fenced_replies_end_exactly_as_their_final_split_with_one_final_each() -> (
    None
):
    rng = random.Random(7)
    for _ in range(12):
        final = random_markdown(rng)
        surface = recording_surface(max_chars=50, render_with=lambda md: md.replace("ok", "OK"))
        async with open_reply(surface, KEY, ChatPacer(0.0)) as reply:
            end = 0
            while end < len(final):
                end += rng.randint(1, 12)
                reply.update(final[:end])
                await anyio.sleep(0.002)
            assert await reply.finish(final) is True
        expected = [
            piece
            for part in split_message(final, 50, count_chars)
            for piece in split_message(surface.render(part), 50, count_chars)
        ]
        assert list(surface.shown().values())[: len(expected)] == expected, final
        per_message = _formatted_per_message(surface)
        assert all(len(texts) == 1 for texts in per_message.values()), (final, per_message)


@pytest.mark.anyio
async def test_the_status_block_is_the_last_paragraph_one_line_per_line() -> None:
    surface = recording_surface(max_chars=400)
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        reply.update("Reading")
        reply.set_status("working\n\n▸  Read   a.py\n✓ Search (x)\n" + "more\n" * 40)
        await anyio.sleep(0.05)
        live = surface.ops("send", "edit")[-1].text
        answer, status = live.split("\n\n")  # no blank line inside the block
        assert answer == "Reading"
        lines = status.splitlines()
        assert lines[:3] == [f"{STATUS_MARK}working", "▸ Read a.py", "✓ Search (x)"]
        assert len(lines) == 20  # bounded
        assert await reply.finish("Reading: done") is True
    assert list(surface.shown().values()) == ["Reading: done"]


@pytest.mark.anyio
async def test_the_live_buttons_ride_on_the_last_live_message_and_the_final_takes_them_off() -> (
    None
):
    surface = recording_surface(max_chars=40, message_buttons=True)
    stop = Choice("stop:1", "Stop", "danger")
    text = "word " * 20
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        reply.set_buttons([stop])
        for end in range(5, len(text), 5):
            reply.update(text[:end])
            await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        carried = surface.buttons_shown()
        assert len(carried) > 1
        assert list(carried.values()) == [()] * (len(carried) - 1) + [(stop,)]
        assert await reply.finish(text) is True
    assert all(not buttons for buttons in surface.buttons_shown().values())


@pytest.mark.anyio
async def test_buttons_are_not_passed_where_the_surface_takes_none() -> None:
    surface = recording_surface()  # the recording surface asserts no buttons reach it
    async with open_reply(surface, KEY, fast_pacer()) as reply:
        reply.set_buttons([Choice("stop:1", "Stop", "danger")])
        reply.update("hello")
        await anyio.sleep(0.05)
        assert await reply.finish("hello") is True
    assert all(not call.buttons for call in surface.calls)
