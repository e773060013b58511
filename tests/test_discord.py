"""The Discord surface end to end: the real discord.py, through our adapter, against the fake
gateway and REST API (tests/fakes/discord_api.py), with BotApp in process and the scripted fake
agent as a real subprocess. Plus the pure conversions (mentions, Markdown, commands)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from bot.app import BotApp
from bot.commands import command_menu
from config import ConfigError, load_settings
from surfaces.base import ConversationKey, Inbound
from surfaces.discord import create_surface
from surfaces.discord.adapter import DiscordSurface
from surfaces.discord.convert import (
    ZWSP,
    command_payloads,
    command_text,
    plain,
    render,
    strip_mention,
    thread_name,
)
from surfaces.discord.spending import EDIT, NEW_MESSAGE, Spending
from surfaces.errors import MessageGone, RateLimited, SendFailed
from surfaces.pacing import GlobalBudget
from tests.conftest import LISTS_COMPACT, FakeAgent, script
from tests.engine_helpers import engine_settings, wait_for
from tests.fakes.discord_api import COMPONENT, FakeDiscord, Guild, User
from tests.harness.discord import (
    discord_access,
    discord_env,
    fast_surface,
    serving,
    switchboard_run,
)
from tests.harness.process import run_env

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clean_env")]

FENCE_LINE = re.compile(r" {0,3}```")
INTENT_GUILDS, INTENT_GUILD_MESSAGES, INTENT_DMS, INTENT_CONTENT = 1 << 0, 1 << 9, 1 << 12, 1 << 15


@dataclass
class World:
    fake: FakeDiscord
    guild: Guild
    alice: User
    bob: User
    carol: User  # an approver
    mallory: User  # on no list

    @property
    def general(self) -> str:
        return self.guild.channel("general").id

    def dm_of(self, user: User) -> str:
        return self.fake.dm_channel(user).id


@pytest.fixture
async def world() -> AsyncIterator[World]:
    fake = FakeDiscord()
    guild = fake.add_guild(channels=("general", "random"))
    people = [fake.user(name) for name in ("Alice", "Bob", "Carol", "Mallory")]
    fake.join(guild, *people)
    await fake.start()
    try:
        yield World(fake, guild, *people)
    finally:
        await fake.close()


@asynccontextmanager
async def discord_bot(
    tmp_path: Path,
    fake_agent: FakeAgent,
    world: World,
    *,
    min_edit_interval: float = 0.1,
    agent_options: tuple[str, ...] = (),
    **discord: Any,
) -> AsyncIterator[tuple[BotApp, DiscordSurface]]:
    access = discord_access(world.fake, world.alice, world.bob, approvers=[world.carol.id])
    settings = engine_settings(tmp_path, fake_agent, *agent_options, discord=access | discord)
    async with serving(settings, min_edit_interval=min_edit_interval) as (app, surface):
        yield app, surface


def shown(fake: FakeDiscord, channel: str) -> list[str]:
    """What the bot's messages in a channel show now, leaving out blanked leftovers."""
    return [m.content for m in fake.bot_messages(channel) if m.content != "…"]


def idle(app: BotApp, channel: str) -> Callable[[], bool]:
    """A condition: the conversation in `channel` has no turn running."""
    key = ConversationKey("discord", channel)
    return lambda: key in app.runners and not app.runners[key].running


def balanced(part: str) -> bool:
    return sum(1 for line in part.split("\n") if FENCE_LINE.match(line)) % 2 == 0


# ---- chatting -----------------------------------------------------------------------------------
async def test_a_dm_streams_by_posting_then_editing_one_message(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    steps = script(
        {"chunk": "Streaming "},
        {"sleep": 0.4},
        {"chunk": "is "},
        {"sleep": 0.4},
        {"chunk": "done."},
    )
    async with discord_bot(tmp_path, fake_agent, world):
        fake.dm(world.alice, steps)
        await wait_for(lambda: shown(fake, dm) == ["Streaming is done."], "the whole reply")
    assert fake_agent.prompt_texts() == [steps]
    creates, edits = fake.routes("create_message", dm), fake.routes("edit_message", dm)
    assert len(creates) == 1
    assert creates[0].body["content"].startswith("Streaming")
    assert len(edits) >= 2
    assert fake.routes("typing", dm), "a typing indicator while nothing was visible"
    assert fake.routes("typing", dm)[0].at <= creates[0].at
    # the connection: our intents, and the engine's commands as slash commands
    (identify,) = fake.identifies
    for intent in (INTENT_GUILDS, INTENT_GUILD_MESSAGES, INTENT_DMS, INTENT_CONTENT):
        assert identify["intents"] & intent
    assert [c["name"] for c in fake.commands] == [name for name, _ in command_menu()]
    (model,) = [c for c in fake.commands if c["name"] == "model"]
    assert model["options"][0]["name"] == "id" and not model["options"][0]["required"]


async def test_a_mention_in_a_channel_opens_a_thread_where_the_conversation_continues(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake = world.fake
    async with discord_bot(tmp_path, fake_agent, world):
        fake.post(world.general, world.alice, "not for the bot")
        opener = fake.post(world.general, world.alice, "hello there", mention=True)
        await wait_for(lambda: fake.threads(), "a thread")
        (thread,) = fake.threads()
        await wait_for(lambda: shown(fake, thread.id) == ["Echo: hello there"], "the answer")
        fake.post(thread.id, world.bob, "and more")  # no mention needed in the bot's thread
        await wait_for(lambda: shown(fake, thread.id)[-1] == "Echo: and more", "the second answer")
    assert thread.id == opener.id and thread.parent_id == world.general
    assert thread.name == "hello there"
    assert shown(fake, thread.id)[0] == "Echo: hello there"
    assert fake.bot_messages(world.general) == []
    assert fake_agent.prompt_texts() == ["hello there", "and more"]
    assert len(fake_agent.frames_in("session/new")) == 1, "one conversation, one session"


async def test_bang_compact_and_the_compact_slash_command_both_reach_the_agent_as_slash_compact(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    async with discord_bot(tmp_path, fake_agent, world, agent_options=LISTS_COMPACT) as (app, _):
        fake.dm(world.alice, "!compact")
        await wait_for(lambda: shown(fake, dm) == ["Echo: /compact"], "the typed command's reply")
        await wait_for(idle(app, dm), "the end of that turn")
        interaction = fake.slash(world.alice, "compact", channel_id=dm)
        await wait_for(lambda: interaction.followups, "the slash command's followup")
        await wait_for(lambda: len(shown(fake, dm)) == 2, "its reply")
    assert fake_agent.prompt_texts() == ["/compact", "/compact"]
    assert interaction.callback is not None and interaction.callback["type"] == 5  # thinking…
    assert interaction.callback_after is not None and interaction.callback_after < 3
    assert not interaction.deferred_ephemeral, "/compact is answered for everyone to see"
    reply = fake.messages[interaction.followups[0]]
    assert reply.content == "Echo: /compact" and not reply.ephemeral


async def test_a_slash_command_during_a_turn_is_answered_with_the_receipt_and_runs_after_it(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    async with discord_bot(tmp_path, fake_agent, world, agent_options=LISTS_COMPACT):
        fake.dm(world.alice, script({"chunk": "long "}, {"sleep": 1.0}, {"chunk": "turn"}))
        await wait_for(lambda: any("long" in t for t in shown(fake, dm)), "the first turn")
        interaction = fake.slash(world.alice, "compact", channel_id=dm)
        await wait_for(lambda: "Echo: /compact" in shown(fake, dm), "the command's turn")
    (receipt,) = [fake.messages[i] for i in interaction.followups]
    assert receipt.content.startswith("Queued")
    (answer,) = [m for m in fake.bot_messages(dm) if m.content == "Echo: /compact"]
    assert not answer.interaction_id, "the turn's reply is an ordinary message"
    assert fake_agent.prompt_texts()[1:] == ["/compact"]


async def test_status_and_help_slash_commands_are_answered_only_to_the_person_who_asked(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    async with discord_bot(tmp_path, fake_agent, world):
        status = fake.slash(world.alice, "status", channel_id=world.general)
        help_ = fake.slash(world.bob, "help", channel_id=world.dm_of(world.bob))
        await wait_for(lambda: status.followups and help_.followups, "both answers")
        fake.dm(world.alice, "!status")
        await wait_for(lambda: any("Agent:" in text for text in shown(fake, dm)), "!status")
    for interaction in (status, help_):
        assert interaction.callback_after is not None and interaction.callback_after < 3
        assert interaction.deferred_ephemeral
        (message_id,) = interaction.followups
        assert fake.messages[message_id].ephemeral
    assert "Agent:" in fake.messages[status.followups[0]].content
    assert "!compact" in fake.messages[help_.followups[0]].content
    typed = [m for m in fake.bot_messages(dm) if "Agent:" in m.content]
    assert typed and not typed[0].ephemeral
    assert fake_agent.prompt_texts() == []


async def test_a_stranger_gets_no_thread_no_answer_and_no_call_at_all(
    tmp_path: Path, fake_agent: FakeAgent, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    fake, mallory = world.fake, world.mallory
    async with discord_bot(tmp_path, fake_agent, world):
        before = len(fake.calls)
        fake.dm(mallory, "hello")
        fake.post(world.general, mallory, "hello", mention=True)
        command = fake.slash(mallory, "status", channel_id=world.dm_of(mallory))
        fake.dm(world.alice, "hi")  # a known person, to know the events above were processed
        await wait_for(lambda: shown(fake, world.dm_of(world.alice)), "alice's answer")
        await anyio.sleep(0.2)
        calls = fake.calls[before:]
    strangers = {world.dm_of(mallory), world.general}
    assert [c for c in calls if c.channel in strangers] == []
    assert fake.threads() == []
    assert command.callback is None
    assert fake_agent.prompt_texts() == ["hi"]
    assert any(
        "stranger" in r.getMessage() and mallory.id in r.getMessage() for r in caplog.records
    )


# ---- approvals ----------------------------------------------------------------------------------
async def test_an_approval_is_refused_to_another_user_and_taken_from_the_requester(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake = world.fake
    async with discord_bot(tmp_path, fake_agent, world):
        fake.post(world.general, world.alice, "SCN_PERMISSION", mention=True)
        await wait_for(fake.threads, "the thread")
        thread = fake.threads()[0].id
        await wait_for(lambda: [m for m in fake.bot_messages(thread) if m.buttons()], "buttons")
        (ask,) = [m for m in fake.bot_messages(thread) if m.buttons()]
        buttons = {b["label"]: b for b in ask.buttons()}
        assert list(buttons) == ["Yes", "Always", "No", "Trust this tool for this session"]
        assert buttons["Yes"]["style"] == 1 and buttons["No"]["style"] == 4
        assert "Run echo hi" in ask.content

        refused = fake.press(world.bob, ask.id, buttons["Yes"]["custom_id"])
        await wait_for(lambda: refused.followups, "bob's notice")
        assert refused.deferred_ephemeral
        notice = fake.messages[refused.followups[0]]
        assert notice.ephemeral and "Only Alice" in notice.content
        assert ask.buttons(), "the buttons stay for the requester"

        ignored = fake.press(world.mallory, ask.id, buttons["No"]["custom_id"])
        taken = fake.press(world.alice, ask.id, buttons["Yes"]["custom_id"])
        await wait_for(
            lambda: any("permission:allow_once" in t for t in shown(fake, thread)), "reply"
        )
    assert ignored.callback is None and ignored.followups == [], "strangers get nothing"
    assert taken.callback == {"type": 6}  # acknowledged without a visible answer
    assert taken.followups == []
    assert ask.buttons() == [] and "Answered: Yes" in ask.content
    outcomes = [
        frame["result"]["outcome"]
        for frame in fake_agent.frames_in()
        if isinstance(frame.get("result"), dict) and "outcome" in frame["result"]
    ]
    assert outcomes == [{"outcome": "selected", "optionId": "allow_once"}]
    assert all(i.kind == COMPONENT for i in (refused, taken))


# ---- delivery -----------------------------------------------------------------------------------
async def test_a_429_in_the_middle_of_streaming_is_waited_out_and_nothing_is_lost(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    words = [f"word{n} " for n in range(8)]
    steps = script(*[step for word in words for step in ({"chunk": word}, {"sleep": 0.15})])
    async with discord_bot(tmp_path, fake_agent, world):
        fake.fail_next("edit_message", channel=dm, retry_after=0.4)
        fake.dm(world.alice, steps)
        whole = "".join(words).strip()
        await wait_for(lambda: [t.strip() for t in shown(fake, dm)] == [whole], "the whole reply")
    statuses = [c.status for c in fake.routes("edit_message", dm)]
    assert 429 in statuses
    assert statuses[-1] == 200
    assert len(fake.bot_messages(dm)) == 1


async def test_a_long_reply_is_split_at_2000_characters_with_code_fences_intact(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    code = "\n".join(f"    value_{n:03d} = compute({n}) * 2  # line {n}" for n in range(90))
    answer = f"Here is the file.\n\n```python\n{code}\n```\n\nThat is all."
    async with discord_bot(tmp_path, fake_agent, world, min_edit_interval=0.05):
        fake.dm(world.alice, script({"chunk": answer}))
        await wait_for(
            lambda: shown(fake, dm) and shown(fake, dm)[-1].endswith("That is all."), "the end"
        )
    parts = shown(fake, dm)
    assert len(parts) >= 2
    assert all(len(part) <= 2000 for part in parts)
    assert all(balanced(part) for part in parts)

    def content(text: str) -> str:
        kept = [line for line in text.split("\n") if not FENCE_LINE.match(line)]
        return "".join("".join(kept).split())

    assert content("\n".join(parts)) == content(answer)


async def test_every_message_disables_mentions_and_agent_mentions_are_defused(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    async with discord_bot(tmp_path, fake_agent, world):
        fake.dm(world.alice, script({"chunk": "Hey @everyone, <@123> and @here: look"}))
        await wait_for(lambda: any("look" in t for t in shown(fake, dm)), "the answer")
        fake.slash(world.alice, "status", channel_id=dm)
        await wait_for(lambda: fake.routes("followup"), "a followup")
    bodies = fake.message_bodies()
    assert len(bodies) >= 3
    assert all(body.get("allowed_mentions") == {"parse": []} for body in bodies), bodies
    (final,) = shown(fake, dm)[:1]
    assert "@everyone" not in final and "@here" not in final and "<@123>" not in final
    assert f"@{ZWSP}everyone" in final and f"<@{ZWSP}123>" in final


async def test_a_gateway_drop_mid_turn_resumes_the_session_and_the_reply_still_completes(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    steps = script({"chunk": "before "}, {"sleep": 1.5}, {"chunk": "after"})
    async with discord_bot(tmp_path, fake_agent, world):
        fake.dm(world.alice, steps)
        await wait_for(lambda: any("before" in t for t in shown(fake, dm)), "the first chunk")
        await fake.drop_gateway()
        fake.dm(world.alice, "sent while the bot was away")  # replayed on RESUME
        await wait_for(
            lambda: "Echo: sent while the bot was away" in "\n".join(shown(fake, dm)),
            "the answer to the missed message",
        )
    assert shown(fake, dm)[0] == "before after"
    assert len(fake.identifies) == 1
    assert len(fake.resumes) == 1
    assert fake_agent.prompt_texts()[1:] == ["sent while the bot was away"]


async def test_a_sharded_bot_opens_one_session_per_shard_and_still_answers_dms(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake, dm = world.fake, world.dm_of(world.alice)
    async with discord_bot(tmp_path, fake_agent, world, shard_count=2):
        await wait_for(lambda: len(fake.identifies) == 2, "both shards")
        fake.dm(world.alice, "hi")
        await wait_for(lambda: shown(fake, dm) == ["Echo: hi"], "the answer")
    assert sorted(tuple(i["shard"]) for i in fake.identifies) == [(0, 2), (1, 2)]


async def test_platform_failures_become_the_surfaces_errors(world: World) -> None:
    fake = world.fake
    settings = load_settings(discord=discord_access(fake, world.alice))
    production = create_surface(settings).capabilities
    assert (production.max_chars, production.min_edit_interval) == (2000, 1.0)
    assert production.can_edit and production.message_buttons
    assert production.command_prefixes == ("!", "/")
    surface = fast_surface(settings.discord, min_edit_interval=0.01)
    key = ConversationKey("discord", world.dm_of(world.alice))
    events: list[Any] = []

    async def on_event(event: Any) -> None:
        events.append(event)

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(surface.run, on_event)
            ref = await surface.send(key, "first")
            fake.fail_next("create_message", status=403)
            with pytest.raises(SendFailed) as forbidden:
                await surface.send(key, "second")
            assert not forbidden.value.transient
            fake.fail_next("create_message", status=503)
            with pytest.raises(SendFailed) as unavailable:
                await surface.send(key, "third")
            assert unavailable.value.transient
            fake.fail_next("create_message", status=429, retry_after=2.0, via=False)
            with pytest.raises(RateLimited) as limited:  # not Discord's: discord.py won't retry
                await surface.send(key, "fourth")
            assert limited.value.retry_after == 2.0
            fake.fail_next("edit_message", status=404)
            with pytest.raises(MessageGone):
                await surface.edit(ref, "edited")
            await wait_for(surface.is_ready, "the gateway")
            fake.dm(world.alice, f"hello <@{fake.bot.id}>")
            await wait_for(lambda: events, "the message")
            tg.cancel_scope.cancel()
    finally:
        await surface.close()
    (event,) = events
    assert isinstance(event, Inbound)
    assert event.text == "hello" and event.key == key and event.user.name == "Alice"
    with pytest.raises(SendFailed):  # closed: no more calls
        await surface.send(key, "too late")


async def test_a_rejected_token_is_a_configuration_error_naming_the_setting(world: World) -> None:
    fake = world.fake
    settings = load_settings(
        discord={"token": "wrong", "api_url": fake.api_url, "gateway_url": fake.gateway_url}
    )
    surface = create_surface(settings)

    async def on_event(event: Any) -> None:
        raise AssertionError("nothing should arrive")

    with pytest.raises(ConfigError) as raised:
        await surface.run(on_event)
    assert raised.value.setting == "SWITCHBOARD_DISCORD__TOKEN"
    await surface.close()
    assert fake.identifies == []


async def test_switchboard_run_serves_discord_and_stops_on_sigterm(
    tmp_path: Path, workspace: Path, fake_agent: FakeAgent, world: World, cli_env: dict[str, str]
) -> None:
    fake = world.fake
    env = cli_env | run_env(fake_agent, workspace) | discord_env(fake, world.alice)
    dm = world.dm_of(world.alice)
    async with switchboard_run(env, fake, tmp_path):
        fake.dm(world.alice, "hello from the CLI")
        await wait_for(lambda: shown(fake, dm) == ["Echo: hello from the CLI"], "the reply")


async def test_the_global_budget_spaces_all_calls_and_serves_new_messages_before_edits() -> None:
    budget = GlobalBudget(rate=20.0)  # a slot every 50 ms
    order: list[str] = []

    async def call(name: str, priority: int) -> None:
        await budget.take(priority)
        order.append(name)

    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(call, f"edit{n}", EDIT)
        await anyio.sleep(0.01)  # edit0 has taken the free slot; the others wait
        tg.start_soon(call, "new", NEW_MESSAGE)
        assert not budget.take_if_free(), "typing gives way while calls wait"
    assert order == ["edit0", "new", "edit1", "edit2"]
    assert anyio.current_time() - started >= 0.14  # four slots, 50 ms apart


async def test_a_busy_budget_declines_live_calls_and_skips_final_edits_that_change_nothing() -> (
    None
):
    spending = Spending(rate=20.0)  # a slot every 50 ms
    assert await spending.edit("live", final=False), "an idle budget takes a live edit"
    spending.sent(7, final=False)  # a reply's first live message, in channel 7
    async with anyio.create_task_group() as tg:
        tg.start_soon(spending.new_message)  # another chat's message waits for the next slot
        await anyio.sleep(0.01)
        with pytest.raises(RateLimited) as declined:
            await spending.edit("live, longer", final=False)
        assert declined.value.recorded, "our own budget's: no pacer holds the chat back"
        with pytest.raises(RateLimited):  # a later live message of the same reply
            await spending.new_message(7, final=False)
        on_show = await spending.edit("live", final=True, unchanged=True)
        assert not on_show, "the final text is on show"
        assert await spending.edit("final", final=True)


async def test_a_reply_s_later_live_messages_stay_live_calls_after_a_part_is_final() -> None:
    spending = Spending(rate=20.0)  # a slot every 50 ms
    await spending.new_message(7, final=False)  # the reply's first message: as urgent as any
    spending.sent(7, final=False)
    assert await spending.edit("first part", final=True)  # settled while the reply goes on
    async with anyio.create_task_group() as tg:
        tg.start_soon(spending.new_message)  # another chat's message waits for the next slot
        await anyio.sleep(0.01)
        with pytest.raises(RateLimited):  # the second part, live: the reply is not over
            await spending.new_message(7, final=False)
    spending.heard(7)  # the person writes again: the next message starts a new reply
    async with anyio.create_task_group() as tg:
        tg.start_soon(spending.new_message)
        await anyio.sleep(0.01)
        await spending.new_message(7, final=False)  # queued, not declined


# ---- pure conversions ---------------------------------------------------------------------------
def test_mentions_are_stripped_from_what_people_type_and_commands_are_spelled_for_the_bot() -> None:
    assert strip_mention("<@42> hello <@!42>", 42) == "hello"
    assert strip_mention("<@43> hello", 42) == "<@43> hello"
    assert command_text("model", [("id", "gpt-5")]) == "/model gpt-5"
    assert command_text("status", []) == "/status"
    assert thread_name("  fix the build\nplease", "Chat") == "fix the build"
    assert len(thread_name("x" * 300, "Chat")) <= 80


def test_commands_become_valid_application_commands() -> None:
    payloads = command_payloads([*command_menu(), ("Bad Name!", "x"), ("long", "d" * 300)])
    names = [p["name"] for p in payloads]
    assert names == [*(name for name, _ in command_menu()), "long"]
    assert all(len(p["description"]) <= 100 for p in payloads)


def test_markdown_renders_for_discord_with_mentions_defused_outside_code() -> None:
    source = (
        "#### Small heading\n__bold__ and `@everyone in code` and @here\n"
        "![logo](https://x.test/a.png)\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "```\n<@123> stays in code\n```"
    )
    shown = render(source)
    assert "**Small heading**" in shown
    assert "**bold**" in shown
    assert "`@everyone in code`" in shown
    assert f"@{ZWSP}here" in shown
    assert "[logo](https://x.test/a.png)" in shown and "![" not in shown
    assert "```\n| a | b |\n|---|---|\n| 1 | 2 |\n```" in shown
    assert "<@123> stays in code" in shown
    assert balanced(shown)


def test_plain_text_is_escaped_but_links_stay_clickable() -> None:
    assert plain("**not bold** _x_ `y`") == r"\*\*not bold\*\* \_x\_ \`y\`"
    assert plain("see https://x.test/a_b_c") == "see https://x.test/a_b_c"
    assert plain("# not a heading\n> not a quote") == "\\# not a heading\n\\> not a quote"
    assert plain("ping <@&5> @everyone") == f"ping <@{ZWSP}&5> @{ZWSP}everyone"


async def test_a_command_where_the_bot_does_not_serve_gets_a_private_reason_and_no_turn(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake = world.fake
    served = world.guild.channel("general").id
    async with discord_bot(tmp_path, fake_agent, world, allowed_channels=[served]):
        asked = fake.slash(world.alice, "compact", channel_id=world.guild.channel("random").id)
        await wait_for(lambda: asked.callback is not None, "the answer")
    assert asked.callback is not None and asked.callback.get("type") == 4  # a message, at once
    data = asked.callback.get("data") or {}
    assert "does not answer in this channel" in data.get("content", "")
    assert asked.deferred_ephemeral
    assert fake_agent.prompt_texts() == []


# ---- text that cannot be encoded ------------------------------------------------------------------
# A lone surrogate, NUL, an escape sequence, an emoji and an astral noncharacter in one text.
HOSTILE = "a\ud800b\x00c \x1b[31m😀 \U0010ffff"
MADE_VALID = "a\ufffdbc [31m😀 \ufffd"


async def test_a_message_with_text_that_cannot_be_encoded_reaches_the_agent_valid(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake = world.fake
    alice, bob = world.dm_of(world.alice), world.dm_of(world.bob)
    async with discord_bot(tmp_path, fake_agent, world):
        fake.dm(world.alice, HOSTILE)
        await wait_for(lambda: shown(fake, alice) == [f"Echo: {MADE_VALID}"], "alice's reply")
        fake.dm(world.bob, "still there?")
        await wait_for(lambda: shown(fake, bob) == ["Echo: still there?"], "bob's reply")
    assert fake_agent.prompt_texts() == [MADE_VALID, "still there?"]


async def test_an_agent_chunk_with_text_that_cannot_be_encoded_is_delivered_valid(
    tmp_path: Path, fake_agent: FakeAgent, world: World
) -> None:
    fake = world.fake
    alice, bob = world.dm_of(world.alice), world.dm_of(world.bob)
    async with discord_bot(tmp_path, fake_agent, world):
        fake.dm(world.alice, script({"chunk": HOSTILE}, {"sleep": 0.2}, {"chunk": " end"}))
        await wait_for(lambda: shown(fake, alice) == [f"{MADE_VALID} end"], "the reply")
        fake.dm(world.bob, "next")
        await wait_for(lambda: shown(fake, bob) == ["Echo: next"], "bob's reply")
