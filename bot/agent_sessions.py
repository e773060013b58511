"""Agent sessions: the session source of a one-shot prompt (`FreshSession`), and a
conversation's session (`ConversationSessions`), which is reused while its agent lives and resumed
or restarted when it is gone. How agents are planned and started is bot/agent_plans.py."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from acp import (
    AGENT_ERRORS,
    AcpClient,
    AcpError,
    AcpRequestTimeout,
    AcpSession,
    RuntimePool,
    RuntimeSpec,
    SessionNotice,
)
from bot.agent_plans import AgentTarget
from bot.conversation import Binding
from bot.notices import join_paragraphs
from bot.projects import place_keys
from bot.services import ConversationServices
from bot.session_history import record_use, title_recorder
from surfaces.base import ConversationKey

log = logging.getLogger(__name__)

NoticeSink = Callable[[SessionNotice], None]


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
