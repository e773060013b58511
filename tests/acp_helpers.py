"""Helpers for tests that drive acp/ directly against the scripted fake agent."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import Any

from acp import (
    AcpClient,
    AcpEvent,
    AcpRuntime,
    AcpSession,
    EventKind,
    GatePlan,
    PendingPermission,
    RuntimeSpec,
    get_backend,
    open_runtime,
)
from tests.conftest import FakeAgent


def agent_spec(
    agent: FakeAgent, workspace: Path, *options: str, dialect: str = "kiro", **overrides: Any
) -> RuntimeSpec:
    settings: dict[str, Any] = {
        "request_timeout": 10.0,
        "initialize_timeout": 10.0,
        "shutdown_grace": 0.5,
        **overrides,
    }
    return RuntimeSpec(
        backend=get_backend(dialect),
        argv=tuple(agent.argv(*options, dialect=dialect)),
        workspace=workspace,
        **settings,
    )


async def prepare_client(runtime: AcpRuntime, gate: GatePlan | None = None) -> AcpClient:
    client = AcpClient(runtime, gate=gate or GatePlan(enforced=False), cancel_grace=5.0)
    await client.handshake()
    return client


@asynccontextmanager
async def open_test_client(
    spec: RuntimeSpec, gate: GatePlan | None = None
) -> AsyncIterator[AcpClient]:
    async with open_runtime(spec) as runtime:
        yield await prepare_client(runtime, gate)


PermissionAnswer = Callable[[PendingPermission], "str | Awaitable[str | None] | None"]


async def collect_turn(
    session: AcpSession,
    text: str,
    on_permission: PermissionAnswer | None = None,
    *,
    on_event: Callable[[AcpEvent], Awaitable[None]] | None = None,
) -> list[AcpEvent]:
    """Every event of one turn; permissions answered by `on_permission` (sync or async)."""
    events: list[AcpEvent] = []
    stream = session.prompt(text)
    async with aclosing(stream):  # type: ignore[type-var]
        async for event in stream:
            events.append(event)
            if event.kind is EventKind.PERMISSION:
                assert event.permission is not None and on_permission is not None
                answer = on_permission(event.permission)
                if inspect.isawaitable(answer):
                    answer = await answer
                event.permission.respond(answer)
            elif on_event is not None:
                await on_event(event)
    return events


def texts(events: list[AcpEvent]) -> list[str]:
    return [event.text for event in events if event.kind is EventKind.TEXT]
