"""Failures a surface reports to the bot, mapped from the platform SDK's own exceptions at the
adapter. The bot decides what to do (wait, retry, give up); the adapter only translates.

::

    SurfaceError
    ├── RateLimited        .retry_after seconds the platform asked us to wait; .recorded once
    │                      a chat's pacer holds the chat back for it (`surfaces.pacing`)
    ├── SendFailed         .transient: worth retrying (network, 5xx) or not (bad request)
    ├── MessageGone        the message to edit no longer exists (deleted, too old)
    ├── PartFailed         .index, .error: `LiveReply.finish` could not show message `index`
    ├── FileRefused        .reason: a file cannot be downloaded or uploaded (too large for the
    │                      platform or for the limit asked, gone, refused); one sentence
    └── LeasesUnavailable  .reason: the cluster's leases cannot be read or taken now (the shared
                           store is unreachable); `ClusterLeases.hold` raises it
"""

from __future__ import annotations


class SurfaceError(Exception):
    pass


class RateLimited(SurfaceError):
    def __init__(self, retry_after: float) -> None:
        self.retry_after = retry_after
        # Set by the first pacer that holds the chat back for this 429, so the layers the
        # exception passes through on its way up do not count it again.
        self.recorded = False
        super().__init__(f"rate limited; retry after {retry_after:g} s")


class SendFailed(SurfaceError):
    def __init__(self, reason: str, *, transient: bool) -> None:
        self.reason = reason
        self.transient = transient
        super().__init__(reason)


class MessageGone(SurfaceError):
    pass


class PartFailed(SurfaceError):
    """`LiveReply.finish` could not show message `index` (a part of the final text, or a blank
    past its end) because of `error`; what the earlier messages show stays shown."""

    def __init__(self, index: int, error: SurfaceError) -> None:
        self.index = index
        self.error = error
        super().__init__(f"message {index + 1} of the reply: {error}")

    @property
    def transient(self) -> bool:
        """Whether trying again may show it: after a 429 (the pacer waits it out), a message
        that was gone (it is sent anew), or a failure the platform calls transient."""
        error = self.error
        if isinstance(error, SendFailed):
            return error.transient
        return isinstance(error, (RateLimited, MessageGone))


class FileRefused(SurfaceError):
    """A file the platform will not hand over or take, or one past the size asked for. `reason`
    is a sentence a person can read ("Telegram does not let bots download files over 20 MB")."""

    def __init__(self, reason: str, *, limit: int | None = None) -> None:
        self.reason = reason
        self.limit = limit
        super().__init__(reason)


class LeasesUnavailable(SurfaceError):
    """The shared store behind `ClusterLeases` did not answer; `reason` says why (no secrets)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"cluster leases unavailable: {reason}")
