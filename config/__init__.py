"""Settings read by every layer.

`valid_text` is imported at once; the settings (pydantic, tens of MiB) only when first named, so
the agent layer, which needs only `valid_text`, does not pay for a settings model it never reads."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from config.text import valid_text

if TYPE_CHECKING:
    from config.settings import ConfigError, RetrySettings, Settings, load_settings

__all__ = ["ConfigError", "RetrySettings", "Settings", "load_settings", "valid_text"]

_FROM_SETTINGS = frozenset({"ConfigError", "RetrySettings", "Settings", "load_settings"})


def __getattr__(name: str) -> Any:
    if name in _FROM_SETTINGS:
        from config import settings

        return getattr(settings, name)
    raise AttributeError(f"module 'config' has no attribute {name!r}")
