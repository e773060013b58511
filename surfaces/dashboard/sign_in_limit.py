"""How many wrong access tokens the dashboard takes, and from whom (issue 21).

Every sign-in is counted against its address before its token is checked, and the count, the
check and the verdict happen in one step with nothing awaited in between: sign-ins sent at once
cannot all pass the check before any of them is counted (`SignInLimiter.attempt`).

A person's lock-out must not lock out everyone who shares their address (a reverse proxy, an
office's NAT), so failures are counted two ways:

- by address, for tokens that are not valid: past `attempts` wrong tokens within `window`
  seconds, further wrong tokens from that address are answered 429 until the oldest failure
  leaves the window. A valid token is not held by its address's failures;
- by user, for a valid token that still does not sign in (its user is on no access list): past
  `attempts` such refusals, that user's token is answered 429 from anywhere.

So the right token signs in whoever did not fail, however many wrong ones were sent from the same
address. What this gives up: a held address still learns whether a token is valid (200 or 429).
The tokens `switchboard dashboard-token` prints carry 256 random bits, which no number of guesses
finds; the hold is there to stop one address from hammering the check and the log."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from surfaces.bounded import BoundedMap

__all__ = ["Outcome", "SignInLimiter", "Verdict"]

REMEMBERED = 10_000  # addresses and users with recent failures


class Outcome(enum.Enum):
    SIGNED_IN = "signed in"
    WRONG = "wrong token"
    NOT_LISTED = "user on no access list"
    HELD = "held: too many wrong tokens"


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    user: str | None = None  # whose token it was, when it was someone's


# A token -> its user (None: no one's) and whether that user may sign in.
TokenCheck = Callable[[str], tuple[str | None, bool]]


@dataclass(slots=True)
class SignInLimiter:
    attempts: int = 5
    window: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _failures: BoundedMap[str, list[float]] = field(init=False)

    def __post_init__(self) -> None:
        self._failures = BoundedMap(REMEMBERED)

    def attempt(self, address: str, token: str, check: TokenCheck) -> Verdict:
        """Count this sign-in against `address`, then check its token, then decide. Synchronous
        on purpose: the check and the count cannot be split by another sign-in."""
        by_address = f"address:{address}"
        address_held = self._held(by_address)
        self._count(by_address)  # a failure until the token proves right
        user, listed = check(token)
        if user is None and not address_held:
            return Verdict(Outcome.WRONG)
        self._uncount(by_address)  # a right token, or one refused already: the window stays
        if user is None:
            return Verdict(Outcome.HELD)
        by_user = f"user:{user}"
        if self._held(by_user):
            return Verdict(Outcome.HELD, user)
        if not listed:
            self._count(by_user)
            return Verdict(Outcome.NOT_LISTED, user)
        return Verdict(Outcome.SIGNED_IN, user)

    def _recent(self, bucket: str) -> list[float]:
        cutoff = self.clock() - self.window
        recent = [at for at in self._failures.get(bucket, []) if at > cutoff]
        if recent:
            self._failures[bucket] = recent
        else:
            self._failures.pop(bucket, None)
        return recent

    def _held(self, bucket: str) -> bool:
        return len(self._recent(bucket)) >= self.attempts

    def _count(self, bucket: str) -> None:
        self._failures.remember(bucket, [*self._recent(bucket), self.clock()])

    def _uncount(self, bucket: str) -> None:
        recent = self._recent(bucket)
        if recent:
            recent.pop()
        if not recent:
            self._failures.pop(bucket, None)
