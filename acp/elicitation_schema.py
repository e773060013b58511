"""An agent's `elicitation/create` params read defensively into an `ElicitationRequest`: the
agent may be hostile or broken, so every string is made valid and capped (one line where it is
shown as one), the fields and each field's choices are bounded, a property of a type we do not
know is read as text, and a link is kept only when it is http(s).

`ElicitationMalformed` (answered -32602) is for params nobody could answer: not an object, a
form without a schema object, a URL request without its id; `ElicitationRefused` (answered
`decline`, logged) is for one we will not show: a link that is not http(s)."""

from __future__ import annotations

import math
from typing import Any, Final

from acp.elicitation import FORMATS, ElicitationField, ElicitationRequest
from acp.state_parsing import clean
from config import valid_text

MAX_FIELDS: Final = 20
MAX_CHOICES: Final = 50
MAX_MESSAGE: Final = 2000
MAX_TITLE: Final = 100
MAX_DESCRIPTION: Final = 300
MAX_NAME: Final = 100
MAX_VALUE: Final = 500  # a choice's value is sent back verbatim: a longer one is dropped, not cut
MAX_URL: Final = 2048
MAX_ID: Final = 200
MAX_LENGTH_BOUND: Final = 100_000


class ElicitationMalformed(ValueError):
    """The params cannot be read as an elicitation (`what` says why)."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"malformed elicitation/create: {what}")


class ElicitationRefused(ValueError):
    """An elicitation we answer `decline` without showing it (`what` says why)."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"elicitation declined: {what}")


def _message(value: Any) -> str:
    """The question itself: valid text, its line breaks kept (claude's carry paragraphs), capped."""
    if not isinstance(value, str):
        return ""
    text = "\n".join(" ".join(line.split()) for line in valid_text(value).splitlines()).strip()
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1].rstrip() + "…"


def _bound(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _length(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return min(max(int(value), 0), MAX_LENGTH_BOUND)


def _value(value: Any) -> str | None:
    """A choice's value as it must be sent back: a valid string, not too long, else None."""
    if not isinstance(value, str) or not value or len(value) > MAX_VALUE:
        return None
    return value if valid_text(value) == value else None


def _choices(schema: dict[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """`enum` (labels from `enumNames` when given), or `oneOf` / `anyOf` of `{const, title}`;
    None when the schema lists none."""
    pairs: list[tuple[str, str]] = []
    listed = False
    if isinstance(schema.get("enum"), list):
        listed = True
        names = schema.get("enumNames")
        names = names if isinstance(names, list) else []
        for index, raw in enumerate(schema["enum"]):
            value = _value(raw)
            if value is not None:
                name = names[index] if index < len(names) else None
                pairs.append((value, clean(name, MAX_TITLE) or clean(value, MAX_TITLE)))
    else:
        options = schema.get("oneOf")
        options = options if isinstance(options, list) else schema.get("anyOf")
        if isinstance(options, list):
            listed = True
            for option in options:
                if isinstance(option, dict) and (value := _value(option.get("const"))):
                    title = clean(option.get("title"), MAX_TITLE) or clean(value, MAX_TITLE)
                    pairs.append((value, title))
    if not listed:
        return None
    unique = dict(pairs[: MAX_CHOICES * 2])  # a repeated value: its first label
    return tuple(list(unique.items())[:MAX_CHOICES])


def _default(kind: str, value: Any, choices: tuple[tuple[str, str], ...]) -> Any:
    values = {v for v, _ in choices}
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind in ("number", "integer"):
        bound = _bound(value)
        if bound is None or (kind == "integer" and not bound.is_integer()):
            return None
        return int(bound) if kind == "integer" else value
    if kind == "choice":
        return value if value in values else None
    if kind == "choices":
        ok = isinstance(value, list) and all(isinstance(v, str) and v in values for v in value)
        return list(value) if ok else None
    return value if isinstance(value, str) and len(value) <= MAX_MESSAGE else None


def read_field(name: str, schema: Any, required: bool) -> ElicitationField:
    """One property of `requestedSchema`; what we cannot read is a plain text field."""
    if not isinstance(schema, dict):
        schema = {}
    kind = schema.get("type")
    choices: tuple[tuple[str, str], ...] = ()
    low_len, high_len = _length(schema.get("minLength")), _length(schema.get("maxLength"))
    if kind == "array":
        items = schema.get("items")
        listed = _choices(items) if isinstance(items, dict) else None
        if listed:
            kind, choices = "choices", listed
            low_len, high_len = _length(schema.get("minItems")), _length(schema.get("maxItems"))
        else:
            kind = "string"
    elif kind == "string" or kind is None:
        listed = _choices(schema)
        kind, choices = ("choice", listed) if listed else ("string", ())
    elif kind not in ("number", "integer", "boolean"):
        kind = "string"
    fmt = schema.get("format")
    return ElicitationField(
        name=name,
        title=clean(schema.get("title"), MAX_TITLE) or clean(name, MAX_TITLE),
        description=clean(schema.get("description"), MAX_DESCRIPTION),
        kind=kind,
        required=required,
        choices=choices,
        minimum=_bound(schema.get("minimum")) if kind in ("number", "integer") else None,
        maximum=_bound(schema.get("maximum")) if kind in ("number", "integer") else None,
        min_length=low_len if kind in ("string", "choices") else None,
        max_length=high_len if kind in ("string", "choices") else None,
        format=fmt if kind == "string" and fmt in FORMATS else "",
        default=_default(kind, schema.get("default"), choices),
    )


def read_fields(schema: Any) -> tuple[ElicitationField, ...]:
    if not isinstance(schema, dict):
        raise ElicitationMalformed("requestedSchema is not an object")
    properties = schema.get("properties", {})
    if properties is None:
        properties = {}
    if not isinstance(properties, dict):
        raise ElicitationMalformed("requestedSchema.properties is not an object")
    raw_required = schema.get("required")
    listed = raw_required if isinstance(raw_required, list) else []
    required = {name for name in listed if isinstance(name, str)}
    fields: list[ElicitationField] = []
    for name, prop in properties.items():
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            if name in required:
                raise ElicitationMalformed("a required field has an unusable name")
            continue
        if valid_text(name) != name:
            raise ElicitationMalformed("a field's name is not valid text")
        if len(fields) == MAX_FIELDS:
            if required - {f.name for f in fields}:
                raise ElicitationMalformed(f"more than {MAX_FIELDS} fields, some required")
            break
        fields.append(read_field(name, prop, name in required))
    return tuple(fields)


def _plain(value: Any, limit: int) -> str:
    """An id: a valid string within `limit`, else ""."""
    if not isinstance(value, str) or len(value) > limit or valid_text(value) != value:
        return ""
    return value


def read_url(value: Any) -> str:
    """An http(s) link with a host, without spaces or control characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_URL:
        raise ElicitationRefused("the link is missing or too long")
    if valid_text(value) != value or any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise ElicitationRefused("the link holds spaces or control characters")
    scheme, _, rest = value.partition(":")
    if scheme.lower() not in ("http", "https") or not rest.startswith("//") or len(rest) < 3:
        raise ElicitationRefused(f"the link's scheme is {clean(scheme, 20)!r}, not http(s)")
    return value


def read_elicitation(params: Any) -> ElicitationRequest:
    """The request `params` describe. Raises ElicitationMalformed or ElicitationRefused."""
    if not isinstance(params, dict):
        raise ElicitationMalformed("params are not an object")
    mode = params.get("mode")
    if mode is None:  # MCP's default
        mode = "form" if "requestedSchema" in params else "url" if "url" in params else None
    if mode not in ("form", "url"):
        raise ElicitationRefused(f"mode {clean(mode, 40) or 'missing'!r} is not supported")
    session_id = _plain(params.get("sessionId"), MAX_ID)
    tool_call_id = _plain(params.get("toolCallId"), MAX_ID)
    message = _message(params.get("message"))
    if mode == "form":
        fields = read_fields(params.get("requestedSchema"))
        return ElicitationRequest(session_id, "form", message, fields, tool_call_id=tool_call_id)
    elicitation_id = _plain(params.get("elicitationId"), MAX_ID)
    if not elicitation_id:
        raise ElicitationMalformed("a URL elicitation has no elicitationId")
    url = read_url(params.get("url"))
    return ElicitationRequest(
        session_id,
        "url",
        message,
        url=url,
        elicitation_id=elicitation_id,
        tool_call_id=tool_call_id,
    )
