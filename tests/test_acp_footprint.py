"""The agent layer loads only what it uses: `config.valid_text` without the pydantic settings
model (tens of MiB that an ACP client never reads), while `config.Settings` and friends still
resolve for the layers that need them."""

from __future__ import annotations

import subprocess
import sys

import config


def test_importing_acp_does_not_load_the_settings_model() -> None:
    code = (
        "import sys; import acp, acp.client, acp.runtime, acp.session_handle; "
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', "
        "'pydantic_settings') or m == 'config.settings'); print(loaded); "
        "sys.exit(1 if loaded else 0)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_config_still_names_its_settings() -> None:
    from config.settings import ConfigError, RetrySettings, Settings, load_settings

    assert config.Settings is Settings
    assert config.RetrySettings is RetrySettings
    assert config.ConfigError is ConfigError
    assert config.load_settings is load_settings
    assert sorted(config.__all__) == sorted(
        ["ConfigError", "RetrySettings", "Settings", "load_settings", "valid_text"]
    )


def test_a_turns_text_keeps_few_strings_and_reads_back_exactly() -> None:
    import random

    from acp.growing_text import GrowingText

    rng = random.Random(7)
    text, chunks = GrowingText(), []
    assert not text and len(text) == 0 and str(text) == "" and text.tail(2) == ""
    for n in range(20_000):
        chunk = rng.choice(["", " ", "\n", "x", "ab", "é😀", f"{n}"])
        chunks.append(chunk)
        text.append(chunk)
        if n % 997 == 0:
            whole = "".join(chunks)
            assert str(text) == whole and len(text) == len(whole)
            assert text.tail(1) == whole[-1:] and text.tail(5) == whole[-5:]
            assert text.visible == bool(whole.strip())
    assert str(text) == "".join(chunks)
    assert sum(len(level) for level in text._levels) < 64 * len(text._levels)
