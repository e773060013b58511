"""What Switchboard itself says at the end of a turn or around it: the refusal card, the line
for a turn that stopped short of a plain answer, the reply to /stop and the restart notice. The
chat runner and the one-shot `ask` command share them, so a person reads the same words in a chat
and on a terminal."""

from __future__ import annotations

from acp import (
    STOP_REASON_CANCELLED,
    STOP_REASON_MAX_TOKENS,
    STOP_REASON_MAX_TURN_REQUESTS,
    AcpPromptStats,
    RefusalInfo,
    redact_links,
)

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
