"""What `/metrics` shows, in Prometheus's text format, from a registry of our own (never the
process-global one, so two apps in one process, as in tests, do not share counts).

Labels carry only bounded values: surface names, a turn's outcome, an error's class name, a retry's
kind. Never a user id, a chat id or message text.

Counted where it happens (`Metrics`'s methods, called by the runner, the ladder's hooks and the
app); read when scraped (`LiveState`): queue depth, pending approvals, live agents, the delivery
ledger's backlog, and each surface's platform calls and 429s, which the pacing kit keeps
(`surfaces.pacing.PacingCounts`) so surfaces need no Prometheus of their own.

The backlog is the one value read from the state store, which may be down: a scrape waits for it
at most `SCRAPE_WAIT` seconds (bot/store_reading.py), then serves the last one read, with
`switchboard_state_store_stale` 1 and `switchboard_metrics_stale_seconds` its age."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from surfaces.base import Surface

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Turn outcomes (the `outcome` label): the agent answered; it refused (a refusal card); someone
# stopped it (/stop, the Stop button); an agent error ended it (`error` names its class); a fault
# of ours did; the process stopped mid-turn.
ANSWERED = "answered"
REFUSED = "refused"
STOPPED = "stopped"
AGENT_ERROR = "agent_error"
FAULT = "fault"
SHUTDOWN = "shutdown"

SCRAPE_WAIT = 0.5  # seconds a scrape waits for the state store before it serves the last value

# Seconds: from a fraction of a second (first text) to the default 600 s prompt timeout.
_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


@dataclass(frozen=True, slots=True)
class LiveState:
    """What the app has right now, read at scrape time."""

    queue_depth: int
    pending_approvals: int
    live_agents: int
    ledger_backlog: int  # the last value read from the state store
    store_stale_for: float | None = None  # seconds, when the store did not answer this scrape


class _PlatformCalls(Collector):
    """Each surface's platform calls and 429s, as its pacing kit counted them."""

    def __init__(self) -> None:
        self.surfaces: Sequence[Surface] = ()

    def collect(self) -> Iterable[Metric]:
        calls = CounterMetricFamily(
            "switchboard_platform_calls", "Platform API calls paced by the kit", labels=["surface"]
        )
        limited = CounterMetricFamily(
            "switchboard_platform_rate_limited",
            "Platform 429 answers (each counted once)",
            labels=["surface"],
        )
        for surface in self.surfaces:
            counts = surface.capabilities.pacing.counts
            calls.add_metric([surface.name], counts.calls)
            limited.add_metric([surface.name], counts.rate_limited)
        return iter((calls, limited))

    def describe(self) -> Iterator[Metric]:
        return iter(())  # the surfaces are only known once the app serves


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.turns = Counter(
            "switchboard_turns",
            "Turns ended, by outcome and error class",
            ["outcome", "error"],
            registry=registry,
        )
        self.retries = Counter(
            "switchboard_retries",
            "Turn attempts retried after a transient agent error, by error class",
            ["error"],
            registry=registry,
        )
        self.respawns = Counter(
            "switchboard_respawns",
            "Agents respawned after dying before they answered",
            registry=registry,
        )
        # Replicas (bot/cluster.py): events handed to the replica serving their conversation,
        # conversations another replica took from this one, dead replicas this one adopted.
        self.relayed = Counter(
            "switchboard_events_relayed",
            "Events handed to the replica serving their conversation",
            registry=registry,
        )
        self.leases_lost = Counter(
            "switchboard_leases_lost",
            "Conversations another replica took while this one served them",
            registry=registry,
        )
        self.replicas_adopted = Counter(
            "switchboard_replicas_adopted",
            "Stopped replicas whose relayed events this replica took",
            registry=registry,
        )
        self.relays_rejected = Counter(
            "switchboard_relays_rejected",
            "Relayed events refused: unsigned, badly signed, for another replica, old or replayed",
            registry=registry,
        )
        self.first_text = Histogram(
            "switchboard_first_text_seconds",
            "From a turn's start to the first text of the agent's reply",
            buckets=_BUCKETS,
            registry=registry,
        )
        self.turn_duration = Histogram(
            "switchboard_turn_seconds",
            "From a turn's start to its final text",
            buckets=_BUCKETS,
            registry=registry,
        )
        self._queue = Gauge(
            "switchboard_queue_depth", "Messages waiting behind a running turn", registry=registry
        )
        self._approvals = Gauge(
            "switchboard_pending_approvals",
            "Tool approvals waiting for an answer",
            registry=registry,
        )
        self._agents = Gauge(
            "switchboard_live_agents", "Agent processes running or starting", registry=registry
        )
        self._backlog = Gauge(
            "switchboard_ledger_backlog",
            "Final replies not yet confirmed delivered",
            registry=registry,
        )
        self._stale = Gauge(
            "switchboard_state_store_stale",
            "1 when the state store did not answer this scrape in time: its values are old",
            registry=registry,
        )
        self._stale_seconds = Gauge(
            "switchboard_metrics_stale_seconds",
            "Age of the values read from the state store (0 when read for this scrape)",
            registry=registry,
        )
        self._platform = _PlatformCalls()
        registry.register(self._platform)

    def watch_surfaces(self, surfaces: Sequence[Surface]) -> None:
        self._platform.surfaces = tuple(surfaces)

    def turn_ended(
        self, outcome: str, seconds: float, error: type[BaseException] | None = None
    ) -> None:
        self.turns.labels(outcome, error.__name__ if error is not None else "").inc()
        self.turn_duration.observe(max(seconds, 0.0))

    def retried(self, error: BaseException) -> None:
        self.retries.labels(type(error).__name__).inc()

    def render(self, live: LiveState) -> bytes:
        self._queue.set(live.queue_depth)
        self._approvals.set(live.pending_approvals)
        self._agents.set(live.live_agents)
        self._backlog.set(live.ledger_backlog)
        stale = live.store_stale_for
        self._stale.set(0 if stale is None else 1)
        self._stale_seconds.set(stale or 0.0)
        return generate_latest(self.registry)
