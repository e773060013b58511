"""`Conversations`: the registry of live conversations, one `ChatRunner` each.

Memory follows the live conversations, not every conversation ever seen: a conversation idle
for `RELEASE_AFTER` seconds (no turn running or queued, no command answering, so no approval
pending) is released: its runner goes, and its agent session objects with it, while the agent
keeps the session. Its next message builds a new runner that takes the same agent session up
again (no session/load while that agent runs; the stored binding resumes it after a respawn, as
for any conversation). What /status and /help show from the agent (context used, the agent's
commands) is carried over, as a `ReleasedState`, for the most recently released
`RELEASED_KEPT` conversations.

With replicas, each runner stands for a conversation lease this replica holds (bot/routing.py):
a runner built for a conversation served elsewhere since reloads its session, and releasing a
runner lets its lease go (`LeaseKeeper`)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio

from acp import AcpClient, AcpRuntime, AgentCommand, UsageInfo
from bot.approval_commands import remember_withheld
from bot.chat_runner import ChatRunner
from bot.services import ConversationServices
from surfaces.base import ConversationKey, Surface

__all__ = [
    "RELEASED_KEPT",
    "RELEASE_AFTER",
    "SHUTDOWN_BUDGET",
    "Conversations",
    "LeaseKeeper",
    "ReleasedState",
]

# A conversation idle this long is released (checked about every RELEASE_AFTER / 4 seconds). A
# released conversation behaves as before, so this is short: a busy bot keeps only its last few
# seconds of conversations; a burst of messages, or a command right after a reply, still finds its
# runner (no store read to rebuild it).
RELEASE_AFTER = 2.0
# Released conversations whose agent-reported state is kept; past this, the oldest show what a
# restarted bot shows until their next turn.
RELEASED_KEPT = 10_000
# Stopping must finish within 10 s: turns get this long to end with their partial output, then
# are cut (1 s), then agents get their shutdown ladder (about 4 s at worst).
SHUTDOWN_BUDGET = 4.0


class LeaseKeeper(Protocol):
    """The conversation leases behind the runners (bot/routing.py; one process: every one)."""

    def moved_here(self, key: ConversationKey) -> bool:
        """Whether the conversation was served elsewhere since this replica last did."""
        ...

    def let_go(self, key: ConversationKey) -> None:
        """The conversation's runner went: its lease goes too."""
        ...


@dataclass(frozen=True, slots=True)
class ReleasedState:
    """What a released conversation's runner knew from the agent (its commands and context
    usage) and what it had shown of them (the native menu, the context threshold last told), so
    a rebuilt runner neither repeats a menu update nor a /compact hint."""

    agent_commands: tuple[str, ...]
    usage: UsageInfo | None
    menu_shown: tuple[AgentCommand, ...]
    compact_told: int

    @classmethod
    def of(cls, runner: ChatRunner) -> ReleasedState | None:
        """None when the runner learned nothing worth keeping."""
        if not (runner.agent_commands or runner.usage is not None or runner.menu_shown):
            return None
        return cls(runner.agent_commands, runner.usage, runner.menu_shown, runner.compact_told)

    def restore(self, runner: ChatRunner) -> None:
        runner.agent_commands, runner.usage = self.agent_commands, self.usage
        runner.menu_shown, runner.compact_told = self.menu_shown, self.compact_told


class Conversations:
    """The live conversations' runners (see the module's doc)."""

    def __init__(
        self,
        services: ConversationServices,
        leases: LeaseKeeper,
        *,
        release_after: float = RELEASE_AFTER,
    ) -> None:
        self._services = services
        self._leases = leases
        self._release_after = release_after
        self.runners: dict[ConversationKey, ChatRunner] = {}
        self._released: OrderedDict[ConversationKey, ReleasedState] = OrderedDict()

    def __iter__(self) -> Iterator[ChatRunner]:
        return iter(self.runners.values())

    def get(self, key: ConversationKey) -> ChatRunner | None:
        return self.runners.get(key)

    def runner(self, surface: Surface, key: ConversationKey) -> ChatRunner:
        """The conversation's runner, built (with what it knew when released) if it has none."""
        runner = self.runners.get(key)
        if runner is None:
            runner = self.runners[key] = ChatRunner(self._services, surface, key)
            if self._leases.moved_here(key):  # served elsewhere since this replica last did
                runner.sessions.stale = True
                self._released.pop(key, None)
            released = self._released.pop(key, None)
            if released is not None:
                released.restore(runner)
        return runner

    def lost(self, key: ConversationKey) -> ChatRunner | None:
        """Another replica took the conversation: its runner is forgotten here at once (its
        turn is stopped by the caller), and nothing of it is kept."""
        return self.runners.pop(key, None)

    def release_idle(self, now: float) -> None:
        """Forget the conversations idle for `release_after` seconds (see the module's doc)."""
        cutoff = now - self._release_after
        idle = [key for key, r in self.runners.items() if r.idle and r.idle_since <= cutoff]
        for key in idle:
            runner = self.runners.pop(key)
            remember_withheld(runner)
            runner.release()
            self._leases.let_go(key)
            released = ReleasedState.of(runner)
            if released is not None:
                self._released[key] = released
                if len(self._released) > RELEASED_KEPT:
                    self._released.popitem(last=False)

    async def release_loop(self) -> None:
        while True:
            await anyio.sleep(self._release_after / 4)
            self.release_idle(time.monotonic())

    def on(self, runtime: AcpRuntime) -> list[ChatRunner]:
        """The conversations whose session is on `runtime`'s agent."""
        return [r for r in self.runners.values() if runtime_of(r) is runtime]

    def agent_stopped(self, client: AcpClient) -> None:
        """The pool stopped an idle agent (unused, or the least recently used at the cap): its
        conversations drop their session objects; the next message resumes with session/load."""
        for runner in self.runners.values():
            current = runner.sessions.current
            if current is not None and current.client is client:
                runner.sessions.drop()

    async def stop_all(self) -> None:
        """Shutdown: running turns are stopped and given `SHUTDOWN_BUDGET` to end with their
        partial output delivered, then cut (1 s more)."""
        running = [runner for runner in self.runners.values() if runner.running]
        for runner in running:
            await runner.stop()
        with anyio.move_on_after(SHUTDOWN_BUDGET):
            await _all_idle(running)
        for runner in running:
            runner.hard_stop()
        with anyio.move_on_after(1):
            await _all_idle(running)


def runtime_of(runner: ChatRunner) -> AcpRuntime | None:
    current = runner.sessions.current
    return current.client.runtime if current is not None else None


async def _all_idle(runners: Sequence[ChatRunner]) -> None:
    """Return once none of `runners` has a turn running or waiting (the caller bounds it)."""
    for runner in runners:
        await runner.wait_idle()
