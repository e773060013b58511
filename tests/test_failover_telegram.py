"""Failover with Telegram in webhook mode (issue 16): three replicas of `switchboard run` on one
real Redis behind a load balancer (tests/cluster_harness.py), the scripted agent, one shared
workspace and agent-state directory. What a person sees is read from the fake Bot API; what the
agent was asked, from each replica's agent log."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from bot.notices import RESTART_NOTICE
from bot.permissions import NOT_PENDING, WITHDRAWN
from tests.cluster_harness import Cluster, cluster, slow
from tests.fakes.telegram_api import Message, People, User

pytestmark = pytest.mark.anyio

PEOPLE = People()
ALICE, BOB, CAROL = PEOPLE.alice, PEOPLE.bob, PEOPLE.carol
MANY = [User(50_000 + n, f"Person{n}") for n in range(12)]
RESTART_LEAD = RESTART_NOTICE.split(",")[0]  # "Your last request was interrupted when ..."


def finals(c: Cluster, chat_id: int, text: str) -> int:
    """How many of the bot's messages in the chat show `text` (a reply, not a draft)."""
    return sum(1 for shown in c.chat_texts(chat_id) if text in shown)


def streaming(c: Cluster, chat_id: int, text: str) -> bool:
    """Whether a draft in the chat has shown `text` (the reply is streaming)."""
    drafts = c.api.calls_to("sendMessageDraft", chat_id=chat_id)
    return any(text in str(call.params.get("text")) for call in drafts)


async def test_a_replica_killed_mid_turn_is_told_and_another_replica_resumes_the_session(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, "telegram", users=[ALICE]) as c:
        await c.post_update(c.api.dm(ALICE, "first"))
        await c.wait_text(ALICE.id, "Echo: first")
        first = (await c.wait_prompt("first")).session_id

        await c.post_update(c.api.dm(ALICE, slow("long")))
        running = await c.wait_prompt("long-0")
        await c.wait_for(lambda: streaming(c, ALICE.id, "long-0"), "the reply to stream")
        c.kill(running.replica)

        await c.wait_text(ALICE.id, RESTART_LEAD, timeout=40)
        await c.post_update(c.api.dm(ALICE, "after the crash"))
        await c.wait_text(ALICE.id, "Echo: after the crash", timeout=40)
        after = (await c.wait_prompt("after the crash")).replica

        assert after is not running.replica
        assert running.session_id == first  # one conversation, one agent session so far
        assert c.prompts_containing("after the crash")[0].session_id == first
        if after is not c.prompts_containing("first")[0].replica:
            assert first in c.loads(after)  # resumed with session/load, not started afresh
        assert finals(c, ALICE.id, "long done") == 0
        assert finals(c, ALICE.id, "Echo: after the crash") == 1
        assert finals(c, ALICE.id, RESTART_LEAD) == 1


async def test_a_message_waiting_behind_the_killed_turn_is_answered_by_another_replica(
    tmp_path: Path,
) -> None:
    """A replica's death costs at most the reply it was writing: the message queued behind it
    (posted through another replica, relayed to the one running the turn) is sent on."""
    async with cluster(tmp_path, "telegram", users=[ALICE]) as c:
        await c.post_update(c.api.dm(ALICE, slow("long")))
        running = await c.wait_prompt("long-0")
        await c.wait_for(lambda: streaming(c, ALICE.id, "long-0"), "the reply to stream")
        await c.post_update(c.api.dm(ALICE, "queued behind"), to=c.other_than(running.replica))
        await c.wait_text(ALICE.id, "Queued", timeout=20)
        c.kill(running.replica)

        await c.wait_text(ALICE.id, RESTART_LEAD, timeout=40)
        await c.wait_text(ALICE.id, "Echo: queued behind", timeout=40)
        answered = c.prompts_containing("queued behind")
        assert len(answered) == 1 and answered[0].replica is not running.replica
        assert finals(c, ALICE.id, "Echo: queued behind") == 1
        assert finals(c, ALICE.id, RESTART_LEAD) == 1


async def test_a_replica_stopped_with_sigterm_exits_and_another_replica_takes_its_conversation(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, "telegram", users=[ALICE]) as c:
        await c.post_update(c.api.dm(ALICE, "before"))
        await c.wait_text(ALICE.id, "Echo: before")
        serving = (await c.wait_prompt("before")).replica
        assert await c.stop(serving) == 0
        await c.post_update(c.api.dm(ALICE, "after the stop"))
        await c.wait_text(ALICE.id, "Echo: after the stop")
        after = await c.wait_prompt("after the stop")
        assert after.replica is not serving
        assert after.session_id == c.prompts_containing("before")[0].session_id
        assert RESTART_LEAD not in "\n".join(c.chat_texts(ALICE.id))  # nothing was cut off


async def test_an_update_redelivered_to_another_replica_is_one_prompt_and_one_reply(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, "telegram", users=[ALICE]) as c:
        update = c.api.dm(ALICE, "only once")
        first = await c.post_update(update)
        again = c.other_than(first)
        await c.post_update(update, to=again)  # Telegram saw no answer in time and retried
        # A later message through the same replica: its lane handles the retry before it.
        await c.post_update(c.api.dm(ALICE, "and then"), to=again)
        await c.wait_text(ALICE.id, "Echo: and then")
        await c.wait_text(ALICE.id, "Echo: only once")
        assert [p.text for p in c.prompts()] == ["only once", "and then"]
        assert finals(c, ALICE.id, "Echo: only once") == 1


async def test_an_approval_pressed_through_another_replica_reaches_the_agent(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, "telegram", users=[ALICE], approvers=[CAROL]) as c:
        await c.post_update(c.api.dm(ALICE, "SCN_PERMISSION"))
        asking = (await c.wait_prompt("SCN_PERMISSION")).replica

        def approval() -> object:
            return next((m for m in c.api.chat_messages(ALICE.id) if m.reply_markup), None)

        await c.wait_for(approval, "the approval buttons")
        message = approval()
        assert message is not None and message.reply_markup is not None
        buttons = [b for row in message.reply_markup["inline_keyboard"] for b in row]
        yes = next(b["callback_data"] for b in buttons if b["text"] == "Yes")
        press = c.api.press(ALICE, message, yes)
        await c.post_update(press, to=c.other_than(asking))

        await c.wait_text(ALICE.id, "permission:allow_once", timeout=30)
        await c.wait_for(lambda: message.reply_markup is None, "the buttons to go")
        await c.wait_for(lambda: press["callback_query"]["id"] in c.api.answers, "the answer")
        outcomes = [
            frame["result"]["outcome"]
            for frame in asking.agent.frames_in()
            if "method" not in frame and "outcome" in (frame.get("result") or {})
        ]
        assert outcomes == [{"outcome": "selected", "optionId": "allow_once"}]


def card_noted(c: Cluster) -> bool:
    """The approval's tokens in Redis name the card's message (what withdrawing it needs)."""
    with c.redis.raw() as raw:
        values = [raw.get(key) for key in raw.scan_iter("switchboard:approval:*")]
    return any(value and json.loads(value).get("message") for value in values)


async def test_a_killed_replicas_approval_card_is_withdrawn_and_a_forged_press_refused(
    tmp_path: Path,
) -> None:
    """A press of the card's token from another chat, handed to another replica, is refused
    there (the token's home is read from the store); when the replica that asked is killed, a
    live one closes its card, and a later press of it is refused politely."""
    async with cluster(tmp_path, "telegram", replicas=2, users=[ALICE, BOB]) as c:
        await c.post_update(c.api.dm(ALICE, "SCN_PERMISSION"))
        asking = (await c.wait_prompt("SCN_PERMISSION")).replica

        def approval() -> Message | None:
            return next((m for m in c.api.chat_messages(ALICE.id) if m.reply_markup), None)

        await c.wait_for(approval, "the approval buttons")
        card = approval()
        assert card is not None and card.reply_markup is not None
        yes = card.reply_markup["inline_keyboard"][0][0]["callback_data"]
        in_bobs_chat = Message(9999, c.api.private_chat(BOB), BOB.as_dict(), "anything")
        forged = c.api.press(ALICE, in_bobs_chat, yes)
        await c.post_update(forged, to=c.other_than(asking))
        query = forged["callback_query"]["id"]
        await c.wait_for(lambda: query in c.api.answers, "the forged press's answer")
        assert c.api.answers[query]["text"] == NOT_PENDING
        assert card.reply_markup is not None

        await c.wait_for(lambda: card_noted(c), "the store to note the card's message")
        c.kill(asking)
        await c.wait_for(lambda: card.reply_markup is None, "the card to be withdrawn", 40)
        assert card.text == WITHDRAWN
        late = c.api.press(ALICE, card, yes)
        await c.post_update(late)
        query = late["callback_query"]["id"]
        await c.wait_for(lambda: query in c.api.answers, "the late press's answer")
        assert c.api.answers[query]["text"] == NOT_PENDING
        assert not any(
            "outcome" in (frame.get("result") or {})
            for replica in c.replicas
            for frame in replica.agent.frames_in()
        )


async def test_redis_stopped_and_restarted_mid_run_loses_no_reply_and_sends_none_twice(
    tmp_path: Path,
) -> None:
    people = MANY[:6]
    # The turns end while Redis is away (their ending writes wait for it); the outage is shorter
    # than the leases (10 s, renewed every 3.3 s), so they outlive it and no turn has to stop.
    async with cluster(tmp_path, "telegram", users=people, lease_ttl=10) as c:
        for person in people:
            await c.post_update(c.api.dm(person, slow(f"p{person.id}", parts=4, gap=0.3)))
        for person in people:
            await c.wait_prompt(f"p{person.id}-0")
        c.stop_redis()
        await c.wait_for(
            lambda: all(finals(c, p.id, f"p{p.id} done") for p in people),
            "every reply the outage met to be delivered while Redis is away",
            30,
        )
        c.start_redis()
        for person in people:  # and the cluster serves new messages again
            await c.post_update(c.api.dm(person, f"after the outage {person.id}"))
        await c.wait_for(
            lambda: all(finals(c, p.id, f"Echo: after the outage {p.id}") for p in people),
            "every message after the outage to be answered",
            30,
        )
        await c.wait_for(lambda: c.undelivered() == 0, "the ledger to hold nothing undelivered")
        for person in people:
            assert finals(c, person.id, f"p{person.id} done") == 1
            assert finals(c, person.id, f"Echo: after the outage {person.id}") == 1
            assert len(c.prompts_containing(f"p{person.id}-0")) == 1


async def test_after_a_redis_outage_longer_than_the_leases_every_conversation_is_answered_again(
    tmp_path: Path,
) -> None:
    people = MANY[:6]
    async with cluster(tmp_path, "telegram", users=people, lease_ttl=2) as c:
        for person in people:
            await c.post_update(c.api.dm(person, slow(f"p{person.id}", parts=4, gap=0.3)))
        for person in people:
            await c.wait_prompt(f"p{person.id}-0")
        c.stop_redis()
        await anyio.sleep(4)  # the outage's length (past the 2 s leases), not an assertion
        await c.wait_for(
            lambda: all(finals(c, p.id, f"p{p.id} done") for p in people),
            "every reply the outage met to be delivered while Redis is away",
            30,
        )
        c.start_redis()
        for person in people:
            await c.post_update(c.api.dm(person, f"after the long outage {person.id}"))
        await c.wait_for(
            lambda: all(finals(c, p.id, f"Echo: after the long outage {p.id}") for p in people),
            "every message after the long outage to be answered",
            30,
        )
        for person in people:
            assert finals(c, person.id, f"p{person.id} done") == 1
            assert finals(c, person.id, f"Echo: after the long outage {person.id}") == 1
            assert finals(c, person.id, RESTART_LEAD) == 0  # their turns were not cut off


async def test_many_conversations_over_three_replicas_are_answered_once_each_in_order(
    tmp_path: Path,
) -> None:
    rounds = 3
    async with cluster(tmp_path, "telegram", users=MANY) as c:

        async def converse(person: User) -> None:
            for n in range(rounds):  # each message waits for its answer, as a person would
                await c.post_update(c.api.dm(person, f"m{n} from {person.id}"))
                await c.wait_text(person.id, f"Echo: m{n} from {person.id}", timeout=30)

        async with anyio.create_task_group() as group:
            for person in MANY:
                group.start_soon(converse, person)

        for person in MANY:
            texts = [p.text for p in c.prompts() if p.text.endswith(f"from {person.id}")]
            assert texts == [f"m{n} from {person.id}" for n in range(rounds)]
            shown = [t for t in c.chat_texts(person.id) if t.startswith("Echo: ")]
            assert shown == [f"Echo: m{n} from {person.id}" for n in range(rounds)]
        served = {p.replica.name for p in c.prompts()}
        assert len(served) > 1  # the conversations were spread, not all on one replica
