"""Building agent runtimes from settings, and a session source for one-shot prompts."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from acp import (
    AcpClient,
    AcpRequestTimeout,
    AcpRuntime,
    AcpSession,
    AcpToolGateUnroutable,
    Backend,
    GatePlan,
    RuntimePool,
    RuntimeSpec,
    ToolGateUnroutable,
    agent_environment,
    get_backend,
    plan_tool_gate,
)
from config import ConfigError, Settings

log = logging.getLogger(__name__)


def agent_plan(settings: Settings) -> tuple[RuntimeSpec, GatePlan]:
    """The runtime to spawn and the tool-gate plan, decided before anything is spawned."""
    backend: Backend = get_backend(settings.agent)
    argv = backend.command(settings.agent_command)
    if not argv:
        raise ConfigError(
            "SWITCHBOARD_AGENT_COMMAND",
            f"the {backend.name} agent has no default command; set the command line to start it",
        )
    workspace = Path(settings.workspace).expanduser()
    if not workspace.exists():
        raise ConfigError("SWITCHBOARD_WORKSPACE", f"{workspace} does not exist")
    if not workspace.is_dir():
        raise ConfigError("SWITCHBOARD_WORKSPACE", f"{workspace} is not a directory")
    try:
        gate = plan_tool_gate(backend, argv, allow_ungated=settings.allow_ungated_tools)
    except ToolGateUnroutable as exc:
        raise AcpToolGateUnroutable(exc) from exc
    spec = RuntimeSpec(
        backend=backend,
        argv=tuple(argv),
        workspace=workspace.resolve(),
        env=agent_environment(),
        request_timeout=settings.request_timeout,
        initialize_timeout=settings.initialize_timeout,
        shutdown_grace=settings.shutdown_grace,
    )
    return spec, gate


def client_preparer(
    gate: GatePlan, settings: Settings
) -> Callable[[AcpRuntime], Awaitable[AcpClient]]:
    async def prepare(runtime: AcpRuntime) -> AcpClient:
        client = AcpClient(runtime, gate=gate, cancel_grace=settings.cancel_grace)
        await client.handshake()
        return client

    return prepare


class FreshSession:
    """One new session on a pooled agent; a reset drops the agent so the next turn respawns."""

    def __init__(self, pool: RuntimePool[AcpClient], spec: RuntimeSpec, model: str) -> None:
        self._pool = pool
        self._spec = spec
        self._model = model
        self._session: AcpSession | None = None

    async def session(self) -> AcpSession:
        try:
            client = await self._pool.get(self._spec)
        except AcpRequestTimeout as exc:
            if exc.method != "initialize":
                raise
            log.warning("agent did not answer initialize; retrying once with a fresh process")
            await self._pool.discard(self._spec)
            client = await self._pool.get(self._spec)
        if self._session is None or self._session.client is not client:
            self._session = await client.open_session(model=self._model)
        return self._session

    async def reset(self) -> None:
        self._session = None
        await self._pool.discard(self._spec)
