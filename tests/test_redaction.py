"""`acp.redact`: credentials go, the words around them stay, and identifiers that merely start
with a credential's name (a logger name, a module path) are left alone."""

from __future__ import annotations

import pytest

from acp import redact, redact_links


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("token=abcdefghijklmnop", "token=[redacted]"),
        ("Bearer abcdefghijklmnop", "Bearer [redacted]"),
        (
            "authorization: Bearer abcdefghijklmnopqrstuvwxyz012345",
            "authorization: Bearer [redacted]",
        ),
        ('"apiKey": "abcdefghijklmnop"', '"apiKey": "[redacted]"'),
        ("api_key=abcdefghijklmnop", "api_key=[redacted]"),
        ("password:abcdefghijklmnop", "password:[redacted]"),
        ("{'token': 'abcdefghijklmnopq'}", "{'token': '[redacted]'}"),
        ("x-api-key: abcdefghijklmnopq", "x-api-key: [redacted]"),
    ],
)
def test_a_named_credential_after_its_separator_is_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "slack_bolt.middleware.authorization.async_multi_teams_authorization",
        "tokenizer_configuration_file",
        "secretsmanager_client_factory",
    ],
)
def test_an_identifier_that_starts_with_a_credential_name_is_not_redacted(text: str) -> None:
    assert redact(text) == text


def test_links_go_with_the_credentials() -> None:
    assert redact_links("see https://h.example/x?k=1 token=abcdefghijklmnop") == (
        "see [link removed] token=[redacted]"
    )
