"""ACP elicitation (issue 24): the agent's questions (`elicitation/create`) reach the running turn as
an ELICITATION event and the person's answer goes back as the agent's reply, against the scripted
fake agent; what cannot be asked is answered by acp itself (malformed -32602, a non-http(s) link
`decline`, no turn `cancel`); and the schema read defensively, a person's text read by
`ElicitationField.read` (pure)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp import (
    ELICITATION_ACCEPT,
    ELICITATION_CANCEL,
    ELICITATION_DECLINE,
    AcpEvent,
    AcpSession,
    ElicitationAnswer,
    ElicitationField,
    ElicitationInvalid,
    EventKind,
    PendingElicitation,
)
from acp.elicitation_schema import (
    ElicitationMalformed,
    ElicitationRefused,
    read_elicitation,
    read_fields,
)
from tests.acp_helpers import agent_spec, collect_turn, open_test_client, texts
from tests.conftest import FakeAgent, script

WAIT = 30  # seconds: an upper bound, never a measurement

# What claude-agent-acp 0.101.0 sends for an AskUserQuestion tool with one question
# (dist/elicitation.js `askUserQuestionsToCreateRequest`).
ASK_USER_QUESTION = {
    "mode": "form",
    "toolCallId": "toolu_01",
    "message": "Which database should I use?",
    "requestedSchema": {
        "type": "object",
        "properties": {
            "question_0": {
                "type": "string",
                "title": "Database",
                "oneOf": [
                    {"const": "Postgres", "title": "Postgres", "description": "relational"},
                    {"const": "SQLite", "title": "SQLite"},
                ],
            },
            "question_0_custom": {
                "type": "string",
                "title": "Other",
                "description": "Type your own answer, or add a note to the option you chose.",
            },
        },
    },
}

# An MCP server's OAuth sign-in as claude forwards it (dist/elicitation.js, url mode).
SIGN_IN = {
    "mode": "url",
    "message": "Sign in to Linear",
    "url": "https://linear.app/oauth/authorize?client_id=abc",
    "elicitationId": "mcp-oauth-1",
}


def _ask(params: dict[str, Any]) -> dict[str, Any]:
    return {"request": {"method": "elicitation/create", "params": params}}


def _replies(events: list[AcpEvent]) -> list[Any]:
    return [json.loads(t[len("reply:") :]) for t in texts(events) if t.startswith("reply:")]


async def _turn(
    session: AcpSession, prompt: str, answer: Any = None
) -> tuple[list[AcpEvent], list[PendingElicitation]]:
    """One turn; each question answered by `answer(pending)` (an ElicitationAnswer, or an
    awaitable of one); without `answer`, left open."""
    asked: list[PendingElicitation] = []

    async def on_event(event: AcpEvent) -> None:
        if event.kind is EventKind.ELICITATION:
            assert event.elicitation is not None
            asked.append(event.elicitation)
            if answer is not None:
                result = answer(event.elicitation)
                if inspect.isawaitable(result):
                    result = await result
                event.elicitation.respond(result)

    events = await collect_turn(session, prompt, on_event=on_event)
    return events, asked


def _answers_sent(agent: FakeAgent) -> list[dict[str, Any]]:
    """Our replies to the agent's requests, in order."""
    return [f for f in agent.frames_in() if "method" not in f]


# ---- through the turn --------------------------------------------------------------------------
@pytest.mark.anyio
async def test_claudes_question_reaches_the_turn_and_the_answer_is_the_agents_reply(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="claude")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events, asked = await _turn(
                session,
                script({"chunk": "let me ask"}, _ask(ASK_USER_QUESTION), {"chunk": "thanks"}),
                lambda p: ElicitationAnswer(ELICITATION_ACCEPT, {"question_0": "SQLite"}),
            )
    (pending,) = asked
    request = pending.request
    assert request.session_id == session.session_id
    assert (request.mode, request.tool_call_id) == ("form", "toolu_01")
    assert request.message == "Which database should I use?"
    choice, other = request.fields
    assert (choice.name, choice.title, choice.kind) == ("question_0", "Database", "choice")
    assert choice.choices == (("Postgres", "Postgres"), ("SQLite", "SQLite"))
    assert (other.kind, other.title, other.required) == ("string", "Other", False)
    assert _replies(events) == [
        {"result": {"action": "accept", "content": {"question_0": "SQLite"}}}
    ]
    kinds = [e.kind for e in events]
    assert kinds.index(EventKind.ELICITATION) < kinds.index(EventKind.TERMINAL)
    assert texts(events)[0] == "let me ask" and texts(events)[-1] == "thanks"


@pytest.mark.anyio
@pytest.mark.parametrize("action", [ELICITATION_DECLINE, ELICITATION_CANCEL])
async def test_a_declined_or_cancelled_question_says_so_without_content(
    fake_agent: FakeAgent, workspace: Path, action: str
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events, _ = await _turn(
                session,
                script(_ask(ASK_USER_QUESTION)),
                lambda p: ElicitationAnswer(action, {"question_0": "typed but declined"}),
            )
    assert _replies(events) == [{"result": {"action": action}}]


@pytest.mark.anyio
async def test_a_question_left_open_when_the_turn_is_cancelled_is_answered_cancel(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            asked: list[PendingElicitation] = []

            async def on_event(event: AcpEvent) -> None:
                if event.kind is EventKind.ELICITATION:
                    assert event.elicitation is not None
                    asked.append(event.elicitation)
                    await session.cancel()  # /stop while the question is open

            events = await collect_turn(session, script(_ask(ASK_USER_QUESTION)), on_event=on_event)
            # our answer is on its way to the agent when the turn ends: wait for it to land
            while not _answers_sent(fake_agent):
                await anyio.sleep(0.02)
    (pending,) = asked
    assert pending.answered and pending.answer == ElicitationAnswer(ELICITATION_CANCEL)
    assert events[-1].stats is not None and events[-1].stats.stop_reason == "cancelled"
    (sent,) = _answers_sent(fake_agent)
    assert sent["result"] == {"action": "cancel"}


@pytest.mark.anyio
async def test_a_question_outside_a_turn_is_answered_cancel(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            # asked after the prompt was answered: no turn is running any more
            events, asked = await _turn(
                session, script({"stop": "end_turn"}, _ask(ASK_USER_QUESTION))
            )
            while not _answers_sent(fake_agent):
                await anyio.sleep(0.02)
    assert asked == [] and EventKind.ELICITATION not in [e.kind for e in events]
    (sent,) = _answers_sent(fake_agent)
    assert sent["result"] == {"action": "cancel"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "file:///etc/passwd",
        "data:text/html,<b>hi</b>",
        "ftp://example.com/x",
        "https://exa mple.com/",
        "https://example.com/\x00",
        "https:/missing-slash.example",
        "",
        42,
        "https://example.com/" + "a" * 3000,
    ],
)
async def test_a_link_that_is_not_http_is_declined_and_never_shown(
    fake_agent: FakeAgent, workspace: Path, url: Any
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events, asked = await _turn(session, script(_ask({**SIGN_IN, "url": url})))
    assert asked == []
    assert _replies(events) == [{"result": {"action": "decline"}}]


@pytest.mark.anyio
@pytest.mark.parametrize("with_session", [True, False])
async def test_elicitation_complete_marks_the_link_done_after_it_was_answered(
    fake_agent: FakeAgent, workspace: Path, with_session: bool
) -> None:
    complete: dict[str, Any]
    if with_session:  # the fake fills the sessionId in: it reaches the session's inbox
        complete = {
            "notify": {"method": "elicitation/complete", "params": {"elicitationId": "mcp-oauth-1"}}
        }
    else:  # as the spec sends it: no sessionId
        frame = {
            "jsonrpc": "2.0",
            "method": "elicitation/complete",
            "params": {"elicitationId": "mcp-oauth-1"},
        }
        complete = {"raw": json.dumps(frame)}
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events, asked = await _turn(
                session,
                script(
                    _ask(SIGN_IN),
                    {
                        "notify": {
                            "method": "elicitation/complete",
                            "params": {"elicitationId": "other"},
                        }
                    },
                    complete,
                    {"chunk": "signed in"},
                ),
                lambda p: ElicitationAnswer(ELICITATION_ACCEPT),
            )
            (pending,) = asked
            await pending.completed.wait()
    assert pending.is_complete
    request = pending.request
    assert (request.mode, request.url, request.elicitation_id) == (
        "url",
        SIGN_IN["url"],
        "mcp-oauth-1",
    )
    assert request.fields == () and request.message == "Sign in to Linear"
    assert _replies(events) == [{"result": {"action": "accept", "content": {}}}]
    assert texts(events)[-1] == "signed in"


@pytest.mark.anyio
async def test_a_question_the_agent_withdraws_stops_waiting(
    fake_agent: FakeAgent, workspace: Path, tmp_path: Path
) -> None:
    go = tmp_path / "withdraw-now"
    spec = agent_spec(fake_agent, workspace, dialect="generic")

    async def never_answered(pending: PendingElicitation) -> ElicitationAnswer:
        go.write_text("now")
        return await pending.wait()  # ends only because the agent withdrew it

    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            steps = script(
                {
                    "withdraw": {"method": "elicitation/create", "params": ASK_USER_QUESTION},
                    "when_file": str(go),
                },
                {"chunk": "moving on"},
            )
            events, asked = await _turn(session, steps, never_answered)
    (pending,) = asked
    assert pending.withdrawn and pending.answer == ElicitationAnswer(ELICITATION_CANCEL)
    said = [t for t in texts(events) if t.startswith("withdrawn:")]
    assert said == ['withdrawn:{"error":{"code":-32800,"message":"Request cancelled"}}']
    assert texts(events)[-1] == "moving on"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "params",
    [
        {"mode": "form", "message": "x", "requestedSchema": "a form"},
        {"mode": "form", "message": "x", "requestedSchema": {"properties": ["a", "b"]}},
        {"mode": "url", "message": "x", "url": "https://example.com"},  # no elicitationId
        {
            "mode": "form",
            "message": "x",
            "requestedSchema": {
                "properties": {f"f{i}": {"type": "string"} for i in range(25)},
                "required": ["f24"],
            },
        },
    ],
)
async def test_a_malformed_question_is_answered_invalid_params(
    fake_agent: FakeAgent, workspace: Path, params: dict[str, Any]
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events, asked = await _turn(session, script(_ask(params), {"chunk": "still here"}))
    assert asked == []
    (reply,) = _replies(events)
    assert reply["error"]["code"] == -32602
    assert texts(events)[-1] == "still here"


@pytest.mark.anyio
async def test_a_question_in_a_mode_we_do_not_know_is_declined(
    fake_agent: FakeAgent, workspace: Path
) -> None:
    spec = agent_spec(fake_agent, workspace, dialect="generic")
    with anyio.fail_after(WAIT):
        async with open_test_client(spec) as client:
            session = await client.open_session()
            events, asked = await _turn(
                session, script(_ask({"mode": "_vendor_wizard", "message": "x"}))
            )
    assert asked == []
    assert _replies(events) == [{"result": {"action": "decline"}}]


# ---- the schema, read defensively ----------------------------------------------------------------
def _form(properties: Any, required: Any = None, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    return {"mode": "form", "sessionId": "s", "message": "m", "requestedSchema": schema, **extra}


def test_every_kind_of_property_is_read() -> None:
    request = read_elicitation(
        _form(
            {
                "name": {"type": "string", "minLength": 2, "maxLength": 20, "default": "Ann"},
                "email": {"type": "string", "format": "email"},
                "when": {"type": "string", "format": "date-time"},
                "odd_format": {"type": "string", "format": "hostname"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
                "ratio": {"type": "number", "minimum": 0.5, "maximum": 2.5},
                "ok": {"type": "boolean", "default": True},
                "color": {"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"]},
                "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}]},
                "tags": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 2,
                    "items": {"type": "string", "enum": ["a", "b", "c"]},
                },
                "picks": {"type": "array", "items": {"anyOf": [{"const": "x", "title": "X"}]}},
            },
            required=["name", "age", "nope", 7],
        )
    )
    by = {f.name: f for f in request.fields}
    assert [f.kind for f in request.fields] == [
        "string",
        "string",
        "string",
        "string",
        "integer",
        "number",
        "boolean",
        "choice",
        "choice",
        "choices",
        "choices",
    ]
    assert (by["name"].min_length, by["name"].max_length, by["name"].default) == (2, 20, "Ann")
    assert by["name"].required and by["age"].required and not by["email"].required
    assert (by["email"].format, by["when"].format, by["odd_format"].format) == (
        "email",
        "date-time",
        "",
    )
    assert (by["age"].minimum, by["age"].maximum, by["age"].default) == (0, 150, 30)
    assert (by["ratio"].minimum, by["ratio"].maximum) == (0.5, 2.5)
    assert by["ok"].default is True
    assert by["color"].choices == (("r", "Red"), ("g", "Green"))
    assert by["size"].choices == (("s", "Small"),)
    assert by["tags"].choices == (("a", "a"), ("b", "b"), ("c", "c"))
    assert (by["tags"].min_length, by["tags"].max_length) == (1, 2)
    assert by["picks"].choices == (("x", "X"),)


def test_what_cannot_be_read_is_a_text_field_and_strings_are_cleaned() -> None:
    (unknown, bare, not_object, bad_bounds, untyped_array) = read_fields(
        {
            "properties": {
                "unknown": {"type": "_vendor_colour", "title": "Colour\nof\x1b[31m it"},
                "bare": {},
                "not_object": "string please",
                "bad_bounds": {
                    "type": "integer",
                    "minimum": "0",
                    "maximum": float("inf"),
                    "default": 2.5,
                },
                "untyped_array": {"type": "array", "items": {"type": "string"}},
            }
        }
    )
    assert (
        unknown.kind == "string" and unknown.title == "Colour of[31m it"
    )  # one line, the ESC gone
    assert (bare.kind, bare.title) == ("string", "bare")
    assert not_object.kind == "string"
    assert (bad_bounds.minimum, bad_bounds.maximum, bad_bounds.default) == (None, None, None)
    assert untyped_array.kind == "string"


def test_fields_and_choices_are_capped() -> None:
    many = {f"f{i:02}": {"type": "string", "title": "t" * 500} for i in range(30)}
    fields = read_fields({"properties": many})
    assert len(fields) == 20 and all(len(f.title) <= 100 for f in fields)
    choices = read_fields(
        {
            "properties": {
                "c": {
                    "type": "string",
                    "enum": [f"v{i}" for i in range(80)] + ["v1", "\ud800bad", "", 3, "x" * 600],
                }
            }
        }
    )[0].choices
    assert len(choices) == 50 and choices[0] == ("v0", "v0") and choices[-1] == ("v49", "v49")
    (only,) = read_fields(
        {"properties": {"c": {"enum": [3, "\ud800", "ok", "ok"], "enumNames": ["dup", None]}}}
    )
    assert only.choices == (("ok", "ok"),)


def test_the_request_is_read_with_its_scope_and_message() -> None:
    request = read_elicitation(
        {
            **SIGN_IN,
            "sessionId": "s1",
            "toolCallId": "t" * 500,  # not an id we could name: dropped
            "message": "line one\n\n  line   two \x00" + "z" * 3000,
        }
    )
    assert (request.session_id, request.tool_call_id) == ("s1", "")
    assert request.message.startswith("line one\n\nline two")
    assert len(request.message) <= 2000
    # MCP leaves the mode out for a form
    form = read_elicitation({"message": "m", "sessionId": "s", "requestedSchema": {}})
    assert (form.mode, form.fields) == ("form", ())
    with pytest.raises(ElicitationMalformed):
        read_elicitation(["not", "an", "object"])
    with pytest.raises(ElicitationRefused):
        read_elicitation({"message": "m"})  # neither a form nor a link


# ---- a person's text, read by the field -------------------------------------------------------------
def _invalid(field: ElicitationField, text: str) -> str:
    with pytest.raises(ElicitationInvalid) as caught:
        field.read(text)
    assert caught.value.field is field
    return str(caught.value)


def test_a_whole_number_is_read_within_its_bounds() -> None:
    age = ElicitationField("age", "Age", kind="integer", required=True, minimum=0, maximum=150)
    assert age.read(" 42 ") == 42 and age.read("0") == 0 and age.read("+150") == 150
    message = "Age must be a whole number between 0 and 150."
    for text in ("151", "-1", "4.5", "forty", "1_000", "1e2", ""):
        said = _invalid(age, text)
        assert said == ("Age is required." if text == "" else message), text
    assert _invalid(ElicitationField("n", kind="integer", minimum=3), "2") == (
        "n must be a whole number of at least 3."
    )
    assert ElicitationField("n", kind="integer").read("-7") == -7


def test_a_number_is_read_within_its_bounds() -> None:
    ratio = ElicitationField("r", "Ratio", kind="number", minimum=0.5, maximum=2.5)
    assert ratio.read("1.25") == 1.25 and ratio.read("2") == 2 and ratio.read("0,5") == 0.5
    assert ratio.read("") is None  # optional, left empty: left out
    for text in ("3", "0.4", "nan", "inf", "1e999", "two"):
        assert _invalid(ratio, text) == "Ratio must be a number between 0.5 and 2.5.", text
    assert _invalid(ElicitationField("x", kind="number", maximum=1), "2") == (
        "x must be a number of at most 1."
    )


def test_a_boolean_is_yes_or_no() -> None:
    ok = ElicitationField("ok", "Proceed", kind="boolean")
    assert [ok.read(t) for t in ("yes", "Y", "true", "on", "1", "Yes!")] == [True] * 6
    assert [ok.read(t) for t in ("no", "N", "false", "off", "0")] == [False] * 5
    assert _invalid(ok, "maybe") == "Proceed must be yes or no."


def test_a_choice_is_read_by_number_value_or_label() -> None:
    color = ElicitationField(
        "c", "Colour", kind="choice", choices=(("r", "Red"), ("g", "Green"), ("2", "Two"))
    )
    assert color.read("1") == "r" and color.read("2") == "g"  # its number first
    assert color.read("g") == "g" and color.read("Green") == "g" and color.read("RED") == "r"
    assert color.read("Two") == "2"
    assert color.label_of("g") == "Green" and color.label_of("zz") == "zz"
    assert _invalid(color, "4") == "Colour must be one of Red, Green, Two (or its number)."
    assert _invalid(color, "blue") == "Colour must be one of Red, Green, Two (or its number)."
    many = ElicitationField("m", kind="choice", choices=tuple((str(i), f"L{i}") for i in range(20)))
    assert _invalid(many, "x").endswith("L7, … (or its number).")


def test_several_choices_are_read_comma_separated_within_their_bounds() -> None:
    tags = ElicitationField(
        "t",
        "Tags",
        kind="choices",
        choices=(("a", "Alpha"), ("b", "Beta"), ("c", "Gamma")),
        min_length=1,
        max_length=2,
    )
    assert tags.read("1, Beta") == ["a", "b"]
    assert tags.read("alpha, a, 1") == ["a"]  # the same choice once
    assert _invalid(tags, "1,2,3") == "Tags takes a number of choices between 1 and 2."
    assert _invalid(tags, " , ") == "Tags takes a number of choices between 1 and 2."
    assert _invalid(tags, "a, zeta").startswith("Tags must be one of Alpha, Beta, Gamma")


def test_text_is_read_within_its_length_and_format() -> None:
    name = ElicitationField("n", "Name", min_length=2, max_length=5, required=True)
    assert name.read("  Ann ") == "Ann"
    assert _invalid(name, "A") == "Name must be between 2 and 5 characters long."
    assert _invalid(name, "Annabel") == "Name must be between 2 and 5 characters long."
    assert _invalid(name, "   ") == "Name is required."
    email = ElicitationField("e", "Email", format="email")
    assert email.read("a@b.io") == "a@b.io"
    assert _invalid(email, "a@b") == "Email must be an email address."
    uri = ElicitationField("u", "Link", format="uri")
    assert uri.read("https://example.com/x") == "https://example.com/x"
    assert _invalid(uri, "not a link") == "Link must be a link such as https://example.com."
    day = ElicitationField("d", "Day", format="date")
    assert day.read("2026-12-31") == "2026-12-31"
    assert _invalid(day, "31/12/2026") == "Day must be a date such as 2026-12-31."
    when = ElicitationField("w", "When", format="date-time")
    assert when.read("2026-12-31T14:30") == "2026-12-31T14:30"
    assert _invalid(when, "tomorrow") == "When must be a date and time such as 2026-12-31T14:30."
    assert ElicitationField("free").read("anything at all") == "anything at all"
    assert ElicitationField("x", "").title == "x"  # a field without a title is named by its name


def test_an_answer_sends_only_values_the_schema_types_allow() -> None:
    answer = ElicitationAnswer(
        ELICITATION_ACCEPT,
        {
            "a": "x",
            "b": 2,
            "c": 1.5,
            "d": True,
            "e": ["p", "q"],
            "f": {"no": 1},
            "g": [1],
            "h": None,
        },
    )
    assert answer.wire() == {
        "action": "accept",
        "content": {"a": "x", "b": 2, "c": 1.5, "d": True, "e": ["p", "q"]},
    }
    assert ElicitationAnswer("maybe").wire() == {"action": "cancel"}
    assert ElicitationAnswer(ELICITATION_DECLINE, {"a": "x"}).wire() == {"action": "decline"}
