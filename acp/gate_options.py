"""What an agent's own switches say about the gate, besides its modes: config options that turn
asking off (GitHub Copilot CLI's `allow_all`, category `permissions`, `off` = asks) and commands
that would do the same (`/allow-all on`, `/yolo`).

An option is part of the gate when its category is `permissions`, or when its id or name says it
lets tools run unasked (allow all, auto-approve, yolo, trust, bypass, ...; see `enables_unasked`).
Its asking value is, in order:

1. for an option whose id or name says it lets tools run unasked: its "off" value (`false` for a
   boolean; a choice named off, false, no, disabled, none);
2. for a boolean whose id or name asks (ask, confirm, approval, ...): `true`;
3. for a select option of category `permissions`: the choice that asks, by the rule the modes
   follow (`acp.tool_gate.asking_mode`).

An option of category `permissions` with no asking value found makes the agent unroutable: the
safe way to be wrong (`SWITCHBOARD_ALLOW_UNGATED_TOOLS` is the operator's way out); one that only
sounds like the gate by its name is logged and left alone."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from acp.tool_gate import AdvertisedMode, _words, asking_mode
from acp.types import ConfigOption

log = logging.getLogger(__name__)

PERMISSIONS_CATEGORY = "permissions"
BOOLEAN = "boolean"

# Words (and pairs of words) that say a switch lets tools run unasked: the gate's ungated words
# as they appear in option ids and command names (`allow_all`, `/allow-all`, `autoApprove`).
_UNASKED_WORDS = frozenset(
    {
        "yolo",
        "autopilot",
        "bypass",
        "bypasses",
        "unrestricted",
        "dangerous",
        "dangerously",
        "trust",
        "trusted",
        "autoapprove",
        "autoedit",
        "allowall",
        "trustall",
    }
)
_UNASKED_PAIRS = frozenset(
    {
        ("allow", "all"),
        ("trust", "all"),
        ("auto", "approve"),
        ("auto", "approval"),
        ("auto", "accept"),
        ("auto", "edit"),
        ("auto", "edits"),
        ("accept", "edits"),
        ("approve", "all"),
        ("accept", "all"),
        ("full", "access"),
        ("skip", "permissions"),
        ("skip", "approval"),
        ("no", "confirm"),
    }
)
# What a command that manages approvals is called (Claude's /permissions, Qwen's
# /approval-mode): with an ungated word among its arguments it would switch asking off.
_APPROVAL_WORDS = frozenset({"permission", "permissions", "approval", "approvals", "approve"})
_ASKING_WORDS = frozenset({"ask", "asks", "confirm", "confirmation", "approval", "approve"})
_OFF_VALUES = ("off", "false", "no", "disabled", "disable", "none")


def enables_unasked(text: str) -> bool:
    """Whether `text` (an id, a name, a description) says its switch lets tools run unasked."""
    words = _words(text)
    if _UNASKED_WORDS.intersection(words):
        return True
    return any(pair in _UNASKED_PAIRS for pair in pairwise(words))


def switches_approvals_off(name: str, description: str = "", args: str = "") -> bool:
    """Whether an agent's own command would switch its approvals off: its name or description
    says so, it manages permissions, or it manages approvals with an ungated word in `args`
    (`/approval-mode yolo`)."""
    if enables_unasked(f"{name} {description}"):
        return True
    named = set(_words(name))
    if {"permission", "permissions"} & named:
        return True
    return bool(_APPROVAL_WORDS & named) and enables_unasked(args)


@dataclass(frozen=True, slots=True)
class GateOption:
    """A config option that is part of the gate, and the value at which the agent asks."""

    option_id: str
    value: str
    boolean: bool = False

    @property
    def label(self) -> str:
        """As a person says it: "allow_all off"."""
        return f"{self.option_id} {self.value}"


def _off_choice(option: ConfigOption) -> str:
    for choice in option.choices:
        if choice.value.lower() in _OFF_VALUES or choice.name.lower() in _OFF_VALUES:
            return choice.value
    return ""


def asking_value(option: ConfigOption) -> str:
    """The value of `option` at which the agent asks before tools ("" when none is known)."""
    said = f"{option.option_id} {option.name}"
    if option.kind == BOOLEAN:
        if enables_unasked(said):
            return "false"
        return "true" if _ASKING_WORDS.intersection(_words(said)) else ""
    if enables_unasked(said):
        return _off_choice(option)
    choices = [AdvertisedMode(c.value, c.name) for c in option.choices]
    chosen = asking_mode(choices)
    return chosen.id if chosen is not None else ""


def is_gate_option(option: ConfigOption) -> bool:
    """Whether `option` decides if tools ask (see the module docstring)."""
    if option.category == PERMISSIONS_CATEGORY:
        return True
    if option.category in ("mode", "model"):
        return False
    return enables_unasked(f"{option.option_id} {option.name}")


def gate_options(options: Iterable[ConfigOption]) -> tuple[list[GateOption], list[ConfigOption]]:
    """The options that are part of the gate with their asking values, and those of category
    `permissions` whose asking value is unknown (they make the agent unroutable)."""
    found: list[GateOption] = []
    unknown: list[ConfigOption] = []
    for option in options:
        if not is_gate_option(option):
            continue
        value = asking_value(option)
        if value:
            found.append(GateOption(option.option_id, value, option.kind == BOOLEAN))
        elif option.category == PERMISSIONS_CATEGORY:
            unknown.append(option)
        else:  # only its name hints at the gate: not enough to refuse the agent for
            log.warning(
                "option %r sounds like a tool gate but no value of it asks", option.option_id
            )
    return found, unknown


def wire_value(option: GateOption) -> str | bool:
    """The value as `session/set_config_option` takes it (a boolean option takes a boolean)."""
    return option.value == "true" if option.boolean else option.value


def described(options: Sequence[ConfigOption]) -> str:
    return ", ".join(repr(option.option_id) for option in options)
