"""Fault isolation: an unexpected exception (a bug or a foreign error nobody mapped, never one of
our own error types) ends only the turn or event it happened in. It is logged once at ERROR with
breadcrumbs to find it by (surface, conversation, turn id, agent pid, the methods of the last
frames) and the person is told in one sentence; the process and every other conversation go on."""

from __future__ import annotations

import logging
import secrets

from acp import AcpRuntime
from surfaces.base import ConversationKey

log = logging.getLogger(__name__)


def new_turn_id() -> str:
    """Short enough to read out of a log line, random enough to be unique in one."""
    return secrets.token_hex(4)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def fault_sentence(exc: BaseException) -> str:
    name = type(_leaf(exc)).__name__
    return (
        f"Something went wrong on Switchboard's side while answering ({name}); "
        "the details are in its log. Send your message again."
    )


def log_fault(
    exc: BaseException,
    doing: str,
    key: ConversationKey,
    runtime: AcpRuntime | None,
    **crumbs: str,
) -> None:
    """The one ERROR line (with the traceback) for a fault while `doing` something for `key`."""
    fields = {"surface": key.surface, "conversation": str(key), **crumbs}
    trail = " ".join(f"{name}={value}" for name, value in fields.items() if value)
    agent = runtime.breadcrumbs() if runtime is not None else "agent=none"
    log.error("unexpected fault while %s [%s %s]", doing, trail, agent, exc_info=exc)
