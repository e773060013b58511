"""Each backend's quirks object (acp/quirks.py) as the turn consults it, without an agent: what
it holds back, what it lets out and when, and which backend gets which."""

from __future__ import annotations

from acp.backends import ACP_BACKENDS_STRUCTURED_REFUSAL, BACKENDS
from acp.growing_text import GrowingText
from acp.quirks import (
    KIRO_INTERRUPTED,
    ClaudeQuirks,
    CodexQuirks,
    GenericQuirks,
    KiroQuirks,
    Take,
    injected_warning,
)
from acp.types import AcpEvent, EventKind


def _chunk(text: str) -> AcpEvent:
    return AcpEvent(EventKind.TEXT, text=text)


def _never_an_error(text: str) -> bool:
    return False


def _says_error(text: str) -> bool:
    return text.startswith("API Error")


def _status(kind: str) -> dict[str, object]:
    return {"_meta": {"codex": {"threadStatus": {"type": kind}}}}


def test_each_preset_names_its_quirks_and_only_kiro_sends_structured_refusals() -> None:
    assert {name: backend.quirks for name, backend in BACKENDS.items()} == {
        "kiro": KiroQuirks,
        "claude": ClaudeQuirks,
        "codex": CodexQuirks,
        "generic": GenericQuirks,
    }
    assert ACP_BACKENDS_STRUCTURED_REFUSAL == frozenset({"kiro"})


def test_kiros_idle_line_ends_the_turn_and_only_the_whole_line_does() -> None:
    quirks = KiroQuirks(_never_an_error)
    assert quirks.claims(KIRO_INTERRUPTED) and not quirks.claims("hello")
    assert quirks.take_chunk(_chunk(f"\n{KIRO_INTERRUPTED}\n")) is Take.ENDS_TURN
    assert quirks.take_chunk(_chunk(f"quote: {KIRO_INTERRUPTED}")) is Take.OUTPUT


def test_kiros_bare_error_after_a_refusal_is_the_refusals_end() -> None:
    quirks = KiroQuirks(_never_an_error)
    bare = {"code": -32603, "message": "Internal error"}
    assert quirks.ends_in_refusal(bare, refused=True)
    assert not quirks.ends_in_refusal(bare, refused=False)
    assert not quirks.ends_in_refusal({**bare, "data": "a real failure"}, refused=True)


def test_kiro_metadata_is_a_refusal_or_context_use_and_other_backends_ignore_it() -> None:
    refused = {"sessionId": "s", "refusal": {"category": "safety"}}
    context = {"sessionId": "s", "contextUsagePercentage": 42}
    kiro = KiroQuirks(_never_an_error)
    event = kiro.notification("_kiro.dev/metadata", context)
    assert event is not None and event.kind is EventKind.USAGE
    assert event.usage is not None and event.usage.percent == 42
    assert kiro.notification("_kiro.dev/other", refused) is None
    assert GenericQuirks(_never_an_error).notification("_kiro.dev/metadata", context) is None


def test_codex_holds_text_after_a_system_error_and_it_is_the_failure_when_usage_is_null() -> None:
    quirks = CodexQuirks(_never_an_error)
    assert quirks.take_chunk(_chunk("before")) is Take.OUTPUT
    assert quirks.status(_status("systemError")) == []
    assert quirks.holding and quirks.claims("anything")
    assert quirks.take_chunk(_chunk("stream disconnected ")) is Take.HELD
    assert quirks.take_chunk(_chunk("before completion\n\n")) is Take.HELD
    assert quirks.failure({"usage": {"totalTokens": 3}}) is None
    assert quirks.failure({"usage": None}) == "stream disconnected before completion"
    assert quirks.answered() == []


def test_codex_text_held_is_output_when_the_thread_recovers_or_the_turn_ends_well() -> None:
    recovered = CodexQuirks(_never_an_error)
    recovered.status(_status("systemError"))
    recovered.take_chunk(_chunk("retrying"))
    assert [event.text for event in recovered.status(_status("active"))] == ["retrying"]
    assert not recovered.holding

    ended = CodexQuirks(_never_an_error)
    ended.status(_status("systemError"))
    ended.take_chunk(_chunk("partial"))
    assert ended.failure({"stopReason": "end_turn"}) is None
    assert [event.text for event in ended.answered()] == ["partial"]


def test_a_generic_agent_reads_both_the_kiro_idle_line_and_the_codex_system_error() -> None:
    quirks = GenericQuirks(_never_an_error)
    assert quirks.take_chunk(_chunk(KIRO_INTERRUPTED)) is Take.ENDS_TURN
    quirks.status(_status("systemError"))
    assert quirks.take_chunk(_chunk(KIRO_INTERRUPTED)) is Take.HELD  # held text comes first


def test_claude_holds_an_error_looking_chunk_until_content_or_an_answer_says_it_was_output() -> (
    None
):
    quirks = ClaudeQuirks(_says_error)
    assert quirks.claims("API Error: overloaded") and not quirks.claims("fine")
    echo = _chunk("API Error: overloaded")
    assert quirks.take_chunk(echo) is Take.HELD and quirks.holding
    assert quirks.content_follows() == [echo]
    assert not quirks.holding and quirks.content_follows() == []
    quirks.take_chunk(echo)
    assert quirks.answered() == [echo] and quirks.answered() == []


def test_an_injected_warning_is_a_whole_line_at_the_start_of_a_line() -> None:
    empty, mid_line = GrowingText(), GrowingText()
    mid_line.append("The answer is")
    assert injected_warning("Warning: model metadata not found.\n", empty)
    assert not injected_warning("Warning: model metadata not found.\n", mid_line)
    assert not injected_warning("Warning: the start of an answer", empty)
