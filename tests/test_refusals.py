"""Refusals: kiro's structured `_kiro.dev/metadata` (parse_refusal), bare `stopReason:"refusal"`,
how a refused turn ends (AcpPromptStats.terminal_refusal), and the card a person reads
(bot.notices.refusal_card_text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import (
    STOP_REASON_CANCELLED,
    STOP_REASON_END_TURN,
    STOP_REASON_REFUSAL,
    AcpError,
    AcpEvent,
    AcpPromptStats,
    EventKind,
    RefusalInfo,
)
from acp._dispatch import (
    REFUSAL_CATEGORY_MAX,
    REFUSAL_EXPLANATION_MAX,
    REFUSAL_MODEL_MAX,
    parse_refusal,
)
from bot.notices import refusal_card_text
from tests.acp_helpers import agent_spec, collect_turn, open_test_client
from tests.conftest import FakeAgent, script

WAIT = 20  # seconds: an upper bound on every test here, never a measurement

# The scenario's canned text (tests/fakes/fake_agent.py KIRO_REFUSAL_EXPLANATION).
KIRO_EXPLANATION = (
    "I can't help with this request because it could be used to compromise systems "
    "without authorization. If you are working on an authorized security assessment, "
    "please describe the defensive goal and I can help with detection or hardening instead."
)
SECRET = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv"


# ---- parse_refusal -------------------------------------------------------------------------------
def test_content_filtered_without_a_refusal_object_is_a_refusal_with_empty_fields() -> None:
    assert parse_refusal({"sessionId": "s", "stopReason": "CONTENT_FILTERED"}) == RefusalInfo()


def test_the_stop_reason_is_trimmed_and_upper_cased_before_comparing() -> None:
    assert parse_refusal({"stopReason": "  content_filtered\n"}) == RefusalInfo()


def test_a_refusal_object_without_a_stop_reason_is_a_refusal() -> None:
    refusal = parse_refusal({"refusal": {"category": "CYBER"}})
    assert refusal == RefusalInfo(category="CYBER")


def test_an_empty_refusal_object_is_still_a_refusal() -> None:
    assert parse_refusal({"refusal": {}}) == RefusalInfo()


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({}, id="nothing"),
        pytest.param({"stopReason": "END_TURN", "contextUsagePercentage": 3.5}, id="end-turn"),
        pytest.param({"refusal": None, "stopReason": "MAX_TOKENS"}, id="null-refusal"),
        pytest.param({"refusal": "CYBER"}, id="refusal-not-an-object"),
        pytest.param({"stopDetails": {"stopReason": "END_TURN"}}, id="stop-details-end-turn"),
        pytest.param("CONTENT_FILTERED", id="params-not-an-object"),
    ],
)
def test_metadata_without_a_refusal_is_not_one(params: Any) -> None:
    assert parse_refusal(params) is None


def test_the_refusal_nested_under_stop_details_is_read() -> None:
    nested = {
        "stopDetails": {
            "stopReason": "CONTENT_FILTERED",
            "refusal": {"category": "CYBER", "explanation": "No.", "recommendedModel": "m-2"},
        }
    }
    assert parse_refusal(nested) == RefusalInfo("CYBER", "No.", "m-2")
    only_reason = {"stopDetails": {"stopReason": "CONTENT_FILTERED"}}
    assert parse_refusal(only_reason) == RefusalInfo()
    only_object = {"stopDetails": {"refusal": {"category": "VIOLENCE"}}}
    assert parse_refusal(only_object) == RefusalInfo(category="VIOLENCE")


def test_a_top_level_refusal_object_wins_over_the_nested_one() -> None:
    params = {
        "refusal": {"category": "TOP"},
        "stopDetails": {"refusal": {"category": "NESTED"}},
    }
    assert parse_refusal(params) == RefusalInfo(category="TOP")


@pytest.mark.parametrize("value", [123, 4.5, True, None, ["CYBER"], {"name": "CYBER"}])
def test_non_string_fields_become_empty_never_guessed(value: Any) -> None:
    refusal = parse_refusal(
        {
            "stopReason": "CONTENT_FILTERED",
            "refusal": {"category": value, "explanation": value, "recommendedModel": value},
        }
    )
    assert refusal == RefusalInfo("", "", "")


def test_credentials_and_links_are_redacted_in_every_field() -> None:
    refusal = parse_refusal(
        {
            "refusal": {
                "category": f"CYBER {SECRET}",
                "explanation": f"See https://evil.example/x?d={SECRET} or ghp_{'a' * 36}.",
                "recommendedModel": "model-x api_key=abcdefghijklmnop https://h.example/m",
            }
        }
    )
    assert refusal is not None
    fields = (refusal.category, refusal.explanation, refusal.recommended_model)
    for field in fields:
        assert SECRET not in field and "sk-ant" not in field
        assert "http" not in field and ".example" not in field
    assert refusal.category == "CYBER [redacted]"
    assert "ghp_" not in refusal.explanation and refusal.explanation.startswith("See ")
    assert "abcdefghijklmnop" not in refusal.recommended_model
    assert refusal.recommended_model.startswith("model-x")


def test_fields_are_capped_at_64_600_and_128_characters() -> None:
    assert (REFUSAL_CATEGORY_MAX, REFUSAL_EXPLANATION_MAX, REFUSAL_MODEL_MAX) == (64, 600, 128)
    refusal = parse_refusal(
        {
            "refusal": {
                "category": "C" * 500,
                "explanation": "e" * 5000,
                "recommendedModel": "m" * 500,
            }
        }
    )
    assert refusal is not None
    assert len(refusal.category) == 64 and refusal.category.startswith("CCC")
    assert len(refusal.explanation) == 600
    assert len(refusal.recommended_model) == 128
    short = parse_refusal({"refusal": {"category": "C" * 64, "explanation": "fits"}})
    assert short == RefusalInfo(category="C" * 64, explanation="fits")


def test_whitespace_inside_a_field_is_collapsed_to_one_line() -> None:
    refusal = parse_refusal({"refusal": {"explanation": "  two\n\nlines\t here  "}})
    assert refusal == RefusalInfo(explanation="two lines here")


# ---- AcpPromptStats ------------------------------------------------------------------------------
def test_a_recorded_refusal_rewrites_the_stop_reason_to_refusal() -> None:
    stats = AcpPromptStats(stop_reason=STOP_REASON_END_TURN, refusal=RefusalInfo("CYBER"))
    ended = stats.terminal_refusal()
    assert ended.stop_reason == STOP_REASON_REFUSAL == "refusal"
    assert ended.refusal == RefusalInfo("CYBER")
    assert stats.stop_reason == STOP_REASON_END_TURN  # the original is not mutated


def test_without_a_refusal_the_stop_reason_is_kept() -> None:
    stats = AcpPromptStats(stop_reason="max_tokens")
    assert stats.terminal_refusal().stop_reason == "max_tokens"


# ---- through the fake agent ----------------------------------------------------------------------


async def run(
    agent: FakeAgent,
    workspace: Path,
    text: str,
    *,
    dialect: str = "kiro",
    permission_answer: str | None = None,
) -> list[AcpEvent]:
    with anyio.fail_after(WAIT):
        async with open_test_client(agent_spec(agent, workspace, dialect=dialect)) as client:
            session = await client.open_session()
            return await collect_turn(session, text, lambda permission: permission_answer)


def terminal(events: list[AcpEvent]) -> AcpPromptStats:
    assert events[-1].kind is EventKind.TERMINAL and events[-1].stats is not None
    return events[-1].stats


@pytest.mark.anyio
async def test_a_kiro_refusal_yields_a_refusal_event_and_ends_the_turn_as_a_refusal(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    events = await run(fake_agent, workspace, "SCN_REFUSAL_KIRO")
    refusals = [e for e in events if e.kind is EventKind.REFUSAL]
    expected = RefusalInfo("CYBER", KIRO_EXPLANATION, "claude-sonnet-4")
    assert [e.refusal for e in refusals] == [expected]
    assert [e.text for e in events if e.kind is EventKind.TEXT] == [KIRO_EXPLANATION]
    stats = terminal(events)  # the trailing bare -32603 ended the turn without an error
    assert stats.stop_reason == STOP_REASON_REFUSAL
    assert stats.refusal == expected


@pytest.mark.anyio
async def test_a_kiro_refusal_followed_by_a_plain_end_turn_is_still_a_refusal(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    metadata = {"stopReason": "CONTENT_FILTERED", "refusal": {"category": "CYBER"}}
    text = script(
        {"notify": {"method": "_kiro.dev/metadata", "params": metadata}},
        {"chunk": "declined"},
        {"stop": "end_turn"},
    )
    stats = terminal(await run(fake_agent, workspace, text))
    assert stats.stop_reason == STOP_REASON_REFUSAL
    assert stats.refusal == RefusalInfo(category="CYBER")


@pytest.mark.anyio
async def test_kiro_metadata_without_a_refusal_is_context_usage_not_a_refusal(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    metadata = {"contextUsagePercentage": 12.5, "meteringUsage": []}
    text = script({"notify": {"method": "_kiro.dev/metadata", "params": metadata}}, {"chunk": "ok"})
    events = await run(fake_agent, workspace, text)
    usage = [e.usage for e in events if e.kind is EventKind.USAGE]
    assert usage and usage[0] is not None and usage[0].percent == 12.5
    assert not [e for e in events if e.kind is EventKind.REFUSAL]
    assert terminal(events).stop_reason == STOP_REASON_END_TURN
    assert terminal(events).refusal is None


@pytest.mark.anyio
async def test_a_bare_error_without_a_recorded_refusal_is_still_an_error(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    with pytest.raises(AcpError):
        await run(
            fake_agent, workspace, script({"error": {"code": -32603, "message": "Internal error"}})
        )


@pytest.mark.anyio
async def test_a_bare_claude_refusal_has_a_refusal_without_details(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    events = await run(fake_agent, workspace, "SCN_REFUSAL_BARE", dialect="claude")
    stats = terminal(events)
    assert stats.stop_reason == STOP_REASON_REFUSAL
    assert stats.refusal == RefusalInfo()
    assert stats.refusal.category == stats.refusal.explanation == ""
    assert stats.refusal.recommended_model == ""


@pytest.mark.anyio
async def test_kiro_metadata_is_not_read_as_a_refusal_from_backends_without_structured_refusals(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    metadata = {"stopReason": "CONTENT_FILTERED", "refusal": {"category": "CYBER"}}
    text = script({"notify": {"method": "_kiro.dev/metadata", "params": metadata}}, {"chunk": "hi"})
    events = await run(fake_agent, workspace, text, dialect="claude")
    assert not [e for e in events if e.kind is EventKind.REFUSAL]
    assert terminal(events).stop_reason == STOP_REASON_END_TURN
    assert terminal(events).refusal is None


@pytest.mark.anyio
async def test_kiro_answering_refusal_after_our_cancelled_permission_is_a_cancel_not_a_refusal(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    text = script({"permission": {}, "stop_on": {"cancelled": "refusal"}})
    events = await run(fake_agent, workspace, text, permission_answer=None)
    assert "permission:cancelled" in [e.text for e in events]
    stats = terminal(events)
    assert stats.stop_reason == STOP_REASON_CANCELLED
    assert stats.refusal is None


@pytest.mark.anyio
async def test_the_same_refusal_stop_after_an_approved_permission_is_a_refusal(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    text = script({"permission": {}, "stop_on": {"allow_once": "refusal"}})
    events = await run(fake_agent, workspace, text, permission_answer="allow_once")
    stats = terminal(events)
    assert stats.stop_reason == STOP_REASON_REFUSAL
    assert stats.refusal == RefusalInfo()


# ---- the card -----------------------------------------------------------------------------------
LEAD = "The model declined to answer this request."
REPHRASE = "Try rephrasing the request, or start a new conversation."


def test_the_card_has_a_lead_line_and_one_line_per_given_field() -> None:
    card = refusal_card_text(RefusalInfo("CYBER", "Not allowed here.", "claude-sonnet-4"), "")
    lines = card.splitlines()
    assert lines[0] == LEAD
    assert lines[1:] == [
        "Category: CYBER",
        "Reason: Not allowed here.",
        "A model that may answer it: claude-sonnet-4",
    ]


def test_a_card_without_details_suggests_rephrasing_or_a_new_conversation() -> None:
    assert refusal_card_text(RefusalInfo(), "").splitlines() == [LEAD, REPHRASE]


def test_empty_fields_get_no_line() -> None:
    card = refusal_card_text(
        RefusalInfo(category="", explanation="Because.", recommended_model=""), ""
    )
    assert card.splitlines() == [LEAD, "Reason: Because.", REPHRASE]
    assert "Category" not in card


def test_an_explanation_already_streamed_is_not_repeated_ignoring_case_and_whitespace() -> None:
    refusal = RefusalInfo(category="CYBER", explanation="I can't   help\nwith THIS request.")
    streamed = "Sorry.  i can't help with this\n request. Anything else?"
    card = refusal_card_text(refusal, streamed)
    assert "Reason" not in card and "help" not in card
    assert card.splitlines() == [LEAD, "Category: CYBER", REPHRASE]


def test_an_explanation_only_partly_streamed_is_shown() -> None:
    refusal = RefusalInfo(explanation="I can't help with this request.")
    card = refusal_card_text(refusal, "I can't help")
    assert "Reason: I can't help with this request." in card


def test_a_recommended_model_replaces_the_rephrase_suggestion() -> None:
    card = refusal_card_text(RefusalInfo(recommended_model="m-large"), "")
    assert card.splitlines() == [LEAD, "A model that may answer it: m-large"]


@pytest.mark.parametrize(
    "refusal",
    [
        RefusalInfo(),
        RefusalInfo("CYBER"),
        RefusalInfo("CYBER", "x", "m"),
        RefusalInfo(explanation="Please try again later."),
    ],
)
def test_the_card_never_offers_a_retry(refusal: RefusalInfo) -> None:
    card = refusal_card_text(refusal, "Please try again later.").lower()
    assert "retry" not in card and "try again" not in card


@pytest.mark.parametrize(
    "explanation",
    [
        pytest.param(KIRO_EXPLANATION + " " + "Read the policy for details. " * 20, id="over-600"),
        pytest.param(KIRO_EXPLANATION + " See https://example.com/aup.", id="with-a-link"),
    ],
)
def test_an_explanation_streamed_in_full_is_not_repeated_even_when_parsing_shortened_it(
    explanation: str,
) -> None:
    refusal = parse_refusal(
        {"stopReason": "CONTENT_FILTERED", "refusal": {"explanation": explanation}}
    )
    assert refusal is not None and refusal.explanation != explanation  # capped or redacted
    card = refusal_card_text(refusal, explanation)  # the agent streamed the same text as chunks
    assert "Reason:" not in card
