"""Whether a signed request Slack posts in HTTP mode has the shape bolt and the adapter read.

Bolt reads a request's fields as Slack documents them and raises on anything else (an `event`
that is a list, an `actions` entry that is a number, a `type` that is not a string), which
aiohttp would answer 500 with a traceback in the log. A signed request is from someone holding
the signing secret, but its body is still input: `problem` names the first field that is not
what Slack sends, so the receiver can answer 400 with one WARNING line instead. Absent and null
fields are left to bolt and the adapter, which read them with defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["problem"]

_OBJECT = "an object"
_STRING = "a string"
_LIST = "a list of objects"
_OBJECT_OR_STRING = "an object or a string"

# The top level of an Events API body or an interactivity payload.
_TOP: Mapping[str, str] = {
    "type": _STRING,
    "token": _STRING,
    "team_id": _STRING,
    "api_app_id": _STRING,
    "event_id": _STRING,
    "callback_id": _STRING,
    "trigger_id": _STRING,
    "response_url": _STRING,
    "event": _OBJECT,
    "authorizations": _LIST,
    "actions": _LIST,
    "user": _OBJECT_OR_STRING,
    "channel": _OBJECT_OR_STRING,
    "team": _OBJECT_OR_STRING,
    "enterprise": _OBJECT_OR_STRING,
    "container": _OBJECT,
    "message": _OBJECT,
    "view": _OBJECT,
}
_EVENT: Mapping[str, str] = {
    "type": _STRING,
    "subtype": _STRING,
    "text": _STRING,
    "user": _OBJECT_OR_STRING,  # an object in user_change, team_join
    "bot_id": _STRING,
    "channel": _OBJECT_OR_STRING,  # an object in channel_created, channel_rename
    "channel_type": _STRING,
    "ts": _STRING,
    "thread_ts": _STRING,
    "event_ts": _STRING,
    "tab": _STRING,
    "files": _LIST,
    "message": _OBJECT,
}
_ACTION: Mapping[str, str] = {
    "type": _STRING,
    "action_id": _STRING,
    "block_id": _STRING,
    "value": _STRING,
    "action_ts": _STRING,
}
_NESTED: Mapping[str, Mapping[str, str]] = {"event": _EVENT, "actions": _ACTION}


def _is(value: Any, kind: str) -> bool:
    if kind == _STRING:
        return isinstance(value, str)
    if kind == _OBJECT:
        return isinstance(value, dict)
    if kind == _OBJECT_OR_STRING:
        return isinstance(value, dict | str)
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def _fields(where: str, body: Mapping[str, Any], fields: Mapping[str, str]) -> str:
    for name, kind in fields.items():
        value = body.get(name)
        if value is not None and not _is(value, kind):
            return f"{where}{name} is not {kind}"
    return ""


def problem(body: object) -> str:
    """What is wrong with a parsed request body, in words ("" when nothing is)."""
    if not isinstance(body, dict):
        return "the body is not an object"
    found = _fields("", body, _TOP)
    if found:
        return found
    for name, fields in _NESTED.items():
        value = body.get(name)
        items = value if isinstance(value, list) else [value] if value is not None else []
        for item in items:
            if found := _fields(f"{name}.", item, fields):
                return found
    return ""
