"""Deny by default. Each surface has an allowlist of platform user ids and two stronger roles:
approvers may answer anyone's tool approvals, admins may do everything. A stranger gets nothing
back — not even a "not allowed" — and is logged once with their ids.

The terminal surface is the operator's own: its single local user is an admin."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import IntEnum

from bot.surface_registry import surface_entries
from config import Settings
from surfaces.base import UserRef

log = logging.getLogger(__name__)

CONSOLE_SURFACE = "console"
CONSOLE_USER = UserRef("local", "you")


class Role(IntEnum):
    NONE = 0
    CHAT = 1  # may prompt, and approve the tools of their own prompts
    APPROVE = 2  # may also approve anyone's tool requests
    ADMIN = 3


@dataclass(frozen=True, slots=True)
class SurfaceRules:
    chat: frozenset[str] = frozenset()
    approve: frozenset[str] = frozenset()
    admin: frozenset[str] = frozenset()

    def role(self, user_id: str) -> Role:
        if user_id in self.admin:
            return Role.ADMIN
        if user_id in self.approve:
            return Role.APPROVE
        if user_id in self.chat:
            return Role.CHAT
        return Role.NONE


@dataclass
class AccessPolicy:
    rules: dict[str, SurfaceRules]
    _strangers: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessPolicy:
        rules = {CONSOLE_SURFACE: SurfaceRules(admin=frozenset({CONSOLE_USER.id}))}
        for entry in surface_entries():
            section = entry.section(settings)
            rules[entry.name] = SurfaceRules(
                chat=frozenset(section.allowed_users),
                approve=frozenset(section.approvers),
                admin=frozenset(section.admins),
            )
        return cls(rules)

    def role(self, surface: str, user_id: str) -> Role:
        rules = self.rules.get(surface)
        return rules.role(user_id) if rules is not None else Role.NONE

    def may_chat(self, surface: str, user: UserRef) -> bool:
        if self.role(surface, user.id) >= Role.CHAT:
            return True
        if (surface, user.id) not in self._strangers:
            self._strangers.add((surface, user.id))
            log.warning("ignoring a stranger on %s: id=%s name=%r", surface, user.id, user.name)
        return False

    def may_approve(self, surface: str, user: UserRef, requester_id: str) -> bool:
        role = self.role(surface, user.id)
        if role >= Role.APPROVE:
            return True
        return role >= Role.CHAT and user.id == requester_id

    def approvers(self, surface: str) -> list[str]:
        rules = self.rules.get(surface)
        if rules is None:
            return []
        return sorted(rules.approve | rules.admin)
