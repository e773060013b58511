"""One descriptor per backend: how to start it, which handshake dialect it speaks, how its user
signs in, how its tool calls are routed to us, and the quirks its turns are read with."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from enum import StrEnum

from acp.quirks import ClaudeQuirks, CodexQuirks, GenericQuirks, KiroQuirks, TurnQuirks


class GateRoute(StrEnum):
    """How a backend can be made to ask before every tool call."""

    FLAGS = "flags"  # asks unless its command line trusts tools (kiro)
    MODE = "mode"  # asks only in one known session mode, set after session/new
    ADVERTISED = "advertised"  # the asking mode is chosen from the modes the agent offers


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    label: str
    default_command: tuple[str, ...]
    protocol_version: int | str
    sign_in: str
    gate_route: GateRoute
    quirks: type[TurnQuirks]  # a fresh one per turn (acp/quirks.py)
    gate_mode: str = ""
    trusting_flags: tuple[str, ...] = ()
    kiro_session_meta: bool = False
    # Its gating mode is a sandbox that runs confined commands unasked by design (codex
    # `read-only`): an unasked tool run there is not a gate violation.
    sandboxed_gate: bool = False

    def command(self, override: str = "") -> list[str]:
        """The argv to spawn: the operator's command line if given, else the preset's."""
        if override.strip():
            return shlex.split(override)
        return list(self.default_command)


KIRO = Backend(
    name="kiro",
    label="kiro-cli",
    default_command=("kiro-cli", "acp"),
    protocol_version="2025-08-22",
    sign_in="run `kiro-cli login` on the agent's host (check with `kiro-cli whoami`)",
    gate_route=GateRoute.FLAGS,
    quirks=KiroQuirks,
    trusting_flags=("--trust-all-tools", "--trust-tools"),
    kiro_session_meta=True,
)
CLAUDE = Backend(
    name="claude",
    label="claude-agent-acp",
    default_command=("claude-agent-acp",),
    protocol_version=1,
    sign_in="run `claude /login` on the agent's host, or set ANTHROPIC_API_KEY for the agent",
    gate_route=GateRoute.MODE,
    quirks=ClaudeQuirks,
    gate_mode="default",
)
CODEX = Backend(
    name="codex",
    label="codex-acp",
    default_command=("codex-acp",),
    protocol_version=1,
    sign_in="run `codex login` on the agent's host, or set OPENAI_API_KEY (or CODEX_API_KEY) "
    "for the agent",
    gate_route=GateRoute.MODE,
    quirks=CodexQuirks,
    gate_mode="read-only",
    sandboxed_gate=True,
)
GENERIC = Backend(
    name="generic",
    label="the ACP agent",
    default_command=(),
    protocol_version=1,
    sign_in="sign the agent in as its documentation describes",
    gate_route=GateRoute.ADVERTISED,
    quirks=GenericQuirks,
)

# Every form of the one ACP version Switchboard speaks (v1): the integer, and the date string
# the kiro preset sends for it. An agent answering any of them speaks our version.
ACP_V1_FORMS: tuple[int | str, ...] = (1, "2025-08-22")


def speaks_our_version(version: object) -> bool:
    """Whether an agent's `protocolVersion` is a form of ACP v1 (`True` is not the integer 1)."""
    return any(type(version) is type(form) and version == form for form in ACP_V1_FORMS)


BACKENDS: dict[str, Backend] = {b.name: b for b in (KIRO, CLAUDE, CODEX, GENERIC)}

# Backends whose refusals arrive as structured metadata rather than a bare stop reason.
ACP_BACKENDS_STRUCTURED_REFUSAL = frozenset(
    b.name for b in BACKENDS.values() if b.quirks.structured_refusals
)


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        known = ", ".join(sorted(BACKENDS))
        raise ValueError(f"unknown agent {name!r}; known agents: {known}") from None
