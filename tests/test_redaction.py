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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis://:s3cret-pw@redis:6379/0", "redis://:***@redis:6379/0"),
        (
            "rediss://switchboard:p%40ss:w0rd@cache.internal:6380/1",
            "rediss://switchboard:***@cache.internal:6380/1",
        ),
        (
            "connecting to postgres://app:hunter2@db/main",
            "connecting to postgres://app:***@db/main",
        ),
        ("amqp+ssl://u:x@q and redis://:y@r", "amqp+ssl://u:***@q and redis://:***@r"),
        ('{"url":"redis://:pw@h:1/0"}', '{"url":"redis://:***@h:1/0"}'),
    ],
)
def test_the_password_of_a_url_of_any_scheme_is_starred(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "http://127.0.0.1:8765/healthz",
        "http://host:8080/path@name",  # no user part: a port and an @ in the path
        "mailto:someone@example.com",
        "redis://redis:6379/0",
        '{"url":"http://x","user":"y@z"}',  # a quote ends a URL in JSON
    ],
)
def test_a_url_without_a_password_is_left_alone(text: str) -> None:
    assert redact(text) == text


SHA256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"dashboard digest {SHA256} for alice", "dashboard digest [redacted] for alice"),
        (f"{{'alice': '{SHA256.upper()}'}}", "{'alice': '[redacted]'}"),
        ("sha1 " + "a1" * 20, "sha1 [redacted]"),
        ("sha512 " + "0f" * 64, "sha512 [redacted]"),
        ("X-Hub-Signature-256: sha256=9f86d081884c7d65", "X-Hub-Signature-256: sha256=[redacted]"),
        (f"X-Slack-Signature: v0={SHA256}", "X-Slack-Signature: v0=[redacted]"),
    ],
)
def test_hex_digests_and_signatures_are_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "session 0c9a4d7e-3b1f-4a52-9e2d-8f6b1c2a3d4e resumed",  # session ids are dashed UUIDs
        "turn 0c9a4d7e3b1f4a529e2d8f6b1c2a3d4e",  # 32 hex digits: a UUID without dashes
        "abc " + "a" * 63,  # neither 40, 64 nor 128
        "x" + SHA256,  # part of a longer word
        "C" * 64,  # letters alone, or digits alone, are no digest
        "1" * 40,
    ],
)
def test_identifiers_that_are_not_digests_stay(text: str) -> None:
    assert redact(text) == text
