"""Settings read by every layer."""

from config.settings import ConfigError, RetrySettings, Settings, load_settings

__all__ = ["ConfigError", "RetrySettings", "Settings", "load_settings"]
