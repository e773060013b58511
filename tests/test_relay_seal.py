"""Relayed events are sealed under SWITCHBOARD_CLUSTER_KEY (bot/cluster.py `RelaySeal`): a
payload pushed straight onto a replica's relay list (`switchboard:relay:<replica>`) by someone
who can write to Redis but holds no key is dropped with one WARNING line and counted, never
handled; one sealed for another replica, sealed long ago, or replayed is refused too. A Redis
state without the key does not start (`switchboard run` and `doctor` say how to make one)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import redis

from bot.cluster import RELAY_WINDOW, RelayRejected, RelaySeal, encode_event
from surfaces.base import ConversationKey, Inbound, UserRef
from tests.conftest import FakeAgent
from tests.engine_helpers import ScriptedSurface, engine_settings, running_app, wait_for
from tests.harness.clock import FakeClock
from tests.store_backends import CLUSTER_KEY
from tests.test_engine import sends

pytestmark = pytest.mark.usefixtures("clean_env")

KEY = ConversationKey("telegram", "chat-7")
ALICE = UserRef("alice", "Alice")


def _message(text: str, event_id: str) -> str:
    return encode_event(Inbound(KEY, ALICE, text, event_id), 1)


def test_a_sealed_event_opens_only_for_its_replica_within_the_window_and_once() -> None:
    clock = FakeClock(1_800_000_000.0)
    sender, receiver = RelaySeal(CLUSTER_KEY, clock=clock), RelaySeal(CLUSTER_KEY, clock=clock)
    payload = _message("hello", "ev-1")
    sealed = sender.seal(payload, "b")
    assert receiver.open(sealed, "b") == payload
    with pytest.raises(RelayRejected, match="replayed"):
        receiver.open(sealed, "b")
    with pytest.raises(RelayRejected, match="another replica"):
        RelaySeal(CLUSTER_KEY, clock=clock).open(sealed, "c")  # captured, pushed to c
    tampered = json.loads(sender.seal(payload, "b"))
    tampered["p"] = _message("rm -rf ~", "ev-1")
    with pytest.raises(RelayRejected, match="bad signature"):
        receiver.open(json.dumps(tampered), "b")
    with pytest.raises(RelayRejected, match="bad signature"):
        RelaySeal("another-key-" + "x" * 32, clock=clock).open(sender.seal(payload, "b"), "b")
    late = sender.seal(payload, "b")
    clock.now += RELAY_WINDOW + 1
    with pytest.raises(RelayRejected, match="window"):
        receiver.open(late, "b")
    for unsigned in (payload, "", "[]", '{"v": "sb1"}', "{"):
        with pytest.raises(RelayRejected, match="unsigned"):
            receiver.open(unsigned, "b")


@pytest.mark.anyio
async def test_a_forged_relay_pushed_onto_the_list_is_dropped_and_a_sealed_one_handled(
    tmp_path: Path, fake_agent: FakeAgent, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    surface = ScriptedSurface()
    settings = engine_settings(tmp_path, fake_agent, state=redis_url, replica_id="a")
    relay_list = "switchboard:relay:a"
    async with running_app(settings, surface) as app:
        with redis.Redis.from_url(redis_url) as raw:
            raw.rpush(relay_list, _message("unsigned forgery", "f-1"))
            forged = RelaySeal("not-the-cluster-key-" + "z" * 32).seal(
                _message("badly signed forgery", "f-2"), "a"
            )
            raw.rpush(relay_list, forged)
            raw.rpush(relay_list, RelaySeal(CLUSTER_KEY).seal(_message("genuine", "g-1"), "a"))
        await wait_for(lambda: sends(surface, "Echo: genuine"), "the sealed event's reply")
        rejected = "switchboard_relays_rejected_total"
        await wait_for(
            lambda: app.metrics.registry.get_sample_value(rejected) == 2.0, "both forgeries counted"
        )
    prompts = [json.dumps(frame) for frame in fake_agent.frames_in("session/prompt")]
    assert len(prompts) == 1 and "genuine" in prompts[0]
    assert not any("forgery" in call.text for call in surface.ops("send", "edit"))
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "rejected a relayed event" in r.getMessage()
    ]
    assert len(warnings) == 2
    assert "unsigned" in warnings[0] and "bad signature" in warnings[1]


def test_run_on_redis_without_the_cluster_key_refuses_in_one_sentence(run_cli) -> None:  # type: ignore[no-untyped-def]
    env = {
        "SWITCHBOARD_STATE": "redis://127.0.0.1:9/0",  # never reached: the key is checked first
        "SWITCHBOARD_TELEGRAM__TOKEN": "123456789:" + "A" * 35,
        "SWITCHBOARD_TELEGRAM__ALLOWED_USERS": "1",
        "SWITCHBOARD_HTTP__PORT": "off",
    }
    result = run_cli("run", env=env)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line and not line.startswith("{")]
    assert len(lines) == 1, result.stderr
    assert "SWITCHBOARD_CLUSTER_KEY" in lines[0]
    assert "secrets.token_urlsafe(32)" in lines[0]
    assert "Traceback" not in result.stderr
    doctor = run_cli("doctor", env=env | {"SWITCHBOARD_AGENT_COMMAND": "true"})
    assert doctor.returncode == 1
    assert any(
        "cluster key" in line and "SWITCHBOARD_CLUSTER_KEY" in line
        for line in doctor.stdout.splitlines()
    ), doctor.stdout
    short = run_cli("run", env=env | {"SWITCHBOARD_CLUSTER_KEY": "short"})
    assert short.returncode == 1 and "at least 32 characters" in short.stderr
