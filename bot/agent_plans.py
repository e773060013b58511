"""How agents run and what each conversation talks to: the sandbox and home of every agent
(`agent_isolation`), the runtime and tool-gate plan of a project's agent (`agent_plan`), every
(project, agent) pair planned once at start-up (`AgentPlans`, `AgentTarget`), and how a pooled
runtime becomes a handshaken client (`client_preparer`)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from acp import (
    AcpClient,
    AcpRuntime,
    AcpToolGateUnroutable,
    AgentUserUnusable,
    Backend,
    GatePlan,
    Isolation,
    RuntimeSpec,
    SandboxUnavailable,
    ToolGateUnroutable,
    agent_environment,
    get_backend,
    plan_isolation,
    plan_tool_gate,
)
from bot.projects import AgentChoice, Project, ProjectRegistry, build_projects
from config import ConfigError, Settings


@dataclass(frozen=True, slots=True)
class AgentTarget:
    """What a conversation talks to: a project's agent, as the runtime to spawn (one per
    workspace and agent) and its tool-gate plan."""

    project: Project
    agent: AgentChoice
    spec: RuntimeSpec
    gate: GatePlan


def agent_isolation(settings: Settings) -> Isolation:
    """How agents run here (`SWITCHBOARD_AGENT_SANDBOX`, `_HOME`, `_USER`), bubblewrap probed
    once per process; what Switchboard keeps (its state, its config file) is never shown."""
    hidden: list[Path] = []
    if "://" in settings.state:  # a Redis store: nothing of it is a file here
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        state_dir = Path(base) / "switchboard"
    else:
        state = Path(settings.state).absolute()
        state_dir = state.parent
        hidden += [state_dir, *(Path(f"{state}{end}") for end in ("", "-wal", "-shm", "-journal"))]
    config_file = os.environ.get("SWITCHBOARD_CONFIG", "")
    if config_file:
        hidden.append(Path(config_file))
    home = settings.agent_home or state_dir / "agent-home"
    try:
        return plan_isolation(
            settings.agent_sandbox,
            home=home.absolute(),
            home_chosen=settings.agent_home is not None,
            hidden=hidden,
            user=settings.agent_user,
        )
    except SandboxUnavailable as exc:
        raise ConfigError("SWITCHBOARD_AGENT_SANDBOX", f"is bwrap, but {exc}") from exc
    except AgentUserUnusable as exc:
        raise ConfigError("SWITCHBOARD_AGENT_USER", str(exc)) from exc
    except OSError as exc:
        problem = f"{home} could not be made the agent's home ({exc.strerror or exc})"
        raise ConfigError("SWITCHBOARD_AGENT_HOME", problem) from exc


def agent_plan(
    settings: Settings, project: Project | None = None, agent: AgentChoice | None = None
) -> tuple[RuntimeSpec, GatePlan]:
    """The runtime to spawn and the tool-gate plan, decided before anything is spawned: for
    `project`'s `agent` (by default its own), or the default project's."""
    if project is None:
        project = build_projects(settings).default
    agent = agent or project.agent
    backend: Backend = get_backend(agent.preset)
    argv = backend.command(agent.command)
    if not argv:
        raise ConfigError(
            agent.origin,
            f"the {backend.name} agent has no default command; set the command line to start it",
        )
    try:
        gate = plan_tool_gate(
            backend, argv, allow_ungated=settings.allow_ungated_tools, mode=agent.mode
        )
    except ToolGateUnroutable as exc:
        raise AcpToolGateUnroutable(exc) from exc
    isolation = agent_isolation(settings)
    env = agent_environment(
        preset=backend.name,
        listed=settings.agent_env,
        home=isolation.home,
        user=isolation.user.name if isolation.user is not None else "",
    )
    spec = RuntimeSpec(
        backend=backend,
        argv=tuple(argv),
        workspace=project.workspace,
        env=env,
        isolation=isolation,
        request_timeout=settings.request_timeout,
        initialize_timeout=settings.initialize_timeout,
        shutdown_grace=settings.shutdown_grace,
    )
    return spec, gate


class AgentPlans:
    """Every (project, agent) pair's plan, made once; `check_all` makes them all at start-up,
    so a bad agent entry stops the start rather than a conversation."""

    def __init__(self, settings: Settings, projects: ProjectRegistry) -> None:
        self.settings = settings
        self.projects = projects
        self._targets: dict[tuple[str, str], AgentTarget] = {}
        self._gates: dict[tuple[str, tuple[str, ...], Path], GatePlan] = {}

    def target(self, project: Project, agent: AgentChoice | None = None) -> AgentTarget:
        agent = agent or project.agent
        found = self._targets.get((project.name, agent.name))
        if found is None:
            spec, gate = agent_plan(self.settings, project, agent)
            found = self._targets[(project.name, agent.name)] = AgentTarget(
                project, agent, spec, gate
            )
            self._gates[_spec_key(spec)] = gate
        return found

    @property
    def default(self) -> AgentTarget:
        return self.target(self.projects.default)

    def check_all(self) -> None:
        for project in self.projects:
            for agent in project.agents:
                self.target(project, agent)

    def gate_for(self, spec: RuntimeSpec) -> GatePlan:
        return self._gates[_spec_key(spec)]


def _spec_key(spec: RuntimeSpec) -> tuple[str, tuple[str, ...], Path]:
    return (spec.backend.name, spec.argv, spec.workspace)  # a spec's env makes it unhashable


def client_preparer(
    gate: GatePlan | Callable[[RuntimeSpec], GatePlan], settings: Settings
) -> Callable[[AcpRuntime], Awaitable[AcpClient]]:
    """How a pooled runtime becomes a client: handshaken, with its agent's tool gate (one plan,
    or one per spec)."""

    async def prepare(runtime: AcpRuntime) -> AcpClient:
        plan = gate(runtime.spec) if callable(gate) else gate
        client = AcpClient(runtime, gate=plan, cancel_grace=settings.cancel_grace)
        await client.handshake()
        return client

    return prepare
