"""Platform adapters. Each is one package (`__init__.create_surface`, `adapter.py` — the only file
that calls the SDK — and `convert.py`, pure conversions) speaking the neutral types of `base.py`."""

from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    MessageRef,
    Surface,
    SurfaceCapabilities,
    UserRef,
    count_chars,
    count_utf16,
)
from surfaces.errors import MessageGone, RateLimited, SendFailed, SurfaceError

__all__ = [
    "Choice",
    "ChoiceAnswer",
    "ConversationKey",
    "Inbound",
    "MessageGone",
    "MessageRef",
    "RateLimited",
    "SendFailed",
    "Surface",
    "SurfaceCapabilities",
    "SurfaceError",
    "UserRef",
    "count_chars",
    "count_utf16",
]
