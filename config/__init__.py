"""Settings read by every layer."""

from config.settings import ConfigError, RetrySettings, Settings, load_settings
from config.text import valid_text

__all__ = ["ConfigError", "RetrySettings", "Settings", "load_settings", "valid_text"]
