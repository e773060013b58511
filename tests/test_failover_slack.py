"""Failover with Slack in HTTP mode (issue 16): three replicas of `switchboard run` on one real
Redis behind a load balancer (tests/cluster_harness.py) that posts Slack's signed requests
round-robin, the scripted agent, one shared workspace and agent-state directory. What a person
sees is read from the fake Slack Web API; what the agent was asked, from each replica's agent log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from bot.notices import RESTART_NOTICE
from tests.cluster_harness import Cluster, cluster, slow
from tests.fakes.slack_api import Message, button_press, dm, envelope

pytestmark = pytest.mark.anyio

ALICE, CAROL = "UALICE", "UCAROL"
MANY = [f"UPERSON{n}" for n in range(12)]
RESTART_LEAD = RESTART_NOTICE.split(",")[0]


def im(user: str) -> str:
    return "D" + user.removeprefix("U")


def message(c: Cluster, user: str, text: str) -> dict[str, Any]:
    """The Events API body for `user` writing `text` in their DM with the bot."""
    return envelope(dm(im(user), user, text, ts=c.slack.next_ts()))


def finals(c: Cluster, user: str, text: str) -> int:
    return sum(1 for shown in c.slack_texts(im(user)) if text in shown)


async def test_a_replica_killed_mid_turn_is_told_and_another_replica_resumes_the_session(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, "slack", users=[ALICE]) as c:
        await c.post_event(message(c, ALICE, "first"))
        await c.wait_slack_text(im(ALICE), "Echo: first")
        first = (await c.wait_prompt("first")).session_id

        await c.post_event(message(c, ALICE, slow("long")))
        running = await c.wait_prompt("long-0")
        await c.wait_for(lambda: "long-0" in " ".join(c.slack_texts(im(ALICE))), "streaming")
        c.kill(running.replica)

        await c.wait_for(
            lambda: any(RESTART_LEAD in t for t in c.slack_texts(im(ALICE))),
            f"the restart notice (shown: {c.slack_texts(im(ALICE))!r})",
            40,
        )
        await c.post_event(message(c, ALICE, "after the crash"))
        await c.wait_slack_text(im(ALICE), "Echo: after the crash", timeout=40)
        after = (await c.wait_prompt("after the crash")).replica

        assert after is not running.replica
        assert running.session_id == first
        assert c.prompts_containing("after the crash")[0].session_id == first
        if after is not c.prompts_containing("first")[0].replica:
            assert first in c.loads(after)
        assert finals(c, ALICE, "Echo: after the crash") == 1


async def test_an_event_slack_retries_to_another_replica_is_one_prompt_and_one_reply(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, "slack", users=[ALICE]) as c:
        body = message(c, ALICE, "only once")
        first = await c.post_event(body)
        again = c.other_than(first)
        await c.post_event(body, to=again, retry_num=1)  # X-Slack-Retry-Num: 1, http_timeout
        # A later message through the same replica: its lane handles the retry before it.
        await c.post_event(message(c, ALICE, "and then"), to=again)
        await c.wait_slack_text(im(ALICE), "Echo: and then")
        await c.wait_slack_text(im(ALICE), "Echo: only once")
        assert [p.text for p in c.prompts()] == ["only once", "and then"]
        assert finals(c, ALICE, "Echo: only once") == 1


async def test_an_approval_pressed_through_another_replica_reaches_the_agent(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, "slack", users=[ALICE], approvers=[CAROL]) as c:
        await c.post_event(message(c, ALICE, "SCN_PERMISSION"))
        asking = (await c.wait_prompt("SCN_PERMISSION")).replica

        def prompt_message() -> Message | None:
            shown = [m for m in c.slack.in_thread(im(ALICE)) if m.buttons]
            return shown[0] if shown else None

        await c.wait_for(lambda: prompt_message() is not None, "the approval buttons")
        asked = prompt_message()
        assert asked is not None
        labels = {b["text"]["text"]: b["value"] for b in asked.buttons}
        press = button_press(im(ALICE), ALICE, asked, labels["Yes"])
        await c.post_action(press, to=c.other_than(asking))

        await c.wait_slack_text(im(ALICE), "permission:allow_once", timeout=30)
        await c.wait_for(lambda: not asked.buttons, "the buttons to be withdrawn")
        outcomes = [
            frame["result"]["outcome"]
            for frame in asking.agent.frames_in()
            if isinstance(frame.get("result"), dict) and "outcome" in frame["result"]
        ]
        assert outcomes == [{"outcome": "selected", "optionId": "allow_once"}]


async def test_redis_stopped_and_restarted_mid_run_loses_no_reply_and_sends_none_twice(
    tmp_path: Path,
) -> None:
    people = MANY[:6]
    # The turns end while Redis is away (their ending writes wait for it); the outage is shorter
    # than the leases (10 s, renewed every 3.3 s), so they outlive it and no turn has to stop.
    async with cluster(tmp_path, "slack", users=people, lease_ttl=10) as c:
        for person in people:
            await c.post_event(message(c, person, slow(f"p{person}", parts=4, gap=0.3)))
        for person in people:
            await c.wait_prompt(f"p{person}-0")
        c.stop_redis()
        await c.wait_for(
            lambda: all(finals(c, p, f"p{p} done") for p in people),
            "every reply the outage met to be delivered while Redis is away",
            30,
        )
        c.start_redis()
        for person in people:
            await c.post_event(message(c, person, f"after the outage {person}"))
        await c.wait_for(
            lambda: all(finals(c, p, f"Echo: after the outage {p}") for p in people),
            "every message after the outage to be answered",
            30,
        )
        await c.wait_for(lambda: c.undelivered() == 0, "the ledger to hold nothing undelivered")
        for person in people:
            assert finals(c, person, f"p{person} done") == 1
            assert finals(c, person, f"Echo: after the outage {person}") == 1
            assert len(c.prompts_containing(f"p{person}-0")) == 1


async def test_many_conversations_over_three_replicas_are_answered_once_each_in_order(
    tmp_path: Path,
) -> None:
    rounds = 3
    async with cluster(tmp_path, "slack", users=MANY) as c:

        async def converse(person: str) -> None:
            for n in range(rounds):
                await c.post_event(message(c, person, f"m{n} from {person}"))
                await c.wait_slack_text(im(person), f"Echo: m{n} from {person}", timeout=30)

        async with anyio.create_task_group() as group:
            for person in MANY:
                group.start_soon(converse, person)

        for person in MANY:
            texts = [p.text for p in c.prompts() if p.text.endswith(f"from {person}")]
            assert texts == [f"m{n} from {person}" for n in range(rounds)]
            shown = [t for t in c.slack_texts(im(person)) if t.startswith("Echo: ")]
            assert shown == [f"Echo: m{n} from {person}" for n in range(rounds)]
        assert len({p.replica.name for p in c.prompts()}) > 1
