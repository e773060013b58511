"""The agent's questions (ACP elicitation) through the bot: BotApp in process, the scripted fake
agent as a real subprocess sending `elicitation/create`, and the recording test surface (with the
`AsksForText` ability, as Telegram and the terminal have it). What the agent was answered is read
from its own reply chunk ("reply:<the JSON result>"). Plus the cards' texts and the reading of a
press or a typed word, which are pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from acp import ElicitationField, ElicitationRequest
from bot.elicitation_form import (
    CANCEL,
    DECLINE,
    OK,
    SKIP,
    VALUE_PREFIX,
    button_value,
    field_card,
    typed_action,
    url_card,
)
from surfaces.abilities import AsksForText
from surfaces.base import ConversationKey, MessageRef, UserRef
from tests.conftest import FakeAgent, script
from tests.engine_helpers import (
    Call,
    ScriptedSurface,
    engine_settings,
    finished,
    running_app,
    wait_for,
)

pytestmark = pytest.mark.anyio


class AskingSurface(ScriptedSurface):
    """The recording surface with buttons beside the conversation and a prompt for typed text."""

    def __init__(self) -> None:
        super().__init__(message_buttons=True)

    async def ask_text(self, key: ConversationKey, prompt: str, *, user: UserRef) -> MessageRef:
        ref = MessageRef(key, f"t{len(self.calls)}")
        await self._record(Call("ask_text", prompt, ref.id, key, user=user.id))
        return ref

    def asked(self) -> list[str]:
        return [call.text for call in self.ops("ask_text")]

    def closed(self) -> list[str]:
        return [call.text for call in self.ops("close_choice")]


def form_step(message: str, properties: dict[str, Any], required: Sequence[str] = ()) -> Any:
    schema = {"type": "object", "properties": properties, "required": list(required)}
    params = {"mode": "form", "message": message, "requestedSchema": schema}
    return {"request": {"method": "elicitation/create", "params": params}}


def answered(surface: ScriptedSurface) -> dict[str, Any]:
    """The agent's reply chunk: what its request was answered."""
    text = surface.transcript()
    start = text.index("reply:") + len("reply:")
    result, _ = json.JSONDecoder().raw_decode(text[start:])
    return dict(result["result"])


def token(card: Call, label: str) -> str:
    return next(choice.token for choice in card.choices if choice.label == label)


async def card(surface: ScriptedSurface, number: int) -> Call:
    await wait_for(lambda: len(surface.choices()) >= number, f"card {number}", 15)
    return surface.choices()[number - 1]


PROFILE = form_step(
    "Tell me about you",
    {
        "name": {"type": "string", "title": "Your name", "minLength": 1},
        "age": {"type": "integer", "title": "Age", "minimum": 0, "maximum": 150},
        "subscribe": {"type": "boolean", "title": "Subscribe"},
        "color": {"type": "string", "title": "Colour", "enum": ["red", "green"]},
        "note": {"type": "string", "title": "Note"},
    },
    required=["name", "age"],
)


async def test_a_form_is_asked_field_by_field_and_answered_accept_with_every_value(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(surface.message("alice", script(PROFILE)))
        first = await card(surface, 1)
        assert first.text.startswith("The agent asks Alice (or an approver):\nTell me about you")
        assert "Question 1 of 4: Your name" in first.text  # the note is the colour's companion
        assert [c.label for c in first.choices] == ["Decline", "Cancel"]  # required: no Skip
        assert sorted(first.allowed_users) == ["alice", "carol"]
        waiting = "waiting for your answer"
        await wait_for(lambda: waiting in surface.transcript(), "the live status")
        await wait_for(lambda: surface.asked(), "the prompt for typed text")
        assert surface.asked() == ["Alice, your answer to “Your name”:"]
        await finished(surface.post(surface.message("alice", "Ann")))

        second = await card(surface, 2)
        assert "Question 2 of 4: Age" in second.text and "from 0 to 150" in second.text
        for typed in ("old enough", "200"):
            await finished(surface.post(surface.message("alice", typed)))
        await wait_for(lambda: len(surface.asked()) == 4, "two retold questions")
        assert all("Reply again." in line for line in surface.asked()[2:])
        assert "Age" in surface.asked()[2]
        await finished(surface.post(surface.message("alice", "42")))

        third = await card(surface, 3)
        assert [c.label for c in third.choices] == ["Yes", "No", "Skip", "Decline", "Cancel"]
        await finished(surface.post(surface.press("alice", token(third, "Yes"))))
        fourth = await card(surface, 4)
        assert "Question 4 of 4: Colour (optional)" in fourth.text
        labels = [c.label for c in fourth.choices]
        assert labels == ["red", "green", "Note…", "Skip", "Decline", "Cancel"]
        # one tap: the optional note after the choice is offered on its card, not asked after
        await finished(surface.post(surface.press("alice", token(fourth, "green"))))
        await finished(turn)
        records = [r.as_json() for r in await app.store.audit_since(0)]

    assert answered(surface) == {
        "action": "accept",
        "content": {"name": "Ann", "age": 42, "subscribe": True, "color": "green"},
    }
    assert surface.closed() == [
        "Answered by Alice.",
        "Answered by Alice.",
        "Answered by Alice: Yes",
        "Answered by Alice: green",
    ]
    assert len(surface.choices()) == 4
    assert fake_agent.prompt_texts() == [script(PROFILE)]  # the answers were not prompts
    assert "waiting for your answer" not in list(surface.shown().values())[-1]
    (record,) = [r for r in records if r["kind"] == "elicitation"]
    assert (record["actor"], record["action"]) == ("alice", "question")
    assert {name: record[name] for name in ("requester", "question", "mode", "outcome")} == {
        "requester": "alice",
        "question": "Tell me about you",
        "mode": "form",
        "outcome": "accept",
    }
    assert "Ann" not in json.dumps(records) and "42" not in json.dumps(records)


ASK = form_step(  # claude-agent-acp's AskUserQuestion: nothing required, "Other" after the pick
    "Which colour?",
    {
        "question_0": {
            "type": "string",
            "title": "Colour",
            "oneOf": [{"const": "Blue", "title": "Blue"}, {"const": "Red", "title": "Red"}],
        },
        "question_0_custom": {"type": "string", "title": "Other", "description": "Your own"},
    },
)


async def test_claudes_ask_user_question_is_answered_by_one_tap(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", script(ASK)))
        first = await card(surface, 1)
        await finished(surface.post(surface.press("alice", token(first, "Red"))))
        await finished(turn)
    assert answered(surface) == {"action": "accept", "content": {"question_0": "Red"}}
    assert len(surface.choices()) == 1 and surface.closed() == ["Answered by Alice: Red"]
    assert surface.asked() == []


async def test_other_on_a_choices_card_asks_for_the_text_instead_of_a_pick(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", script(ASK)))
        first = await card(surface, 1)
        assert "Question" not in first.text  # one question: the companion is not counted
        labels = [c.label for c in first.choices]
        assert labels == ["Blue", "Red", "Other…", "Skip", "Decline", "Cancel"]
        await finished(surface.post(surface.press("alice", token(first, "Other…"))))
        second = await card(surface, 2)
        assert "Other (optional)" in second.text and "Your own" in second.text
        assert [c.label for c in second.choices] == ["Skip", "Decline", "Cancel"]
        await wait_for(lambda: surface.asked(), "the prompt for typed text")
        assert surface.asked() == ["Alice, your answer to “Other”:"]
        await finished(surface.post(surface.message("alice", "Green stripes")))
        await finished(turn)
    assert answered(surface) == {
        "action": "accept",
        "content": {"question_0_custom": "Green stripes"},
    }
    assert surface.closed() == ["Other… chosen by Alice.", "Answered by Alice."]


def test_a_companion_needs_an_optional_choice_shown_as_buttons_right_before_it() -> None:
    def labels(*fields: ElicitationField) -> list[str]:
        return [o.label for o in field_card(_request(*fields), 0, "you", buttons=True).offers]

    options = (("a", "A"), ("b", "B"))
    other = _field("other", "string", required=False)
    pick = _field("c", "choice", required=False, choices=options)
    assert labels(pick, other) == ["A", "B", "Other…", "Skip", "Decline", "Cancel"]
    required_pick = _field("c", "choice", choices=options)
    assert "Other…" not in labels(required_pick, other)  # it would leave a required field empty
    card = field_card(_request(required_pick, other), 0, "you", buttons=True)
    assert "Question 1 of 2: C" in card.text
    assert "Other…" not in labels(_field("n", "number", required=False), other)
    required_other = _field("other", "string")
    assert "Other…" not in labels(pick, required_other)


async def test_only_the_requester_or_an_approver_answers_and_a_press_from_elsewhere_is_refused(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    elsewhere = ConversationKey(surface.name, "chat-2")
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(surface.message("alice", script(PROFILE)))
        first = await card(surface, 1)
        decline = token(first, "Decline")
        await finished(surface.post(surface.press("bob", decline)))
        assert surface.notices("bob") == ["Only Alice or an approver can answer this."]
        await finished(surface.post(surface.press("alice", decline, key=elsewhere)))
        assert surface.notices("alice") == ["This question is no longer open."]
        # Bob's message is his own prompt, queued behind the turn: not the answer
        bobs = surface.post(surface.message("bob", "Bob"))
        await wait_for(lambda: "Queued" in surface.transcript(), "bob's message queued")
        assert surface.closed() == []
        await finished(surface.post(surface.press("carol", decline)))  # an approver
        await finished(turn, bobs)
        records = [r.as_json() for r in await app.store.audit_since(0)]

    assert answered(surface) == {"action": "decline"}
    assert surface.closed() == ["Declined by Carol."]
    assert fake_agent.prompt_texts()[1] == "Bob"
    refused = [(r["actor"], r.get("reason", "")) for r in records if r["kind"] == "refused"]
    assert refused == [("bob", ""), ("alice", "wrong conversation")]
    (record,) = [r for r in records if r["kind"] == "elicitation"]
    assert (record["actor"], record["outcome"]) == ("carol", "decline")


async def test_no_answer_within_the_approval_timeout_answers_cancel(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    settings = engine_settings(tmp_path, fake_agent, approval_timeout=0.3)
    async with running_app(settings, surface) as app:
        await finished(surface.post(surface.message("alice", script(PROFILE))))
        records = [r.as_json() for r in await app.store.audit_since(0)]
    assert answered(surface) == {"action": "cancel"}
    assert surface.closed() == ["No answer within 0.3 s: cancelled."]
    (record,) = [r for r in records if r["kind"] == "elicitation"]
    assert record["outcome"] == "timed out, cancelled"


async def test_stop_declines_the_open_question_and_closes_its_card(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", script(PROFILE, {"sleep": 5})))
        await card(surface, 1)
        await finished(surface.post(surface.message("alice", "/stop")))
        await finished(turn)
    assert surface.closed() == ["Stopped."]
    results = [f.get("result") for f in fake_agent.frames_in() if "method" not in f]
    # the issue: "/stop declines" — the agent hears the person chose not to answer
    assert [r for r in results if isinstance(r, dict) and "action" in r] == [{"action": "decline"}]
    assert fake_agent.prompt_texts() == [script(PROFILE, {"sleep": 5})]


async def test_a_question_the_agent_withdraws_closes_its_card(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    go = tmp_path / "withdraw-now"
    params = PROFILE["request"]["params"]
    steps = script(
        {"withdraw": {"method": "elicitation/create", "params": params}, "when_file": str(go)}
    )
    async with running_app(engine_settings(tmp_path, fake_agent), surface) as app:
        turn = surface.post(surface.message("alice", steps))
        await card(surface, 1)
        go.write_text("now")
        await finished(turn)
        records = [r.as_json() for r in await app.store.audit_since(0)]
    assert surface.closed() == ["The agent withdrew the question."]
    assert "withdrawn:" in surface.transcript()
    (record,) = [r for r in records if r["kind"] == "elicitation"]
    assert record["outcome"] == "withdrawn"


async def test_a_value_still_not_valid_after_three_tries_cancels_the_question(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    age = form_step("How old?", {"age": {"type": "integer", "minimum": 0}}, ["age"])
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", script(age)))
        await card(surface, 1)
        for typed in ("skip", "x", "-1", "1.5"):  # a required field cannot be skipped
            await finished(surface.post(surface.message("alice", typed)))
        await finished(turn)
    assert answered(surface) == {"action": "cancel"}
    assert "age is required: answer it, or decline." in surface.asked()
    assert surface.closed() == ["No valid answer after 3 tries: cancelled."]


async def test_a_url_question_is_a_link_answered_accept_by_done_and_closed_when_complete(
    tmp_path: Path, fake_agent: FakeAgent
) -> None:
    surface = AskingSurface()
    params = {
        "mode": "url",
        "message": "Sign in to the tracker",
        "url": "https://tracker.example/login?state=abc",
        "elicitationId": "e-1",
    }
    steps = script(
        {"request": {"method": "elicitation/create", "params": params}},
        {"notify": {"method": "elicitation/complete", "params": {"elicitationId": "e-1"}}},
        {"chunk": " signed in"},
    )
    async with running_app(engine_settings(tmp_path, fake_agent), surface):
        turn = surface.post(surface.message("alice", steps))
        shown = await card(surface, 1)
        link, *buttons = shown.choices
        assert (link.label, link.url) == ("Open tracker.example", params["url"])
        assert [c.label for c in buttons] == ["Done", "Decline", "Cancel"]
        assert "Alice" in shown.text and "Sign in to the tracker" in shown.text
        await finished(surface.post(surface.press("alice", token(shown, "Done"))))
        await finished(turn)
        await wait_for(lambda: len(surface.closed()) == 2, "the card closed by the agent")
    assert answered(surface) == {"action": "accept", "content": {}}
    assert surface.closed() == [
        "Done (Alice); waiting for the agent to confirm.",
        "Done: the agent says it is complete.",
    ]


# ---- the cards, pure ----------------------------------------------------------------------------
def _field(name: str, kind: str, **details: Any) -> ElicitationField:
    values: dict[str, Any] = {
        "name": name,
        "title": name.title(),
        "description": "",
        "kind": kind,
        "required": True,
        "choices": (),
        "minimum": None,
        "maximum": None,
        "min_length": None,
        "max_length": None,
        "format": "",
        "default": None,
    }
    return ElicitationField(**(values | details))


def _request(*fields: ElicitationField, message: str = "Pick") -> ElicitationRequest:
    return ElicitationRequest(
        session_id="s",
        mode="form",
        message=message,
        fields=fields,
        url="",
        elicitation_id="",
        tool_call_id="",
    )


def test_a_typed_field_on_a_terminal_says_the_words_that_skip_decline_or_cancel() -> None:
    request = _request(_field("city", "string", required=False, format="email"))
    on_terminal = field_card(request, 0, "you", buttons=False)
    assert on_terminal.wants_text and on_terminal.offers == ()
    assert on_terminal.text.splitlines() == [
        "The agent asks you:",
        "Pick",
        "City (optional)",
        "Reply with an email address.",
        '(Or reply "skip" to leave it out, "decline" to refuse, "cancel" to dismiss the question.)',
    ]
    with_buttons = field_card(request, 0, "you", buttons=True)
    assert [o.value for o in with_buttons.offers] == [SKIP, DECLINE, CANCEL]


def test_a_single_choice_is_buttons_unless_it_has_too_many_options() -> None:
    few = _field("size", "choice", choices=(("s", "Small"), ("l", "Large")))
    card = field_card(_request(few), 0, "you", buttons=False)  # a terminal menu is buttons too
    assert [o.label for o in card.offers] == ["Small", "Large", "Decline", "Cancel"]
    assert button_value(few, card.offers[1].value) == "l"
    many = _field("n", "choice", choices=tuple((str(i), f"N{i}") for i in range(20)))
    typed = field_card(_request(many), 0, "you", buttons=True)
    assert typed.wants_text and "  20. N19" in typed.text


def test_later_cards_carry_the_message_as_one_line_and_a_count() -> None:
    request = _request(
        _field("a", "boolean"), _field("b", "number", minimum=1.5), message="Long\n\nmessage"
    )
    second = field_card(request, 1, "Ann", buttons=True)
    assert second.text.splitlines()[:3] == [
        "The agent asks Ann:",
        "Long message",
        "Question 2 of 2: B",
    ]
    assert "Reply with a number of at least 1.5." in second.text
    assert button_value(request.fields[0], f"{VALUE_PREFIX}false") is False


def test_a_form_without_fields_is_sent_with_one_button_and_a_url_card_names_the_host() -> None:
    empty = field_card(_request(), 0, "you", buttons=True)
    assert [o.value for o in empty.offers] == [OK, DECLINE, CANCEL]
    url = ElicitationRequest(
        session_id="s",
        mode="url",
        message="Sign in",
        fields=(),
        url="https://auth.example/x",
        elicitation_id="e",
        tool_call_id="",
    )
    assert "Open the link to auth.example, then press Done." in url_card(url, "you").text


def test_only_a_reply_that_is_one_of_the_words_is_read_as_it() -> None:
    assert [typed_action(t) for t in ("Skip", " decline. ", "CANCEL!", "cancel it")] == [
        SKIP,
        DECLINE,
        CANCEL,
        None,
    ]


def test_the_recording_surface_has_the_ability_the_broker_looks_for() -> None:
    assert isinstance(AskingSurface(), AsksForText)
