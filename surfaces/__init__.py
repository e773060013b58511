"""Platform adapters speaking the neutral types of `base.py`; they import neither `bot/` nor `acp/`.

A chat surface is one package, `surfaces/<name>/`:

- `__init__.py`: `ENTRY = SurfaceEntry(...)` (`plugin.py`): its name, the settings that turn it
  on, how to build it from `Settings`, its token shapes for `doctor`; its settings section holds
  its access lists. It imports no SDK: `build` imports the adapter when called.
- `adapter.py`: the `Surface` itself; it and the package's other modules (one per large
  subsystem: Telegram's live replies, Slack native streams, Discord interaction followups; an
  `errors.py` with the SDK's error table) are the only code that calls the SDK.
- `convert.py`: pure conversions (platform payloads <-> neutral types, Markdown -> dialect).

The kit, shared by every adapter:

- `lanes.py` `Lanes`: one conversation's events to the bot in order, conversations concurrent.
- `pacing.py` `Pacing`/`ChatPacer`/`GroupWindow`/`GlobalBudget`: who paces what, and the 429s;
  a surface's `capabilities.pacing` gives each chat the one gate its platform calls pass.
- `live.py` `EditedLive`: the default `LiveReply` (`open_live`), a reply shown live by `send`
  and `edit`.
- `platform_errors.py` `ErrorMap`, `retry_after`: an SDK's exceptions -> `errors.py`, one table.
- `startup.py` `retry_start_up`: the first call retried over network trouble.
- `bounded.py` `BoundedMap`: what an adapter remembers, capped.
- `text.py` `ellipsize`, `escape_angle_brackets`: shortening and escaping.
- `recovered_faults.py` `RecoveredFaults`: an SDK's noisy retry logs as one WARNING line.
- `downloads.py` `read_within`: a file download cut off as soon as it passes the limit asked.

Every adapter has the same shape. Its constructor is `XSurface(settings: XSettings, *, ...)`: the
settings section first, then keyword-only knobs (intervals, timeouts) whose defaults are the
production values. Its class then has these sections, in this order, each under a
`# ---- <section> ---` comment:

1. capabilities: `__init__` (the `SurfaceCapabilities` and its `Pacing`), `render`,
   `command_menu`;
2. lifecycle: `run`, `close`, and connecting;
3. inbound: the SDK's callbacks, turned into `Inbound` (through `Lanes`) and `ChoiceAnswer`;
4. outbound: `send`, `edit`, `send_file`, `open_live`, `typing`;
5. choices: `ask_choice`, `close_choice`;
6. helpers: the private calls the sections above share (one platform call, translated and
   paced)."""

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
