"""Replicas sharing one state store (issue 16): who serves which conversation.

Every replica has an id (`SWITCHBOARD_REPLICA_ID`) and a heartbeat. A conversation is served by
the replica that holds its lease: taken when an event of the conversation first reaches a
replica, kept (renewed every third of `SWITCHBOARD_LEASE_TTL`) while the conversation's runner
lives, let go when the runner is released. An event that reaches another replica is claimed
there (cluster-wide de-duplication) and relayed to the holder, so one conversation's events are
handled in order by one replica, one turn at a time. Each lease carries a fencing token; the
store refuses a conversation's writes made under a token that is no longer current
(`LeaseLost`), so a replica that lost its lease (a pause longer than the TTL) cannot overwrite
what the new holder wrote.

When a replica dies its heartbeat and leases expire; a live replica's sweep adopts what it left:
events relayed to it, undelivered replies (the ledger) and turns it was running (the journal:
the person is told the reply was cut off). The next message in such a conversation takes the
lease afresh (`Lease.moved`), and the runner resumes the agent session with session/load, which
needs the agents' state and the workspaces on storage every replica reaches.

With the embedded SQLite store there is one process: `SoloCluster` grants every lease at once
and relays nothing; the code paths are the same.

A relayed event is sealed (`RelaySeal`): HMAC-SHA256 under `SWITCHBOARD_CLUSTER_KEY` over the
event, the replica it is for, the time it was sealed and a random nonce. A replica takes only
what was sealed for it (or for a dead replica it adopts), within `RELAY_WINDOW` seconds of the
sealing replica's clock, and each nonce once: whoever can write to Redis but does not hold the
key cannot hand a replica an event, nor replay a captured one to another replica or later.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.conversation import ConversationKey
from bot.store import StoreError
from config import ConfigError
from config.settings import MAKE_KEY, MIN_CLUSTER_KEY
from surfaces.base import ChoiceAnswer, Inbound, UserRef
from surfaces.errors import LeasesUnavailable

__all__ = [
    "Cluster",
    "FileRef",
    "Lease",
    "RelayRejected",
    "RelaySeal",
    "RelayedEvent",
    "SoloCluster",
    "SurfaceLeases",
    "check_cluster_key",
    "conversation_lease",
    "decode_event",
    "encode_event",
]

log = logging.getLogger(__name__)

# An event relayed more often than this (the lease moving under it each time) is handled where
# it is: order within a conversation matters less than answering at all.
MAX_HOPS = 3


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease this replica holds. `token` grows with every new holder (the fencing token);
    `moved`: the previous holder was another replica, so what this replica's agents hold of the
    conversation's session may be stale (the runner loads it again)."""

    name: str
    token: int
    moved: bool = False


def conversation_lease(key: ConversationKey) -> str:
    # JSON, not "a:b:c": ids may contain colons.
    return "conv:" + json.dumps([key.surface, key.chat, key.thread])


class Cluster(Protocol):
    """The coordination the app needs; `SoloCluster` (one process) and
    `bot.redis_cluster.RedisCluster` (replicas on Redis) implement it, and
    `bot.cluster_choice.open_cluster` picks one. Store failures raise `StoreError`."""

    replica: str
    ttl: float
    shared: bool  # other replicas may exist

    async def acquire(self, name: str) -> Lease | str:
        """The lease `name` for this replica (renewed if it holds it already), or the id of
        the replica holding it."""
        ...

    async def release(self, lease: Lease) -> None: ...

    async def beat(self, leases: Sequence[Lease]) -> set[str]:
        """Renew this replica's heartbeat and `leases`; the names of those it no longer holds."""
        ...

    async def relay(self, replica: str, payload: str) -> bool:
        """Hand `payload` to `replica`; False when it is not alive (nothing was sent)."""
        ...

    async def relayed(self, wait: float) -> list[str]:
        """What other replicas handed to this one, oldest first (waits up to `wait` seconds for
        the first)."""
        ...

    async def dead_replicas(self) -> list[str]:
        """Replicas that registered and whose heartbeat has expired."""
        ...

    async def alive(self) -> list[str]:
        """The live replicas' ids, sorted (this one included once it has beaten)."""
        ...

    async def adopt(self, dead: str) -> list[str]:
        """Take what was relayed to the dead replica `dead` (oldest first), and forget it;
        another replica calling this at once gets nothing."""
        ...

    async def aclose(self) -> None: ...


class SoloCluster:
    """One process: every lease is granted, nothing is relayed, nobody else can die."""

    shared = False

    def __init__(self, replica: str, ttl: float) -> None:
        self.replica = replica
        self.ttl = ttl

    async def acquire(self, name: str) -> Lease | str:
        return Lease(name, 1)  # nobody else takes it, so its token never needs to grow

    async def release(self, lease: Lease) -> None:
        pass

    async def beat(self, leases: Sequence[Lease]) -> set[str]:
        return set()

    async def relay(self, replica: str, payload: str) -> bool:
        return False

    async def relayed(self, wait: float) -> list[str]:
        return []

    async def dead_replicas(self) -> list[str]:
        return []

    async def alive(self) -> list[str]:
        return [self.replica]

    async def adopt(self, dead: str) -> list[str]:
        return []

    async def aclose(self) -> None:
        pass


class SurfaceLeases:
    """`surfaces.base.ClusterLeases` on a `Cluster`: named leases for a surface's singletons
    (the Telegram poller, Discord shards), kept apart from conversations' by their prefix."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster
        self.replica = cluster.replica
        self.ttl = cluster.ttl

    async def hold(self, name: str) -> bool:
        try:
            return isinstance(await self._cluster.acquire("surface:" + name), Lease)
        except StoreError as exc:
            raise LeasesUnavailable(exc.reason) from exc

    async def let_go(self, name: str) -> None:
        try:
            await self._cluster.release(Lease("surface:" + name, 0))
        except StoreError as exc:
            raise LeasesUnavailable(exc.reason) from exc

    async def replicas(self) -> list[str]:
        try:
            return await self._cluster.alive()
        except StoreError as exc:
            raise LeasesUnavailable(exc.reason) from exc


# ---- relaying an event -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileRef:
    """An attachment as it travels: what `IncomingFile` says of it, and its adapter's `ref`."""

    name: str
    mime: str
    size: int | None
    kind: str
    ref: str


@dataclass(frozen=True, slots=True)
class RelayedEvent:
    """An event another replica claimed and handed on. `files` are its attachments as they
    travel; the receiving adapter turns each back into a download (`file_from_ref`); one that
    could not travel (no `ref`) or that the adapter does not recognise is told as left behind."""

    event: Inbound | ChoiceAnswer
    hops: int
    files: tuple[FileRef | None, ...] = ()


# A relayed attachment's fields are bounded like the platform's own.
MAX_REF_CHARS = 2000
MAX_RELAYED_FILES = 100


def encode_event(event: Inbound | ChoiceAnswer, hops: int) -> str:
    key = event.key
    common = {
        "key": [key.surface, key.chat, key.thread],
        "user": [event.user.id, event.user.name],
        "event_id": event.event_id,
        "hops": hops,
    }
    if isinstance(event, ChoiceAnswer):
        return json.dumps({"type": "choice", "token": event.token, **common})
    files = [
        [file.name, file.mime, file.size, file.kind, file.ref] if file.ref else None
        for file in event.files
    ]
    return json.dumps({"type": "message", "text": event.text, "files": files, **common})


def _file_ref(raw: object) -> FileRef | None:
    if not isinstance(raw, list) or len(raw) != 5:
        return None
    name, mime, size, kind, ref = raw
    if not all(isinstance(part, str) for part in (name, mime, kind, ref)):
        return None
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        return None
    if not ref or len(ref) > MAX_REF_CHARS or len(name) + len(mime) + len(kind) > MAX_REF_CHARS:
        return None
    return FileRef(name, mime, size, kind, ref)


def decode_event(payload: str) -> RelayedEvent | None:
    """The event `encode_event` wrote; None (with a log line) for anything else: a payload in
    the shared store is checked like any input."""
    try:
        data = json.loads(payload)
        surface, chat, thread = (str(part) for part in data["key"])
        user_id, user_name = (str(part) for part in data["user"])
        key = ConversationKey(surface, chat, thread)
        user = UserRef(user_id, user_name)
        event_id, hops = str(data["event_id"]), int(data["hops"])
        if data["type"] == "choice":
            return RelayedEvent(ChoiceAnswer(key, user, str(data["token"]), event_id), hops)
        if data["type"] == "message":
            inbound = Inbound(key, user, str(data["text"]), event_id)
            raw_files = data["files"]
            if not isinstance(raw_files, list):
                raise TypeError("files is not a list")
            files = tuple(_file_ref(raw) for raw in raw_files[:MAX_RELAYED_FILES])
            return RelayedEvent(inbound, hops, files)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("dropping a relayed event that cannot be read: %r", exc)
        return None
    log.warning("dropping a relayed event of unknown type")
    return None


# ---- sealing a relayed event -------------------------------------------------------------

# A sealed event is taken this long (seconds) either side of its sealing replica's clock: more
# than a dead replica's relay list waits to be adopted (a lease TTL of at most 300 s, then the
# next heartbeat), and room for replicas' clocks to disagree by a minute or two.
RELAY_WINDOW = 900.0
SEAL_VERSION = "sb1"


class RelaySeal:
    """Seals relayed events under the cluster key, and opens only those sealed for a given
    replica, within `RELAY_WINDOW`, each nonce once (remembered while it is in the window)."""

    def __init__(self, key: str, *, clock: Callable[[], float] = time.time) -> None:
        self._key = key.encode()
        self._clock = clock
        self._seen: dict[str, float] = {}  # nonce -> when it was sealed, in insertion order

    def _mac(self, to: str, at: int, nonce: str, payload: str) -> str:
        signed = json.dumps([SEAL_VERSION, to, at, nonce, payload], separators=(",", ":"))
        return hmac.new(self._key, signed.encode(), hashlib.sha256).hexdigest()

    def seal(self, payload: str, to: str) -> str:
        at, nonce = round(self._clock() * 1000), secrets.token_urlsafe(12)
        mac = self._mac(to, at, nonce, payload)
        return json.dumps(
            {"v": SEAL_VERSION, "to": to, "at": at, "n": nonce, "p": payload, "mac": mac}
        )

    def open(self, sealed: str, to: str) -> str:
        """The payload sealed for replica `to`; `RelayRejected` for anything else."""
        try:
            data = json.loads(sealed)
            at, nonce, payload, mac = data["at"], data["n"], data["p"], data["mac"]
            if not (
                data["v"] == SEAL_VERSION and isinstance(at, int) and isinstance(nonce, str)
                and isinstance(payload, str) and isinstance(mac, str)
            ):  # fmt: skip
                raise TypeError("bad fields")
        except (ValueError, KeyError, TypeError) as exc:
            raise RelayRejected("unsigned or malformed") from exc
        if not hmac.compare_digest(mac, self._mac(to, at, nonce, payload)):
            raise RelayRejected("bad signature, or sealed for another replica")
        now = self._clock()
        if abs(now - at / 1000) > RELAY_WINDOW:
            raise RelayRejected("sealed outside the replay window")
        self._forget_before(now - RELAY_WINDOW)
        if nonce in self._seen:
            raise RelayRejected("replayed")
        self._seen[nonce] = at / 1000
        return payload

    def _forget_before(self, cutoff: float) -> None:
        # Insertion order is close to sealing order: stop at the first nonce still in the window.
        while self._seen:
            nonce, at = next(iter(self._seen.items()))
            if at >= cutoff:
                break
            del self._seen[nonce]


class RelayRejected(Exception):
    """A relayed payload that is not a sealed event for this replica (never handled)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"rejected a relayed event: {reason}")


def check_cluster_key(key: str) -> None:
    """A Redis state needs `SWITCHBOARD_CLUSTER_KEY` (its length is checked with the settings)."""
    if len(key) < MIN_CLUSTER_KEY:
        raise ConfigError(
            "SWITCHBOARD_CLUSTER_KEY",
            f"required with a Redis state (SWITCHBOARD_STATE=redis://...): a secret of at least "
            f"{MIN_CLUSTER_KEY} characters that every replica shares; {MAKE_KEY}",
        )
