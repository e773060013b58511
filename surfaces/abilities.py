"""What a surface may do beyond the `Surface` protocol, declared as Protocols and found once.

An adapter has an ability by having its method (or, for `connected`, its boolean property); it
declares nothing else. The bot resolves every running surface's abilities once, at start-up
(`SurfaceAbilities.of`), into typed lists and maps it keeps, and never looks an ability up again:

- `ShowsOperations` (`set_operations(snapshot, act)`): the operations view for admins (the
  dashboard);
- `TakesLeases` (`set_leases(leases)`): cluster leases for work only one replica may do (the
  Telegram poller, Discord's shards);
- `RebuildsFiles` (`file_from_ref(...)`): a file another replica received, downloadable here
  (Telegram, Slack, Discord);
- `ServesRoutes` (`add_routes(app)`): pages on the bot's own HTTP server (the dashboard);
- `ReportsConnection` (`connected`, a bool property): whether its platform connection is up
  (Telegram, Discord);
- `AsksForText` (`ask_text(key, prompt, user=...)`): a question whose answer is the person's
  next message, posted so that the platform invites it (Telegram's force reply, the terminal's
  answer prompt). The answer arrives as an ordinary `Inbound`; the bot decides it is the answer.
  Slack and Discord mention the person and take their next message in that conversation
  without a mention (`surfaces.awaited_replies`). Elsewhere (the dashboard, where every message
  reaches the bot) the bot `send`s the prompt;
- `WithdrawsTextAsk` (`withdraw_text_ask(key, user=...)`): the answer `ask_text` awaited is no
  longer wanted (the card was answered by a button, timed out, was stopped), so a later plain
  message is not taken for the bot (Slack, Discord).

How a surface counts for readiness (`SurfaceAbilities.connected`): one that reports its
connection is connected when it says so; one that serves its pages on the bot's HTTP server and
has no connection of its own (the dashboard) is connected whenever that server answers, which is
the server asking, so it is always counted connected; any other (Slack's SDK client, which
reconnects by itself and reports nothing; the terminal) has no connection state to check and is
counted connected."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, runtime_checkable

from surfaces.base import ClusterLeases, ConversationKey, IncomingFile, MessageRef, Surface, UserRef

__all__ = [
    "AsksForText",
    "OpsAct",
    "OpsSnapshot",
    "RebuildsFiles",
    "ReportsConnection",
    "ServesRoutes",
    "ShowsOperations",
    "SurfaceAbilities",
    "TakesLeases",
    "WithdrawsTextAsk",
]

OpsSnapshot = Callable[[], Awaitable[dict[str, Any]]]
OpsAct = Callable[[str, str, str], Awaitable[str]]


@runtime_checkable
class ShowsOperations(Protocol):
    def set_operations(self, snapshot: OpsSnapshot, act: OpsAct) -> None:
        """Show the operations view (`snapshot()`, `act(actor, action, target)`) to admins."""
        ...


@runtime_checkable
class TakesLeases(Protocol):
    def set_leases(self, leases: ClusterLeases) -> None:
        """Handed before `run`, and only when several replicas share a store."""
        ...


@runtime_checkable
class RebuildsFiles(Protocol):
    def file_from_ref(
        self, name: str, mime: str, size: int | None, kind: str, ref: str
    ) -> IncomingFile | None:
        """The file `IncomingFile.ref` names, with a `fetch` of this adapter's, or None for a
        ref it does not recognise (checked like any input: it came through the shared store)."""
        ...


@runtime_checkable
class ServesRoutes(Protocol):
    def add_routes(self, app: Any) -> None:
        """Mount its pages on the HTTP server's aiohttp `Application`, before it starts."""
        ...


@runtime_checkable
class AsksForText(Protocol):
    async def ask_text(self, key: ConversationKey, prompt: str, *, user: UserRef) -> MessageRef:
        """Post `prompt` so that `user`'s next message in `key` is the answer, as naturally as
        the platform allows; returns the posted message."""
        ...


@runtime_checkable
class WithdrawsTextAsk(Protocol):
    def withdraw_text_ask(self, key: ConversationKey, *, user: UserRef) -> None:
        """`user`'s next message in `key` is no longer awaited (nothing is posted)."""
        ...


class ReportsConnection(Protocol):
    @property
    def connected(self) -> bool: ...


def reports_connection(surface: object) -> TypeGuard[ReportsConnection]:
    """A boolean `connected`, not merely an attribute of that name: the dashboard has a
    `connected` method (a socket's handler), which is no report of a connection."""
    return isinstance(getattr(surface, "connected", None), bool)


@dataclass(frozen=True, slots=True)
class SurfaceAbilities:
    """The running surfaces (by name) and their abilities, found once (see the module's doc)."""

    names: Sequence[str]
    operations: Sequence[ShowsOperations]
    lease_takers: Sequence[TakesLeases]
    file_rebuilders: Mapping[str, RebuildsFiles]  # by surface name
    route_servers: Sequence[ServesRoutes]
    connections: Mapping[str, ReportsConnection]  # by surface name
    text_askers: Mapping[str, AsksForText]  # by surface name

    @classmethod
    def of(cls, surfaces: Sequence[Surface]) -> SurfaceAbilities:
        connections: dict[str, ReportsConnection] = {}
        for surface in surfaces:
            name = surface.name
            if reports_connection(surface):
                connections[name] = surface
        return cls(
            names=[s.name for s in surfaces],
            operations=[s for s in surfaces if isinstance(s, ShowsOperations)],
            lease_takers=[s for s in surfaces if isinstance(s, TakesLeases)],
            file_rebuilders={s.name: s for s in surfaces if isinstance(s, RebuildsFiles)},
            route_servers=[s for s in surfaces if isinstance(s, ServesRoutes)],
            connections=connections,
            text_askers={s.name: s for s in surfaces if isinstance(s, AsksForText)},
        )

    def connected(self, name: str) -> bool:
        """Whether surface `name` counts as connected (the rule is in the module's doc)."""
        reporting = self.connections.get(name)
        return reporting is None or reporting.connected
