"""The trust ladder: which permission requests Switchboard answers without a card.

Three rungs, each only removing a card (the agent still asks, Switchboard answers; acp's gate
counts such an answer as it counts a press, for that one call):
- a project's `approvals` policy (`SWITCHBOARD_PROJECTS`, the operator's setting): `ask` (every
  request is a card), `reads` (`read` and `search` calls are allowed), `trusted` (every request
  is allowed with its allow option);
- the conversation session's rules: a person's `allow_always` answer to the agent's card, or a
  press of **Trust this tool for this session** (answered to the agent as its allow_once).

A rule is the tool's shape as the card showed it: its kind (one the ACP spec names, never a
missing or unknown one) and its command line or the files it touches. A later call matches
when it has the same kind and the same sort of shape, and
- its command is the rule's, or the rule's followed by more words that chain nothing (no
  `;`, `&`, `|`, redirection or substitution: `npm test --watch` extends `npm test`,
  `npm test && rm -rf ~` does not);
- its files are among the rule's files (the files themselves, never their directory).
Nothing else matches: a title alone never does. Switchboard's own card for a command or write the
agent did not ask about is never answered by the ladder (bot/permissions.py): trust is for what
the agent asks.

Rules live in memory per conversation and belong to the agent session they were made in: a
request from another session (after /new, /resume, a project or agent switch) finds them gone.
A failover to another replica loses them, which only brings the cards back."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acp import (
    PERMISSION_ALLOW_ALWAYS,
    PERMISSION_ALLOW_ONCE,
    SPEC_TOOL_KINDS,
    PermissionOption,
    PermissionRequest,
    ToolCall,
)
from surfaces.base import ConversationKey, UserRef
from surfaces.bounded import BoundedMap

ASK, READS, TRUSTED = "ask", "reads", "trusted"
APPROVAL_POLICIES = (ASK, READS, TRUSTED)
READ_KINDS = frozenset({"read", "search"})
TRUST_LABEL = "Trust this tool for this session"
_COMMAND_KEYS = ("command", "cmd", "commandLine", "script")
_PATH_KEYS = ("path", "file_path", "filePath", "abs_path", "absolute_path", "target", "destination")
# What may not follow a trusted command: anything that chains, redirects or substitutes.
_CHAINS = re.compile(r"[;&|<>`$(){}\n\\]")
_SHOWN_MAX = 120


def _words(text: str) -> str:
    return " ".join(text.split())


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return [" ".join(value)]
    return []


@dataclass(frozen=True, slots=True)
class ToolShape:
    """What a rule is made of and matched on: the kind, the command line ("" when none), the
    files (normalised as given)."""

    kind: str
    command: str
    paths: frozenset[str]

    @classmethod
    def of(cls, tool: ToolCall) -> ToolShape | None:
        """The call's shape; None when it has no named kind or shows neither a command nor a
        file (such a call is never trusted: a card always asks)."""
        if not tool.kind or tool.kind not in SPEC_TOOL_KINDS:
            return None
        raw = tool.raw_input if isinstance(tool.raw_input, dict) else {}
        commands = [_words(c) for key in _COMMAND_KEYS for c in _strings(raw.get(key))]
        command = next((c for c in commands if c), "")
        paths = list(tool.locations) + [diff.path for diff in tool.diffs]
        paths += [p for key in _PATH_KEYS for p in _strings(raw.get(key))]
        normal = frozenset(os.path.normpath(p) for p in paths if p.strip())
        if not command and not normal:
            return None
        return cls(tool.kind, command, normal)

    def within(self, rule: ToolShape) -> bool:
        if self.kind != rule.kind or bool(self.command) != bool(rule.command):
            return False
        if bool(self.paths) != bool(rule.paths) or not self.paths <= rule.paths:
            return False
        if not rule.command or self.command == rule.command:
            return True
        rest = self.command[len(rule.command) :]
        return self.command.startswith(rule.command + " ") and not _CHAINS.search(rest)

    def describe(self) -> str:
        """The rule as a person reads it: "`npm test …` commands", "edit of `notes.txt`"."""
        if self.command:
            shown = _clip(self.command)
            return f"`{shown} …` commands" if self.kind == "execute" else f"{self.kind} `{shown} …`"
        files = ", ".join(f"`{_clip(path)}`" for path in sorted(self.paths)[:3])
        more = f" and {len(self.paths) - 3} more" if len(self.paths) > 3 else ""
        return f"{self.kind} of {files}{more}"


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 1] + "…"


@dataclass(frozen=True, slots=True)
class TrustRule:
    number: int
    shape: ToolShape
    answer_kind: str  # the option kind a covered request is answered with
    by: UserRef
    at: float  # epoch seconds

    def describe(self) -> str:
        return self.shape.describe()

    @property
    def source(self) -> str:
        return "allowed always" if self.answer_kind == PERMISSION_ALLOW_ALWAYS else "trusted"


@dataclass(slots=True)
class _Book:
    session_id: str
    rules: list[TrustRule] = field(default_factory=list)
    numbered: int = 0


@dataclass(frozen=True, slots=True)
class Automatic:
    """A request answered without a card: the option sent, and who answered (for the audit
    and the live status): a rule, or the project's policy."""

    option: PermissionOption
    answerer: str
    rule: TrustRule | None = None

    @property
    def reason(self) -> str:
        """The rule as the audit keeps it."""
        if self.rule is None:
            return self.answerer
        return f"trust rule {self.rule.number} ({self.rule.source}): {self.rule.describe()}"


class TrustBook:
    """Every conversation's rules (for its current agent session) and the approvals policy of
    the project its turn runs in."""

    def __init__(self, limit: int = 5000, clock: Callable[[], float] = time.time) -> None:
        self._books: BoundedMap[ConversationKey, _Book] = BoundedMap(limit)
        self._policies: BoundedMap[ConversationKey, str] = BoundedMap(limit)
        self.clock = clock

    # ---- the project's policy ----------------------------------------------------------------
    def set_policy(self, key: ConversationKey, policy: str) -> None:
        """The policy of the project the conversation's turn runs in (set as the turn starts)."""
        self._policies.remember(key, policy)

    def policy(self, key: ConversationKey) -> str:
        return self._policies.get(key, ASK)

    # ---- rules ---------------------------------------------------------------------------------
    def _book(self, key: ConversationKey, session_id: str) -> _Book | None:
        book = self._books.get(key)
        if book is None or not session_id or book.session_id != session_id:
            return None
        return book

    def rules(self, key: ConversationKey, session_id: str) -> list[TrustRule]:
        book = self._book(key, session_id)
        return list(book.rules) if book is not None else []

    def add(
        self,
        key: ConversationKey,
        session_id: str,
        tool: ToolCall,
        answer_kind: str,
        by: UserRef,
    ) -> TrustRule | None:
        """A rule for `tool`'s shape (None: the tool has no shape a rule can hold). A session
        other than the book's starts a new book: the old session's rules are gone."""
        shape = ToolShape.of(tool)
        if shape is None or not session_id:
            return None
        book = self._book(key, session_id)
        if book is None:
            book = _Book(session_id)
        self._books.remember(key, book)
        same = next((r for r in book.rules if r.shape == shape), None)
        if same is not None:
            return same
        book.numbered += 1
        rule = TrustRule(book.numbered, shape, answer_kind, by, self.clock())
        book.rules.append(rule)
        return rule

    def remove(self, key: ConversationKey, session_id: str, numbers: set[int]) -> list[TrustRule]:
        book = self._book(key, session_id)
        if book is None:
            return []
        gone = [rule for rule in book.rules if rule.number in numbers]
        book.rules = [rule for rule in book.rules if rule.number not in numbers]
        return gone

    def drop(self, key: ConversationKey) -> None:
        self._books.pop(key, None)

    # ---- answering -----------------------------------------------------------------------------
    def automatic(self, key: ConversationKey, request: PermissionRequest) -> Automatic | None:
        """How Switchboard answers `request` without a card, if it does."""
        tool = request.tool
        allow = request.option_of_kind(PERMISSION_ALLOW_ONCE, PERMISSION_ALLOW_ALWAYS)
        if allow is None:
            return None
        policy = self.policy(key)
        if policy == TRUSTED:
            return Automatic(allow, "project policy: trusted")
        if policy == READS and tool.kind in READ_KINDS:
            return Automatic(allow, "project policy: reads")
        shape = ToolShape.of(tool)
        book = self._book(key, request.session_id)
        if shape is None or book is None:
            return None
        rule = next((r for r in book.rules if shape.within(r.shape)), None)
        if rule is None:
            return None
        # the agent's own always-option for its own always-rule; the allow_once otherwise
        preferred = (rule.answer_kind, PERMISSION_ALLOW_ONCE, PERMISSION_ALLOW_ALWAYS)
        option = request.option_of_kind(*preferred) or allow
        return Automatic(option, f"trust rule {rule.number}", rule)


def trustable(request: PermissionRequest) -> bool:
    """Whether the card offers **Trust this tool for this session**: the tool has a shape a
    rule can hold and the agent offers an allow_once to answer it with."""
    return (
        ToolShape.of(request.tool) is not None
        and request.option_of_kind(PERMISSION_ALLOW_ONCE) is not None
    )


def policy_line(policy: str) -> str:
    """The /status line (and, for `trusted`, every turn's footer line) of a project's policy."""
    if policy == TRUSTED:
        return "Approvals: trusted (tools run without asking)"
    if policy == READS:
        return "Approvals: reads (reads and searches run without asking)"
    return "Approvals: ask (every tool asks)"
