"""A message sent while the agent works, on Slack end to end (the real slack_sdk / slack_bolt
through our adapter against the fake Slack API, the scripted agent as a real subprocess): the
Queued acknowledgement in the thread carries Steer now (the agent advertises steering) and Stop
and send as Slack buttons; a stranger to the message gets an ephemeral notice; the writer's
Steer now puts the text into the running turn and the buttons go; `!interrupt` stops the turn
and sends its text next."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.busy import QUEUED, STEERED
from tests.conftest import FakeAgent, script
from tests.engine_helpers import wait_for
from tests.fakes.slack_api import Message, button_press, envelope, mention
from tests.test_slack import ALICE, BOB, BOT, CHANNEL, SlackEnv, slack_bot, typed

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

STEERABLE = script({"chunk": "working on it"}, {"await_steer": 60}, {"hang": True})


async def _in_thread(env: SlackEnv, user: str, thread: str, text: str) -> None:
    """A mention of the bot in the thread `thread` (a message there reaches the bot this way)."""
    event = mention(CHANNEL, user, f"{BOT} {typed(text)}", ts=env.fake.next_ts(), thread_ts=thread)
    await env.deliver(envelope(event))


def _ack(env: SlackEnv, thread: str) -> Message | None:
    return next((m for m in env.fake.in_thread(CHANNEL, thread) if QUEUED in m.visible), None)


async def test_slack_buttons_steer_the_running_turn_and_bang_interrupt_stops_it(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    async with slack_bot(tmp_path, fake_agent, "socket", "--steering") as env:
        thread = await env.mention(ALICE, STEERABLE)
        await wait_for(lambda: "working on it" in env.fake.thread_text(CHANNEL, thread), "live")
        await _in_thread(env, ALICE, thread, "use the other file")
        await wait_for(lambda: _ack(env, thread), "the Queued acknowledgement", 15)
        ack = _ack(env, thread)
        assert ack is not None
        labels = {b["text"]["text"]: b["value"] for b in ack.buttons}
        assert list(labels) == ["Steer now", "Stop and send"]
        await env.press(button_press(CHANNEL, BOB, ack, labels["Steer now"]))
        await wait_for(lambda: env.fake.ephemerals, "the notice to bob")
        await env.press(button_press(CHANNEL, ALICE, ack, labels["Steer now"]))
        await wait_for(
            lambda: "steered:use the other file" in env.fake.thread_text(CHANNEL, thread), "steer"
        )
        await wait_for(lambda: not ack.buttons, "the buttons to go")
        assert STEERED in ack.visible
        await _in_thread(env, ALICE, thread, "!interrupt now the tests")
        await env.answered(CHANNEL, thread, "Echo: now the tests")
    (notice,) = env.fake.ephemerals
    assert notice.user == BOB and "Only Alice or an approver can do this." in notice.text
    assert fake_agent.prompt_texts() == [STEERABLE, "now the tests"]
    assert len(fake_agent.frames_in("session/cancel")) == 1
