"""Issue 21's attacks, each done by the scripted agent against the real `switchboard run` (the
fake Telegram Bot API by webhook or long polling, SQLite or a real Redis with a password), in
the DEFAULT isolation settings: every test passes only when its attack FAILS.

The agent attacks with what any real agent has: its own shell tool (the fake agent's `shell`
step running tests/fakes/attacker.py), and the client methods `fs/*` and `terminal/*`. Where
the attacker would need what it should never learn, the test also stands in for an attacker
that did learn it (a press forged with the real token from the store, a relay pushed with the
right Redis password). A failure message starts with "ATTACK SUCCEEDED" and names the attack."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

from tests.attack_harness import (
    ALICE,
    BOB,
    POLLING_REDIS,
    POLLING_SQLITE,
    REPLICA,
    WEBHOOK_REDIS,
    WEBHOOK_SQLITE,
    AttackRun,
    Deployment,
    attack_run,
)
from tests.conftest import script
from tests.fakes.telegram_api import Message

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

EVERY_WAY = [WEBHOOK_SQLITE, POLLING_REDIS]  # both receivers, both stores
ids = str


def leaks(run: AttackRun, text: str) -> list[str]:
    """The names of the secrets `text` holds."""
    return [name for name, value in run.secrets().items() if value in text]


def approval_message(run: AttackRun) -> Message | None:
    for message in run.api.chat_messages(ALICE.id):
        if message.reply_markup and "inline_keyboard" in message.reply_markup:
            labels = [b.get("text") for row in message.reply_markup["inline_keyboard"] for b in row]
            if "No" in labels:
                return message
    return None


def button(message: Message, label: str) -> str:
    assert message.reply_markup is not None
    for row in message.reply_markup["inline_keyboard"]:
        for choice in row:
            if choice.get("text") == label:
                return str(choice["callback_data"])
    raise AssertionError(f"no {label!r} button on the approval")


async def answer_no(run: AttackRun) -> None:
    """Alice herself presses No (as she would), and the agent hears the outcome."""
    await answer(run, "No")


async def answer(run: AttackRun, label: str) -> None:
    """Alice presses `label` on the agent's approval card once it shows."""
    await run.wait_for(lambda: approval_message(run), "the agent's approval card")
    message = approval_message(run)
    assert message is not None
    press = run.api.press(ALICE, message, button(message, label))
    if run.deployment.receiving == "webhook":
        assert await run.post_update(press) == 200
    await run.wait_text("permission:")


def allowed(run: AttackRun) -> bool:
    return "permission:allow" in run.chat_text()


async def pending_tokens(run: AttackRun) -> dict[str, dict[str, Any]]:
    """The pending approval tokens as the store holds them: token -> record."""
    if run.redis is None:
        with sqlite3.connect(run.state_path) as db:
            rows = db.execute("SELECT token, option_id, requester, chat FROM approvals")
            return {t: {"option_id": o, "requester": r, "chat": c} for t, o, r, c in rows}
    client = run.redis.raw()
    try:
        found = {}
        for key in client.keys("switchboard:approval:*"):
            record = json.loads(client.get(key) or "{}")
            found[record["token"]] = record
        return found
    finally:
        client.close()


def allow_token(tokens: dict[str, dict[str, Any]]) -> str:
    """A token that answers allow_once: the agent's own option or the card's Trust button
    (which answers the agent the same way), either one a real token for the attack."""
    allowing = [t for t, r in tokens.items() if r["option_id"] == "allow_once"]
    assert allowing, "the card has no allow_once token"
    return allowing[0]


def names_in(paths: list[str]) -> dict[str, list[str]]:
    """What each directory among `paths` holds, as the host sees it."""
    return {path: sorted(os.listdir(path)) for path in paths if os.path.isdir(path)}


def sleepers(nonce: str) -> list[int]:
    """Host pids of `sleep <nonce>` processes (the nonce is unique to one test)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if nonce.encode() in argv and any(part.endswith(b"sleep") for part in argv[:2]):
            found.append(int(cmdline.parent.name))
    return found


# ---- secrets the agent can reach -----------------------------------------------------------------
@pytest.mark.parametrize("deployment", EVERY_WAY, ids=ids)
async def test_the_agent_finds_no_switchboard_secret_in_any_environment_it_can_read(
    tmp_path: Path, deployment: Deployment
) -> None:
    async with attack_run(tmp_path, deployment) as run:
        # a terminal's shell is Switchboard's child (its $PPID): what can it read?
        seen_by_terminal = run.attack_dir / "loot-terminal.txt"
        dump = (
            f"{{ tr '\\0' '\\n' </proc/$PPID/environ; for f in /proc/[0-9]*/environ; "
            f"do tr '\\0' '\\n' <$f; done; }} 2>/dev/null | grep -a ^SWITCHBOARD_ "
            f">{seen_by_terminal}"
        )
        terminal = {"command": "sh", "args": ["-c", dump]}
        waited = {"terminalId": "$t.terminalId"}
        await run.say(
            script(
                {"shell": run.attacker("environ", run.loot_path("environ"))},
                {"request": {"method": "terminal/create", "params": terminal}, "save": "t"},
                {"request": {"method": "terminal/wait_for_exit", "params": waited}},
                {"chunk": "DONE-ENVIRON"},
            )
        )
        await run.wait_text("DONE-ENVIRON")
        environments = run.loot("environ")["environments"]
        environments["terminal"] = {"all": seen_by_terminal.read_text(errors="replace")}
    leaked = {
        label: found
        for label, env in environments.items()
        if (found := leaks(run, "\n".join(f"{k}={v}" for k, v in env.items())))
    }
    own = sorted(name for name in environments["own"] if name.startswith("SWITCHBOARD_"))
    assert not leaked and not own, (
        "ATTACK SUCCEEDED: "
        + "; ".join(
            f"the agent read {found} in the {label} environment" for label, found in leaked.items()
        )
        + (f"; Switchboard's settings reached the agent's own environment: {own}" if own else "")
    )


@pytest.mark.parametrize("deployment", EVERY_WAY, ids=ids)
async def test_secrets_printed_by_a_terminal_never_reach_the_chat(
    tmp_path: Path, deployment: Deployment
) -> None:
    only = "| grep -a ^SWITCHBOARD_"  # Switchboard's settings, nothing else of the host's
    dump = f"{{ tr '\\0' '\\n' </proc/$PPID/environ; env; }} {only}"
    agent_dump = f"{{ tr '\\0' '\\n' </proc/$AGENT_PPID/environ; env; }} {only}"
    async with attack_run(tmp_path, deployment) as run:
        await run.say(
            script(
                {
                    "request": {
                        "method": "terminal/create",
                        "params": {"command": "sh", "args": ["-c", dump]},
                    },
                    "save": "t",
                },
                {
                    "request": {
                        "method": "terminal/wait_for_exit",
                        "params": {"terminalId": "$t.terminalId"},
                    }
                },
                {
                    "request": {
                        "method": "terminal/output",
                        "params": {"terminalId": "$t.terminalId"},
                    }
                },
                {"shell": agent_dump, "max": 20000},
                {"chunk": "DONE-TERMINAL"},
            )
        )
        await run.wait_text("DONE-TERMINAL")
        shown = run.sent_text()
    assert "reply:" in shown  # the terminal's output was part of the reply
    found = leaks(run, shown)
    assert not found, (
        f"ATTACK SUCCEEDED: the chat was shown {found} (printed by the agent's terminal)"
    )


@pytest.mark.parametrize("deployment", EVERY_WAY, ids=ids)
async def test_the_agent_cannot_read_the_state_or_the_config_file_nor_list_the_state_directory(
    tmp_path: Path, deployment: Deployment
) -> None:
    async with attack_run(tmp_path, deployment) as run:
        targets = [str(run.config_path), str(run.state_path.parent), str(run.config_path.parent)]
        if run.redis is None:
            targets.append(str(run.state_path))
        await run.say(
            script(
                {"shell": run.attacker("files", run.loot_path("files"), *targets)},
                {"chunk": "DONE-FILES"},
            )
        )
        await run.wait_text("DONE-FILES")
        loot = run.loot("files")
        files, loot_home = loot["files"], loot["home"]
    host_files = names_in(targets)
    for path, got in files.items():
        # a directory the sandbox shows only because the agent's own home lies beneath it
        # reveals nothing of Switchboard's
        revealed = [
            name
            for name in got.get("listed", [])
            if name in host_files.get(path, [])
            and not Path(loot_home).is_relative_to(Path(path) / name)
        ]
        held = leaks(run, got.get("read", ""))
        assert not revealed and ("error" in got or "listed" in got), (
            "ATTACK SUCCEEDED: the agent "
            + (f"listed {revealed} in {path}" if revealed else f"read {path}")
            + (f", holding {held}" if held else "")
        )


# ---- approvals only from people ----------------------------------------------------------------
async def decided(run: AttackRun, refused_actors: set[str], timeout: float = 30.0) -> None:
    """Until the agent was allowed, or the audit log holds a refused approval by each of
    `refused_actors` (a forged press is taken or refused within moments)."""
    with anyio.move_on_after(timeout):
        while not allowed(run):
            records = await run.audit()
            refused = {r["actor"] for r in records if r["kind"] == "refused"}
            if refused_actors <= refused:
                return
            await anyio.sleep(0.5)


@pytest.mark.parametrize("deployment", [WEBHOOK_SQLITE, WEBHOOK_REDIS], ids=ids)
async def test_the_agent_cannot_approve_its_own_tool_request_through_the_webhook(
    tmp_path: Path, deployment: Deployment
) -> None:
    async with attack_run(tmp_path, deployment) as run:
        forger = run.attacker("forge-webhook", run.loot_path("forge"), "20")
        await run.say(
            script(
                {"shell": f"{forger} >/dev/null 2>&1 &"},
                {"permission": {}},
                {"chunk": "DONE-FORGE"},
            )
        )
        await run.wait_for(lambda: approval_message(run), "the approval to be asked")
        message = approval_message(run)
        assert message is not None
        no = button(message, "No")
        await run.wait_for(lambda: Path(run.loot_path("forge")).exists(), "the forger", 40)
        forge = run.loot("forge")
        # Alice's own press comes after the forged one in her chat's lane of updates.
        press = run.api.press(ALICE, message, no)
        if deployment.receiving == "webhook":
            assert await run.post_update(press) == 200
        await run.wait_text("DONE-FORGE")
        approvals = [r for r in await run.audit() if r["kind"] == "approval"]
    assert not allowed(run), (
        f"ATTACK SUCCEEDED: the agent approved its own tool request through the webhook "
        f"(what its forger found and did: {forge}; audited: {approvals})"
    )
    assert "permission:reject_once" in run.chat_text()


@pytest.mark.parametrize("deployment", [WEBHOOK_SQLITE, WEBHOOK_REDIS], ids=ids)
async def test_a_press_of_the_real_token_from_another_chat_or_another_user_is_refused_and_audited(
    tmp_path: Path, deployment: Deployment
) -> None:
    async with attack_run(tmp_path, deployment) as run:
        await run.say(script({"permission": {}}, {"chunk": "DONE-PRESS"}))
        await run.wait_for(lambda: approval_message(run), "the approval to be asked")
        message = approval_message(run)
        assert message is not None
        token = button(message, "Yes")
        # the store keeps the token the button carries, as the agent's allow_once
        assert (await pending_tokens(run))[token]["option_id"] == "allow_once"
        # Alice's own token, pressed "by Alice" on a copy of the approval in Bob's chat
        elsewhere = Message(message.message_id, run.api.private_chat(BOB), message.sender, "x")
        assert await run.post_update(run.api.press(ALICE, elsewhere, token)) == 200
        await decided(run, {str(ALICE.id)})
        assert not allowed(run), (
            "ATTACK SUCCEEDED: a press of a valid approval token from another chat was accepted"
        )
        # Bob (allowed to chat, not an approver) pressing it in Alice's chat
        assert await run.post_update(run.api.press(BOB, message, token)) == 200
        await decided(run, {str(ALICE.id), str(BOB.id)})
        assert not allowed(run), (
            "ATTACK SUCCEEDED: another user's press of the requester's approval was accepted"
        )
        await answer_no(run)
        await run.wait_text("DONE-PRESS")
        refused = {r["actor"] for r in await run.audit() if r["kind"] == "refused"}
    assert "permission:reject_once" in run.chat_text()
    assert str(ALICE.id) in refused, "the press from another chat was refused but not audited"
    assert str(BOB.id) in refused, "another user's press was refused but not audited"


async def relay_taken(run: AttackRun, client: redis.Redis) -> None:
    """Give an event pushed onto this replica's relay list its chance: until the list was
    read (if it still is read from) and then a few seconds more for a choice to be taken."""
    key = f"switchboard:relay:{REPLICA}"
    with anyio.move_on_after(10):
        while client.llen(key):
            await anyio.sleep(0.1)
    with anyio.move_on_after(5):
        while not allowed(run):
            await anyio.sleep(0.1)


async def test_a_choice_relayed_through_redis_without_the_cluster_key_is_ignored(
    tmp_path: Path,
) -> None:
    async with attack_run(tmp_path, POLLING_REDIS) as run:
        assert run.redis is not None
        # the agent was told where Redis listens, as if it had found it; the password it has
        # to find for itself
        relay = run.attacker(
            "relay", run.loot_path("relay"), "127.0.0.1", str(run.redis.port), REPLICA, "20"
        )
        await run.say(
            script(
                {"shell": f"{relay} >/dev/null 2>&1 &"},
                {"permission": {}},
                {"chunk": "DONE-RELAY"},
            )
        )
        await run.wait_for(lambda: approval_message(run), "the approval to be asked")
        await run.wait_for(lambda: Path(run.loot_path("relay")).exists(), "the agent's relay", 40)
        found = run.loot("relay")
        client = run.redis.raw()
        try:
            await relay_taken(run, client)
            assert not allowed(run), (
                f"ATTACK SUCCEEDED: the agent pushed a choice onto the relay list and it was "
                f"taken ({found})"
            )
            # an attacker holding the Redis password, but not the cluster key
            token = allow_token(await pending_tokens(run))
            forged = {
                "type": "choice",
                "token": token,
                "key": ["telegram", str(ALICE.id), ""],
                "user": [str(ALICE.id), "Alice"],
                "event_id": "forged-by-the-test",
                "hops": 1,
            }
            client.rpush(f"switchboard:relay:{REPLICA}", json.dumps(forged))
            await relay_taken(run, client)
            assert not allowed(run), (
                "ATTACK SUCCEEDED: an unsigned relayed choice pushed with the Redis password "
                "approved the tool request"
            )
        finally:
            client.close()
        await answer_no(run)
        await run.wait_text("DONE-RELAY")
    assert "permission:reject_once" in run.chat_text()


# ---- bounded by construction -------------------------------------------------------------------
@pytest.mark.parametrize("deployment", EVERY_WAY, ids=ids)
async def test_reading_one_line_of_a_1_gib_sparse_file_costs_switchboard_a_few_mib(
    tmp_path: Path, deployment: Deployment
) -> None:
    async with attack_run(tmp_path, deployment) as run:
        big = run.workspace / "sparse.txt"
        with big.open("wb") as file:
            file.truncate(1 << 30)  # one 1 GiB line of NULs, no disk blocks
        await run.say("warm up")  # the agent is spawned and its first turn done
        await run.wait_text("Echo: warm up")
        before = run.status_kib("VmHWM")
        read = {"method": "fs/read_text_file", "params": {"path": str(big), "limit": 1}}
        # inside a repeat: the chat is told how the read ended, not shown a MiB of NULs
        await run.say(script({"repeat": 1, "steps": [{"request": read}]}, {"chunk": "DONE-SPARSE"}))
        await run.wait_text("DONE-SPARSE", timeout=120)
        grown = (run.status_kib("VmHWM") - before) // 1024
    assert grown < 64, (
        f"ATTACK SUCCEEDED: one fs/read_text_file (limit 1) of a sparse file grew Switchboard's "
        f"peak RSS by {grown} MiB"
    )


@pytest.mark.parametrize("deployment", EVERY_WAY, ids=ids)
async def test_a_symlink_swapped_in_during_fs_requests_never_escapes_the_workspace(
    tmp_path: Path, deployment: Deployment
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = f"OUTSIDE-{secrets.token_hex(8)}"
    (outside / "read.txt").write_text(secret + "\n")
    rounds = 1500
    async with attack_run(tmp_path, deployment) as run:
        ws = run.workspace
        stop = ws / ".attack" / "stop-swapping"
        swapper = run.attacker("swap", str(ws / "d"), str(ws / "link"), str(stop), "300000")
        read = {
            "request": {
                "method": "fs/read_text_file",
                "params": {"path": str(ws / "d" / "read.txt")},
            }
        }
        write = {
            "request": {
                "method": "fs/write_text_file",
                "params": {
                    "path": str(ws / "d" / "written.txt"),
                    "content": "WRITTEN-BY-THE-AGENT",
                },
            }
        }
        # Alice allows the edit of d/written.txt once: that approval covers each write of the
        # race (each unasked one would get a card of its own)
        edit = {
            "sessionUpdate": "tool_call",
            "toolCallId": "race",
            "title": "Write d/written.txt",
            "kind": "edit",
            "locations": [{"path": str(ws / "d" / "written.txt")}],
        }
        await run.say(
            script(
                {"shell": f"mkdir d && echo inside > d/read.txt && ln -s {outside} link"},
                {"update": edit},
                {"permission": {"toolCall": {"toolCallId": "race"}}},
                {"shell": f"{swapper} > .attack/swaps.txt 2>&1 &"},
                {"repeat": rounds, "steps": [read, write]},
                {"shell": f"touch {stop}; sleep 0.5; cat .attack/swaps.txt"},
                {"chunk": "DONE-RACE"},
            )
        )
        await answer(run, "Yes")
        await run.wait_text("DONE-RACE", timeout=180)
        shown = run.sent_text()
    swaps = (ws / ".attack" / "swaps.txt").read_text().split()
    assert swaps and swaps[0].isdigit() and int(swaps[0]) >= 1000, f"the race did not run: {swaps}"
    escaped = []
    if secret in shown:
        escaped.append("fs/read_text_file read a file outside the workspace")
    outside_now = sorted(path.name for path in outside.iterdir())
    if outside_now != ["read.txt"]:
        escaped.append(f"fs/write_text_file wrote outside the workspace: {outside_now}")
    if (outside / "read.txt").read_text() != secret + "\n":
        escaped.append("fs/write_text_file replaced a file outside the workspace")
    assert not escaped, f"ATTACK SUCCEEDED ({swaps[0]} swaps, {rounds} rounds): " + "; ".join(
        escaped
    )


@pytest.mark.parametrize("deployment", EVERY_WAY, ids=ids)
async def test_a_setsid_child_dies_with_its_released_or_killed_terminal(
    tmp_path: Path, deployment: Deployment
) -> None:
    released, killed = (f"{n}.{secrets.randbelow(10**8):08d}" for n in (1000, 1001))

    def detached(nonce: str, then: str) -> dict[str, Any]:
        command = f"setsid sleep {nonce} >/dev/null 2>&1 & echo started:$!; {then}"
        return {"method": "terminal/create", "params": {"command": "sh", "args": ["-c", command]}}

    try:
        async with attack_run(tmp_path, deployment) as run:
            await run.say(
                script(
                    {"request": detached(released, "sleep 0.5"), "save": "r"},
                    {
                        "request": {
                            "method": "terminal/wait_for_exit",
                            "params": {"terminalId": "$r.terminalId"},
                        }
                    },
                    {
                        "request": {
                            "method": "terminal/output",
                            "params": {"terminalId": "$r.terminalId"},
                        }
                    },
                    {
                        "request": {
                            "method": "terminal/release",
                            "params": {"terminalId": "$r.terminalId"},
                        }
                    },
                    {"request": detached(killed, "exec sleep 60"), "save": "k"},
                    {"sleep": 0.5},
                    {
                        "request": {
                            "method": "terminal/output",
                            "params": {"terminalId": "$k.terminalId"},
                        }
                    },
                    {
                        "request": {
                            "method": "terminal/kill",
                            "params": {"terminalId": "$k.terminalId"},
                        }
                    },
                    {
                        "request": {
                            "method": "terminal/wait_for_exit",
                            "params": {"terminalId": "$k.terminalId"},
                        }
                    },
                    {"chunk": "DONE-SETSID"},
                )
            )
            await run.wait_text("DONE-SETSID")
            # (the approval cards show the command itself: `started:$!`)
            assert len(re.findall(r"started:\d", run.chat_text())) == 2, (
                "the terminals did not start their children"
            )
            with anyio.move_on_after(10):  # a killed process is gone within moments
                while sleepers(released) or sleepers(killed):
                    await anyio.sleep(0.1)
            pairs = (("released", released), ("killed", killed))
            outlived = [how for how, nonce in pairs if sleepers(nonce)]
            assert not outlived, (
                f"ATTACK SUCCEEDED: `setsid sleep` outlived its {' and its '.join(outlived)} "
                "terminal"
            )
    finally:
        for nonce in (released, killed):
            for pid in sleepers(nonce):  # ours, found by the nonce only this test used
                os.kill(pid, signal.SIGKILL)


# ---- what reaches the log ------------------------------------------------------------------------
@pytest.mark.parametrize("deployment", [WEBHOOK_REDIS, POLLING_SQLITE], ids=ids)
async def test_the_debug_log_never_holds_a_secret_the_agent_s_frames_carried(
    tmp_path: Path, deployment: Deployment
) -> None:
    async with attack_run(tmp_path, deployment) as run:
        carried = [*run.secrets().values(), run.state]  # the state: Redis' URL with its password
        await run.say(
            script(
                {"chunk": "what I found: " + " ".join(carried)},
                {"thought": "and also " + " ".join(carried)},
                {"chunk": " DONE-LOG"},
            )
        )
        await run.wait_text("DONE-LOG")
    log_text = run.log_text()
    assert '"level": "debug"' in log_text or '"level":"debug"' in log_text, "not a debug log"
    found = leaks(run, log_text)
    assert not found, f"ATTACK SUCCEEDED: the debug log holds {found} from the agent's frames"
