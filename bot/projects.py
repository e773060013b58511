"""Projects: named (workspace, agent) pairs a conversation works in.

`build_projects(settings)` reads `SWITCHBOARD_PROJECTS` (and `SWITCHBOARD_AGENTS`,
`SWITCHBOARD_DEFAULT_PROJECT`) into a `ProjectRegistry`, checked at start-up: every error names
the entry it is about (`SWITCHBOARD_PROJECTS["web"].workspace: /srv/web does not exist`).
Without `SWITCHBOARD_PROJECTS`, today's single workspace and agent (`SWITCHBOARD_WORKSPACE`,
`AGENT`, `AGENT_COMMAND`, `AGENT_MODE`, `MODEL`) form the one project `default`, so a deployment
that never heard of projects behaves as before.

A project's agent is a preset (`kiro`, `claude`, `codex`, `generic`) or a `SWITCHBOARD_AGENTS`
name (which wins over a preset of the same name); its `agents` list names the other agents
`/agent NAME` may switch to. `users` ("surface:id") limits who may use it; admins of a surface
may use every project. Its `approvals` ("ask", the default; "reads"; "trusted") is how many of
the agent's permission requests Switchboard answers without a card (bot/trust.py): an operator's
setting, as everything here is, so only whoever sets Switchboard's configuration can trust a
project.

Where a conversation lands (`place_keys`): a place is a conversation key's (surface, chat,
thread) — a Telegram forum topic, a Slack thread, a Discord thread or channel — or its
(surface, chat) — a Telegram group, a Slack channel —; the most specific bound place wins."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.access import AccessPolicy, Role
from bot.trust import APPROVAL_POLICIES, ASK
from config import ConfigError, Settings
from surfaces.base import ConversationKey

__all__ = [
    "DEFAULT_PROJECT",
    "AgentChoice",
    "Project",
    "ProjectRegistry",
    "build_projects",
    "place_keys",
]

DEFAULT_PROJECT = "default"  # the project today's single-workspace settings form
PRESETS = ("kiro", "claude", "codex", "generic")
_USER = re.compile(r"[a-z][a-z0-9_-]*:\S+")


@dataclass(frozen=True, slots=True)
class AgentChoice:
    """One agent a project may run: its name as `/agent` spells it, the preset it is, and the
    command, mode and model to use (empty: the preset's). `origin` is the setting an error about
    its command should name."""

    name: str
    preset: str
    command: str = ""
    mode: str = ""
    model: str = ""
    origin: str = "SWITCHBOARD_AGENT_COMMAND"


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    workspace: Path
    agents: tuple[AgentChoice, ...]  # the project's own agent first, then those it allows
    users: frozenset[str] = frozenset()  # "surface:id"; empty: everyone who may chat
    origin: str = "SWITCHBOARD_WORKSPACE"  # the setting an error about the workspace names
    approvals: str = ASK  # the trust ladder's policy: "ask" | "reads" | "trusted"

    @property
    def agent(self) -> AgentChoice:
        return self.agents[0]

    def agent_named(self, name: str) -> AgentChoice | None:
        wanted = name.casefold()
        return next((a for a in self.agents if a.name.casefold() == wanted), None)

    def may_use(self, access: AccessPolicy, surface: str, user_id: str) -> bool:
        if not self.users or access.role(surface, user_id) >= Role.ADMIN:
            return True
        return f"{surface}:{user_id}" in self.users


class ProjectRegistry:
    """The projects in the order they were configured, found by name whatever its case."""

    def __init__(self, projects: Sequence[Project], default: str) -> None:
        self._projects = {project.name.casefold(): project for project in projects}
        self.default = self._projects[default.casefold()]

    def __iter__(self) -> Iterator[Project]:
        return iter(self._projects.values())

    def __len__(self) -> int:
        return len(self._projects)

    def get(self, name: str) -> Project | None:
        return self._projects.get(name.casefold())

    def usable(self, access: AccessPolicy, surface: str, user_id: str) -> list[Project]:
        """The projects this person may use (never show them the others)."""
        return [p for p in self if p.may_use(access, surface, user_id)]


def place_keys(key: ConversationKey) -> tuple[ConversationKey, ...]:
    """The places a conversation is in, most specific first: its thread or topic, then its
    chat (a thread's group or channel)."""
    if key.thread:
        return (key, ConversationKey(key.surface, key.chat))
    return (key,)


def build_projects(settings: Settings) -> ProjectRegistry:
    """The registry from settings; ConfigError naming the first bad entry."""
    if not settings.projects:
        if settings.default_project and settings.default_project.casefold() != DEFAULT_PROJECT:
            raise ConfigError(
                "SWITCHBOARD_DEFAULT_PROJECT",
                f"no project is named {settings.default_project!r}; without "
                f"SWITCHBOARD_PROJECTS the only project is {DEFAULT_PROJECT!r}",
            )
        legacy = AgentChoice(
            settings.agent, settings.agent, settings.agent_command, settings.agent_mode,
            settings.model,
        )  # fmt: skip
        workspace = _workspace(Path(settings.workspace), "SWITCHBOARD_WORKSPACE")
        return ProjectRegistry([Project(DEFAULT_PROJECT, workspace, (legacy,))], DEFAULT_PROJECT)
    projects = [_project(name, settings) for name, _ in settings.projects.items()]
    default = settings.default_project or projects[0].name
    if not any(p.name.casefold() == default.casefold() for p in projects):
        names = ", ".join(p.name for p in projects)
        raise ConfigError(
            "SWITCHBOARD_DEFAULT_PROJECT", f"no project is named {default!r}; projects: {names}"
        )
    return ProjectRegistry(projects, default)


def _project(name: str, settings: Settings) -> Project:
    entry = settings.projects[name]
    origin = f'SWITCHBOARD_PROJECTS["{name}"]'
    workspace = _workspace(entry.workspace, f"{origin}.workspace")
    for user in entry.users:
        if not _USER.fullmatch(user):
            raise ConfigError(
                f"{origin}.users", f"{user!r} is not in surface:id form (e.g. telegram:1001)"
            )
    if entry.agent:
        own = _named_agent(entry.agent, settings, f"{origin}.agent")
    else:  # the agent of SWITCHBOARD_AGENT, as for a deployment without projects
        own = AgentChoice(
            settings.agent, settings.agent, settings.agent_command, settings.agent_mode,
            settings.model,
        )  # fmt: skip
    own = AgentChoice(
        own.name,
        own.preset,
        entry.agent_command or own.command,
        entry.mode or own.mode,
        entry.model or own.model,
        f"{origin}.agent_command",
    )
    others = [_named_agent(other, settings, f"{origin}.agents") for other in entry.agents]
    agents = [own] + [a for a in others if a.name.casefold() != own.name.casefold()]
    approvals = entry.approvals.strip().casefold()
    if approvals not in APPROVAL_POLICIES:
        raise ConfigError(
            f"{origin}.approvals",
            f"{entry.approvals!r} is not an approvals policy; choose from "
            + ", ".join(APPROVAL_POLICIES),
        )
    users = frozenset(entry.users)
    return Project(name, workspace, tuple(agents), users, f"{origin}.workspace", approvals)


def _named_agent(name: str, settings: Settings, setting: str) -> AgentChoice:
    named = next((n for n in settings.agents if n.casefold() == name.casefold()), None)
    if named is not None:
        agent = settings.agents[named]
        return AgentChoice(
            named, agent.agent, agent.agent_command, agent.mode, agent.model,
            f'SWITCHBOARD_AGENTS["{named}"].agent_command',
        )  # fmt: skip
    if name.casefold() in PRESETS:
        return AgentChoice(name.casefold(), name.casefold(), origin=setting)
    known = ", ".join([*PRESETS, *settings.agents])
    raise ConfigError(setting, f"unknown agent {name!r}; choose from {known}")


def _workspace(path: Path, setting: str) -> Path:
    workspace = path.expanduser()
    if not workspace.exists():
        raise ConfigError(setting, f"{workspace} does not exist")
    if not workspace.is_dir():
        raise ConfigError(setting, f"{workspace} is not a directory")
    return workspace.resolve()
