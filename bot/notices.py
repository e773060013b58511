"""What Switchboard itself says at the end of a turn or around it: the refusal card, the line
for a turn that stopped short of a plain answer, the reply to /stop, the restart notice, and the
lines for what the agent reports outside a reply (compaction, MCP servers, sign-in links), the
footer line of a project whose tools run without asking. The
chat runner and the one-shot `ask` command share them, so a person reads the same words in a chat
and on a terminal."""

from __future__ import annotations

import math

from acp import (
    STOP_REASON_CANCELLED,
    STOP_REASON_MAX_TOKENS,
    STOP_REASON_MAX_TURN_REQUESTS,
    AcpPromptStats,
    NoticeKind,
    RefusalInfo,
    SessionNotice,
    UsageInfo,
    redact_links,
)
from bot.trust import TRUSTED, policy_line
from surfaces.base import UserRef

RESTART_NOTICE = (
    "Your last request was interrupted when Switchboard restarted, before the reply was finished. "
    "Send it again, or ask the agent to continue."
)
SHUTDOWN_NOTE = "(stopped: Switchboard is shutting down)"


def join_paragraphs(*parts: str) -> str:
    """The non-empty parts, one paragraph each (a reply's text, then a notice under it)."""
    return "\n\n".join(part.strip("\n") for part in parts if part.strip())


def refusal_card_text(refusal: RefusalInfo, streamed_text: str) -> str:
    """A lead line, then one line per field the provider gave; an explanation the agent already
    streamed is not repeated. Never offers a retry: the same request would be refused again."""
    lines = ["The model declined to answer this request."]
    if refusal.category:
        lines.append(f"Category: {refusal.category}")
    if refusal.explanation and not _already_streamed(refusal.explanation, streamed_text):
        lines.append(f"Reason: {refusal.explanation}")
    if refusal.recommended_model:
        lines.append(f"A model that may answer it: {refusal.recommended_model}")
    else:
        lines.append("Try rephrasing the request, or start a new conversation.")
    return "\n".join(lines)


def _squash(text: str) -> str:
    return " ".join(text.split()).casefold()


def _already_streamed(explanation: str, streamed_text: str) -> bool:
    """The parser capped and redacted the explanation; compare like with like."""
    core = _squash(explanation.removesuffix("…"))
    return core in _squash(redact_links(streamed_text))


def stop_notice(stats: AcpPromptStats) -> str:
    """A short honest line for turns that ended some other way than a plain answer."""
    if stats.interrupted:
        return "The agent's tool use was interrupted; send your next message to continue."
    if stats.stop_reason == STOP_REASON_MAX_TOKENS:
        return "The answer hit the model's output limit and was cut off; ask for smaller steps."
    if stats.stop_reason == STOP_REASON_MAX_TURN_REQUESTS:
        return (
            "The agent reached its limit of model requests for one turn; "
            "send a follow-up to let it continue."
        )
    if stats.stop_reason == STOP_REASON_CANCELLED:
        return "The turn was stopped."
    return ""


def stop_reply(stopped: bool, dropped: int) -> str:
    """The answer to /stop: whether a turn was stopped, and how many queued messages went."""
    said = "Stopping." if stopped else "Nothing is running."
    if dropped:
        messages = "1 queued message was" if dropped == 1 else f"{dropped} queued messages were"
        said = f"{said} {messages} dropped."
    return said


def session_notice_text(notice: SessionNotice, requester: UserRef | None, prefix: str = "/") -> str:
    """One line for something the agent reported outside a reply. A sign-in link is addressed
    to the person whose message started the latest turn here (surfaces have no private channel
    to them), or to the chat's admins before anyone has asked anything."""
    kind = notice.kind
    if kind is NoticeKind.COMPACTION_STARTED:
        return "The agent is compacting the conversation to free context."
    if kind is NoticeKind.COMPACTION_COMPLETED:
        return "The agent finished compacting the conversation."
    if kind is NoticeKind.COMPACTION_FAILED:
        said = "Compacting the conversation failed"
        said = f"{said}: {notice.detail.rstrip('.')}." if notice.detail else f"{said}."
        if notice.transient:
            return f"{said} It may work if you try {prefix}compact again in a moment."
        return said
    if kind is NoticeKind.MCP_SIGN_IN:
        who = requester.label if requester is not None else "an admin of this chat"
        return f"For {who}: the MCP server {notice.server} needs you to sign in at {notice.link}"
    if kind is NoticeKind.MCP_FAILED:
        server = notice.server or "an MCP server"
        reason = f": {notice.detail.rstrip('.')}" if notice.detail else ""
        return f"The agent could not start the MCP server {server}{reason}."
    if kind is NoticeKind.AGENT_WARNING:
        return f"The agent warns: {notice.detail}"
    if kind is NoticeKind.GATE_RESTORED:
        return (
            f"The agent switched its approvals off ({notice.previous}), so Switchboard put them "
            f"back ({notice.detail}): approvals are Switchboard's to manage."
        )
    if notice.detail:
        return f"The agent switched to {notice.detail}."
    return "The agent switched to another agent configuration."


# Context use at which a reply suggests compacting, highest first; each is said once per crossing.
COMPACT_THRESHOLDS = (90, 80)
_CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£"}


def context_percent(usage: UsageInfo | None) -> float | None:
    """How full the context window is, in percent, if the agent said enough to tell."""
    if usage is None:
        return None
    if usage.percent is not None:
        percent = usage.percent
    elif usage.used is not None and usage.size:
        percent = 100 * usage.used / usage.size
    else:
        return None
    return min(max(percent, 0.0), 100.0) if math.isfinite(percent) else None


def usage_footer(usage: UsageInfo | None) -> str:
    """ "Context 42% · $0.18": context used and, when given, the cost ("" when neither is known)."""
    parts = []
    percent = context_percent(usage)
    if percent is not None:
        parts.append(f"Context {percent:.0f}%")
    if usage is not None and usage.cost is not None and math.isfinite(usage.cost):
        currency = usage.currency.strip().upper()[:8]
        sign = _CURRENCY_SIGNS.get(currency or "USD")
        amount = f"{usage.cost:.2f}"
        parts.append(f"{sign}{amount}" if sign else f"{amount} {currency}")
    return " · ".join(parts)


def compact_level(percent: float | None) -> int:
    """The highest of COMPACT_THRESHOLDS that `percent` reached (0: none)."""
    if percent is None:
        return 0
    return next((level for level in COMPACT_THRESHOLDS if percent >= level), 0)


def compact_hint(level: int, prefix: str = "/") -> str:
    return (
        f"The conversation uses {level}% of the agent's context; "
        f"{prefix}compact summarises it to free room."
    )


def approvals_footer(policy: str) -> str:
    """Under every turn of a `trusted` project (bot/trust.py): nobody is asked about its tools,
    so each answer says so ("" for the others)."""
    return policy_line(policy) if policy == TRUSTED else ""
