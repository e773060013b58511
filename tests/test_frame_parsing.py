"""`parse_line` answers exactly as `json.loads` does: msgspec for the usual frame, the stdlib for
whatever msgspec rejects, so a value, or an error, never depends on which parser took the line."""

from __future__ import annotations

import json
from typing import Any

import pytest

from acp._frame_parsing import parse_line

LINES = [
    b'{"jsonrpc":"2.0","method":"session/update","params":{"update":{"text":"x"}}}',
    b'{"id":123456789012345678901234567890,"result":null}',  # beyond 64 bits: still an int
    b'{"id":-9223372036854775809}',
    b'{"a":1,"a":2}',
    b'{"a":0.1,"b":-0.0,"c":1E5,"d":-0}',
    b'{"a":1e400}',  # the stdlib reads inf
    b'{"a":NaN,"b":-Infinity}',
    b'{"a":"\\ud800"}',  # a lone surrogate escape
    b'{"a":"\xed\xa0\x80"}',  # a surrogate encoded as bytes (json.loads passes it)
    b'{"a":"\\ud83d\\ude00"}',
    b'\xef\xbb\xbf{"a":1}',  # a UTF-8 BOM
    '{"a":"é"}'.encode("utf-16"),
    b' {"a":1} \r',
    b"[1,2]",
    b'"text"',
    b"null",
    b"",
    b"not json",
    b'{"a":1}x',
    b'{"a":"x\x01"}',  # a raw control character
    b'{"a":"\xff"}',  # invalid UTF-8
    b'{"a":1,}',
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
]


def _outcome(parse: Any, line: bytes) -> tuple[str, Any]:
    try:
        return "value", repr(parse(line))
    except (ValueError, RecursionError) as exc:
        return "error", (type(exc), str(exc))


@pytest.mark.parametrize("line", LINES, ids=range(len(LINES)))
def testparse_line_matches_json_loads(line: bytes) -> None:
    assert _outcome(parse_line, line) == _outcome(json.loads, line)


def test_big_integers_keep_their_type() -> None:
    assert type(parse_line(b'{"id":18446744073709551616}')["id"]) is int
