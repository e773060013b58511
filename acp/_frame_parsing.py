"""One line of the agent's stdout -> the JSON value on it, exactly as `json.loads` would give it.

Every frame an agent sends passes here, so the usual frame takes the fastest parser there is
(msgspec), and the stdlib keeps the last word on everything msgspec refuses: an agent's odd but
legal line must mean what it always meant."""

from __future__ import annotations

import json
from typing import Any

import msgspec

_fast_decode = msgspec.json.Decoder().decode
_raw_decode = json.JSONDecoder().raw_decode


def parse_line(line: bytes) -> Any:
    """`json.loads(line)`: the same value, or the same error, only faster for the usual frame.

    msgspec decodes a well-formed UTF-8 frame several times faster than the stdlib, to the same
    Python values (big integers stay ints). What it rejects, json.loads may still accept: lone
    surrogates in `\\u` escapes or encoded as bytes, NaN and Infinity, out-of-range floats, a BOM,
    UTF-16 and UTF-32. Those lines go to the stdlib, so results and errors match json.loads
    (even a nesting too deep for either, which both report as RecursionError, in its words)."""
    try:
        return _fast_decode(line)
    except (ValueError, RecursionError):  # msgspec.DecodeError is a ValueError
        pass
    return _stdlib_parse_line(line)


def _stdlib_parse_line(line: bytes) -> Any:
    """`json.loads(line)`, minus its per-call overhead for a line that starts with `{"` (so
    json.loads would pick UTF-8) and ends where the JSON value ends. Any other line, or one the
    shortcut cannot finish, goes to json.loads itself."""
    if line.startswith(b'{"'):
        try:
            text = line.decode("utf-8", "surrogatepass")
            value, end = _raw_decode(text)
        except ValueError:
            pass
        else:
            if end == len(text):
                return value
    return json.loads(line)
