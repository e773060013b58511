"""`switchboard doctor`: how agents are isolated; for every project, is its workspace there and
writable, is each of its agents found, does it start, is it signed in; is the state store
writable; does each configured surface have a plausible token. No platform is contacted."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio

from acp import (
    AGENT_ERRORS,
    AcpAuthRequired,
    AcpClient,
    AcpError,
    AcpRequestTimeout,
    AcpRuntime,
    AcpRuntimeDead,
    AcpRuntimeError,
    AcpSession,
    AcpToolGateUnroutable,
    GatePlan,
    RuntimeSpec,
    describe_cpu_limits,
    open_runtime,
    resolve_executable,
)
from bot.agent_sessions import agent_isolation, agent_plan
from bot.cluster import check_cluster_key
from bot.projects import AgentChoice, Project, build_projects
from bot.store import StoreError, open_store
from bot.store.sqlite_file import refuse_inside_workspaces
from bot.surface_registry import surface_entries, surfaces_nobody_can_use
from config import ConfigError, Settings, valid_text


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    what: str
    detail: str

    def line(self) -> str:
        """One line, whatever the detail quotes (an agent's instruction may span several)."""
        detail = " ".join(self.detail.split())
        return f"{'ok  ' if self.ok else 'FAIL'} {self.what}: {detail}"


async def _project_checks(settings: Settings) -> list[Check]:
    """Every project's workspace (exists, writable) and every agent it may run (found, starts,
    signed in). Without `SWITCHBOARD_PROJECTS` the lines are as they always were."""
    try:
        projects = build_projects(settings)
    except ConfigError as exc:
        return [Check(False, "projects" if settings.projects else "agent", str(exc))]
    checks = []
    for project in projects:
        label = f"project {project.name}: " if settings.projects else ""
        checks.append(_workspace_check(project.workspace, label))
        for agent in project.agents:
            named = f"{label}{agent.name} " if len(project.agents) > 1 else label
            checks += await _agent_checks(settings, project, agent, named)
    return checks


def _workspace_check(workspace: Path, label: str) -> Check:
    try:
        with tempfile.TemporaryFile(dir=workspace, prefix=".switchboard-doctor-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return Check(False, f"{label}workspace", f"{workspace} is not writable ({reason})")
    return Check(True, f"{label}workspace", f"{workspace} is writable")


async def _agent_checks(
    settings: Settings, project: Project, agent: AgentChoice, label: str
) -> list[Check]:
    """Found, starts, tool gate, signed in. A gate that refuses the agent is its own failed
    check; the agent is then still started (ungated, and asked nothing) so that the checks
    after it are told too."""
    refused: list[Check] = []
    try:
        try:
            spec, gate = agent_plan(settings, project, agent)
        except AcpToolGateUnroutable as exc:  # decided from the command line, before a spawn
            refused.append(Check(False, f"{label}tool gate", str(exc)))
            spec, _ = _ungated_plan(settings, project, agent)
            gate = UNGATED
        argv = resolve_executable(spec.argv, spec.env)
    except (ConfigError, *AGENT_ERRORS) as exc:
        return [*refused, Check(False, f"{label}agent", str(exc))]
    checks = [Check(True, f"{label}agent found", argv[0])]
    started = await _session_checks(settings, spec, gate, agent, label)
    if started.gate_refusal is not None:  # refused once the agent said what it offers
        refused.append(Check(False, f"{label}tool gate", str(started.gate_refusal)))
        started = await _session_checks(settings, spec, UNGATED, agent, label)
    if not refused and started.gate_line is not None:
        refused.append(started.gate_line)
    return [*checks, *started.checks[:1], *refused, *started.checks[1:]]


# The plan the checks after a refused gate run with: nothing is prompted, so nothing can run.
UNGATED = GatePlan(enforced=False)


def _ungated_plan(
    settings: Settings, project: Project, agent: AgentChoice
) -> tuple[RuntimeSpec, GatePlan]:
    """The agent's runtime as `agent_plan` builds it, for a gate it refused; the warning that
    allowing ungated tools logs is not this check's to print."""
    quiet = settings.model_copy(update={"allow_ungated_tools": True})
    gate_log = logging.getLogger("acp.tool_gate")  # where acp warns of ungated tools
    level = gate_log.level
    gate_log.setLevel(logging.ERROR)
    try:
        return agent_plan(quiet, project, agent)
    finally:
        gate_log.setLevel(level)


@dataclass(slots=True)
class _Started:
    checks: list[Check]  # "agent starts", then "agent signed in" when it got that far
    gate_line: Check | None = None  # how the gate holds, when the session opened
    gate_refusal: AcpToolGateUnroutable | None = None


async def _session_checks(
    settings: Settings, spec: RuntimeSpec, gate: GatePlan, agent: AgentChoice, label: str
) -> _Started:
    started = _Started([])
    try:
        with anyio.fail_after(settings.initialize_timeout + settings.request_timeout + 10):
            async with open_runtime(spec) as runtime:
                client = AcpClient(runtime, gate=gate)
                await client.handshake()
                by = _answered_by(runtime)
                started.checks.append(
                    Check(True, f"{label}agent starts", f"initialize answered by {by}")
                )
                try:
                    session = await client.open_session(model=agent.model)
                except AcpToolGateUnroutable as exc:
                    started.gate_refusal = exc
                    return started
                if gate is not UNGATED:
                    started.gate_line = Check(True, f"{label}tool gate", _gated(session, gate))
                if runtime.auth_status == "none":
                    raise AcpAuthRequired(client.agent_name, client.sign_in)
                session.close()
                started.checks.append(Check(True, f"{label}agent signed in", "a session opened"))
    except AcpAuthRequired as exc:
        started.checks.append(Check(False, f"{label}agent signed in", str(exc)))
    except TimeoutError:
        started.checks.append(
            Check(False, f"{label}agent starts", "the agent did not answer in time")
        )
    except AGENT_ERRORS as exc:
        started.checks.append(Check(False, f"{label}agent starts", _start_failure(exc)))
    return started


def _gated(session: AcpSession, gate: GatePlan) -> str:
    if not gate.enforced or not session.gated:
        return "off: SWITCHBOARD_ALLOW_UNGATED_TOOLS is set, so tools may run unapproved"
    mode = session.state.mode
    if gate.needs_mode and mode:
        return f"the agent asks before tools (mode {mode})"
    return "the agent asks before tools (its command line)"


def _start_failure(exc: AcpError | AcpRuntimeError) -> str:
    """The runtime's own sentences send people here; doctor says where to look instead."""
    logged = "its last stderr lines are in the log above"
    if isinstance(exc, AcpRuntimeDead):
        status = "" if exc.returncode is None else f" (exit code {exc.returncode})"
        return f"the agent process stopped before it was ready{status}; {logged}"
    if isinstance(exc, AcpRequestTimeout):
        return f"the agent did not answer {exc.method} within {exc.timeout:g} s; {logged}"
    return str(exc)


def _state_location_check(settings: Settings) -> Check | None:
    """A failed check when the state file lies inside a workspace (`run` refuses to start)."""
    try:
        projects = build_projects(settings)
    except ConfigError:
        return None  # a bad project entry is the project checks' to tell
    try:
        refuse_inside_workspaces(settings.state, projects)
    except ConfigError as exc:
        return Check(False, "state store", str(exc))
    return None


async def _store_check(settings: Settings) -> Check:
    refused = _state_location_check(settings)
    if refused is not None:
        return refused
    try:
        store = open_store(settings.state, wait=settings.state_wait)
        try:
            await store.check_writable()
        finally:
            await store.aclose()
    except (StoreError, ConfigError) as exc:
        return Check(False, "state store", str(exc))
    return Check(True, "state store", f"{settings.state} is writable")


def _cluster_key_check(settings: Settings) -> list[Check]:
    """Replicas on Redis sign what they relay to each other: the key must be set (no check with
    SQLite, which needs none)."""
    if not settings.state.startswith(("redis://", "rediss://")):
        return []
    try:
        check_cluster_key(settings.cluster_key)
    except ConfigError as exc:
        return [Check(False, "cluster key", str(exc))]
    return [Check(True, "cluster key", "SWITCHBOARD_CLUSTER_KEY is set")]


def _surface_checks(settings: Settings) -> list[Check]:
    checks = []
    for entry in surface_entries():
        section = entry.section(settings)
        for token in entry.tokens:
            value = getattr(section, token.field)
            if not value:
                continue
            setting = entry.setting(token.field)
            if token.pattern.match(value):
                checks.append(Check(True, f"{token.label} token", f"{setting} looks right"))
            else:
                detail = f"{setting} should look like {token.form}"
                checks.append(Check(False, f"{token.label} token", detail))
    for unusable in surfaces_nobody_can_use(settings):
        detail = f"{unusable.setting} is empty, so nobody can use it; set it to the user ids"
        checks.append(Check(False, f"{unusable.label} access", detail))
    return checks


def _isolation_checks(settings: Settings) -> list[Check]:
    """How agents are isolated (one line, never a failure unless `bwrap` was required and does
    not work, or the agent's user is unknown), and how their terminals are held back."""
    try:
        isolation = agent_isolation(settings)
    except ConfigError as exc:
        return [Check(False, "agent sandbox", str(exc))]
    return [
        Check(True, "agent sandbox", isolation.describe()),
        Check(True, "agent terminals", describe_cpu_limits()),
    ]


async def run_doctor(settings: Settings) -> list[Check]:
    checks = _isolation_checks(settings)
    checks += await _project_checks(settings)
    checks.append(await _store_check(settings))
    checks.extend(_cluster_key_check(settings))
    checks.extend(_surface_checks(settings))
    return checks


def _answered_by(runtime: AcpRuntime) -> str:
    """`<name> <version>` as the agent gave them in `agentInfo`; where it gave none, its
    command's name and "(no version given)", never a placeholder."""
    info = runtime.agent_info
    name, version = info.get("name"), info.get("version")
    if not isinstance(name, str) or not name.strip():
        name = info.get("title") if isinstance(info.get("title"), str) else ""
    if not name or not name.strip():
        argv = runtime.spec.argv
        name = Path(argv[0]).name if argv else runtime.backend.label
    if not isinstance(version, str) or not version.strip():
        version = "(no version given)"
    return valid_text(" ".join(f"{name} {version}".split()))[:120]
