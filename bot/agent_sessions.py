"""Agent sessions: building agent runtimes from settings, the session source of a one-shot
prompt (`FreshSession`), and a conversation's session (`ConversationSessions`), which is reused
while its agent lives and resumed or restarted when it is gone."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from acp import (
    AGENT_ERRORS,
    AcpClient,
    AcpError,
    AcpRequestTimeout,
    AcpRuntime,
    AcpSession,
    AcpToolGateUnroutable,
    AgentUserUnusable,
    Backend,
    GatePlan,
    Isolation,
    RuntimePool,
    RuntimeSpec,
    SandboxUnavailable,
    SessionNotice,
    ToolGateUnroutable,
    agent_environment,
    get_backend,
    plan_isolation,
    plan_tool_gate,
)
from bot.conversation import Binding
from bot.notices import join_paragraphs
from bot.projects import AgentChoice, Project, ProjectRegistry, build_projects, place_keys
from bot.services import ConversationServices
from bot.session_history import record_use, title_recorder
from config import ConfigError, Settings
from surfaces.base import ConversationKey

log = logging.getLogger(__name__)

NoticeSink = Callable[[SessionNotice], None]


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


class ConversationSessions:
    """The conversation's agent session: reused while its agent lives (also after `release`,
    which keeps it on the agent and drops only our objects), resumed (session/resume, else
    session/load) after a restart or respawn, or after an idle release closed it, when the agent
    can, else started fresh with a visible notice. A session the conversation leaves is closed
    (session/close) when the agent can close sessions."""

    def __init__(
        self,
        services: ConversationServices,
        key: ConversationKey,
        say: Callable[[str], Awaitable[None]],
        listen: NoticeSink | None = None,
    ) -> None:
        self.services = services
        self.key = key
        self._say = say  # how a notice reaches the conversation
        self._listen = listen  # who hears what the agent reports outside replies
        self.current: AcpSession | None = None
        self._target: AgentTarget | None = None  # the project and agent, once known
        # Another replica served the conversation since this one's agents last did: what they
        # hold of its session may be behind, so it is loaded again (bot/cluster.py).
        self.stale = False

    async def target(self) -> AgentTarget:
        """Where this conversation works: the project and agent its binding records, else the
        project its place is bound to, else the default project (its own agent)."""
        if self._target is None:
            binding = await self.services.store.get_binding(self.key)
            self._target = await self._find_target(binding)
        return self._target

    async def _find_target(self, binding: Binding | None) -> AgentTarget:
        services = self.services
        projects = services.plans.projects
        if binding is not None and binding.project:
            project = projects.get(binding.project)
            if project is not None:
                return services.plans.target(project, project.agent_named(binding.agent))
            log.info("%s: project %s is no longer configured", self.key, binding.project)
        for place in place_keys(self.key):
            name = await services.store.get_place(place)
            project = projects.get(name) if name else None
            if project is not None:
                return services.plans.target(project)
        return services.plans.default

    async def switch(self, target: AgentTarget) -> AcpSession:
        """Work in `target` from now on: a new agent session there (the old one is closed on
        its agent when the agent can close sessions, else stays there, unbound)."""
        await self.leave()
        await self.services.store.delete_binding(self.key)
        self._target = target
        return await self.session()

    def _use(self, session: AcpSession) -> AcpSession:
        self.current = session
        session.state.listen(self._listen)
        store = self.services.store
        session.state.on_title = title_recorder(store, session.session_id, self.services.spawn)
        return session

    async def session(self) -> AcpSession:
        services = self.services
        target = await self.target()
        client = await services.client(target, say=self._say)
        if self.current is not None and self.current.client is client:
            return self.current
        key = self.key
        binding = await services.store.get_binding(key)
        notice = ""
        session: AcpSession | None = None
        # `/new` keeps only the project and agent: there is no session to take up or resume
        fresh = binding is None or not binding.session_id
        if self.stale and binding is not None:
            client.released.pop(binding.session_id, None)  # not taken up as it was here
            self.stale = False
        if (
            binding is not None
            and not fresh
            and (reattached := client.reattach(binding.session_id, binding.model))
        ):
            await record_use(services.store, key, reattached, target.project.name)
            return self._use(reattached)  # released while idle: the same session, as it was
        if binding is not None and not fresh:
            session, notice = await self._resume(client, binding)
            if session is None:
                # a failed load may have taken the agent down
                client = await services.client(target, say=self._say)
        if session is None:
            session = await client.open_session()
            model = target.agent.model if binding is None or fresh else binding.model
            if model and model != session.model:
                try:
                    await session.set_model(model)
                except AcpError as exc:
                    log.warning("could not select model %s: %s", model, exc)
                    notice = join_paragraphs(
                        notice,
                        f"The model {model} is not available; using "
                        f"{session.model or 'the agent default'}.",
                    )
            generation = binding.generation + 1 if binding is not None else 0
            await services.store.put_binding(
                key,
                Binding(
                    session.session_id,
                    client.backend.name,
                    str(client.runtime.workspace),
                    session.model,
                    generation,
                    target.project.name,
                    target.agent.name,
                ),
            )
        self._use(session)
        await record_use(services.store, key, session, target.project.name)
        if notice:
            await self._say(notice)
        return session

    def in_use_elsewhere(self, client: AcpClient, session_id: str) -> bool:
        """Another conversation of this process holds the session on `client` right now (open,
        or released while idle and taken up again on its next message): two conversations
        prompting one agent session would interleave."""
        open_here = self.current is not None and self.current.session_id == session_id
        held = session_id in client.sessions or session_id in client.released
        return held and not open_here

    async def resume(self, session_id: str) -> AcpSession | None:
        """Bind the conversation to the agent's stored session `session_id` (session/load, as
        after a restart); None when the agent could not load it, and the conversation keeps
        the session it had."""
        services = self.services
        target = await self.target()
        client = await services.client(target)
        old = await services.store.get_binding(self.key)
        binding = Binding(
            session_id,
            client.backend.name,
            str(client.runtime.workspace),
            "",
            old.generation + 1 if old is not None else 0,
            target.project.name,
            target.agent.name,
        )
        previous = self.current
        session, _ = await self._resume(client, binding)
        if session is None:
            return None
        if previous is not None and previous.session_id != session.session_id:
            self.current = previous
            await self.leave()
        await services.store.put_binding(self.key, binding.with_model(session.model))
        self._use(session)
        await record_use(services.store, self.key, session, target.project.name)
        return session

    async def _resume(self, client: AcpClient, binding: Binding) -> tuple[AcpSession | None, str]:
        lost = "Earlier context of this conversation could not be restored"
        if binding.backend != client.backend.name:
            return None, f"{lost}: the agent changed. Starting a new session."
        if binding.workspace != str(client.runtime.workspace):
            return None, f"{lost}: the workspace changed. Starting a new session."
        if not client.can_resume:
            return None, f"{lost}: the agent cannot resume sessions. Starting a new session."
        try:
            session = await client.resume_session(binding.session_id)
        except AGENT_ERRORS as exc:
            log.warning("could not resume session %s: %s", binding.session_id, exc)
            return None, f"{lost} (the agent could not resume it). Starting a new session."
        log.info("resumed session %s for %s", binding.session_id, self.key)
        return session, await self._restore_model(session, binding.model)

    async def _restore_model(self, session: AcpSession, model: str) -> str:
        """The resumed session's model as it was, if the agent says it offers it: a notice
        when it cannot be, never a new session (the context is worth more than the model)."""
        if not model or model == session.model:
            return ""
        current = session.model or "the agent's default"
        if model not in session.models:
            log.info("not restoring model %s: the resumed session does not offer it", model)
            return f"The model {model} is not offered after resuming; using {current}."
        try:
            await session.set_model(model)
        except AGENT_ERRORS as exc:
            log.warning("could not restore model %s: %s", model, exc)
            return f"The model {model} could not be restored; using {current}."
        return ""

    async def reset(self) -> None:
        """The agent died: drop it so the next turn respawns (and resumes)."""
        self.drop()
        await self.services.discard_client(await self.target())

    def release(self) -> None:
        """The conversation went idle: let go of our session objects. An agent that closes
        and resumes sessions closes it (in the background: the next `session()` resumes it);
        any other keeps it, and the next `session()` takes it up again as it was (the stored
        binding names it either way)."""
        current, self.current = self.current, None
        if current is None:
            return
        client = current.client
        if client.session_capabilities.close and client.can_resume:
            self.services.spawn(client.start_closing(current.session_id))
        else:
            current.release()

    async def leave(self) -> None:
        """The conversation leaves its session (`/new`, `/project`, `/agent`, `/resume`):
        closed on the agent when it advertises session/close, else kept there, unbound."""
        current, self.current = self.current, None
        if current is not None:
            await current.client.close_session(current.session_id)

    def drop(self) -> None:
        """Stop using the session here; the stored binding still lets it be resumed."""
        if self.current is not None:
            self.current.close()
        self.current = None

    async def forget(self) -> None:
        """Never resume this session: the next turn starts a new one, in the same project and
        with the same agent (kept in a binding without a session, so a restart keeps them)."""
        await self.leave()
        store = self.services.store
        binding = await store.get_binding(self.key)
        if binding is None or not binding.project:
            await store.delete_binding(self.key)
            return
        await store.put_binding(self.key, replace(binding, session_id="", model=""))
