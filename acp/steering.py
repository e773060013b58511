"""Steering: a message injected into the turn an agent is running, through the method the agent
advertises for it (claude-agent-acp: `_meta.steering.supported` in its `initialize` answer,
request `_session/steering` `{sessionId, prompt}`).

An agent that does not advertise steering is never sent the method. The request carries the
opt-in `_meta.steering.idleBehavior: "promptRequired"`: without it, claude-agent-acp answers a
steer that finds no running turn by starting a detached turn of its own (`startedNewTurn`) whose
output would reach no one (it streams between our turns, where frames are only state); with it,
claude answers `promptRequired` and leaves the content to us, to send as the next prompt.
`startedNewTurn` is then only what an agent without the opt-in says: it did take the message (a
resend would say it twice), so it is reported as is and never read as `promptRequired`."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from acp.client import AcpError

STEER_METHOD = "_session/steering"
# Asks the agent to hand an idle steer back rather than start a turn nobody reads.
STEER_META = {"steering": {"idleBehavior": "promptRequired"}}


class SteerOutcome(StrEnum):
    INJECTED = "injected"  # the running turn reads it; its output streams in that turn
    PROMPT_REQUIRED = "promptRequired"  # nothing was sent or taken: send it as a prompt
    STARTED_NEW_TURN = "startedNewTurn"  # the agent ran it as a turn of its own


class AcpSteeringUnsupported(AcpError):
    """The agent does not advertise steering, so it is never asked to steer."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        super().__init__(
            f"The agent ({agent}) does not advertise steering, so a message cannot be added "
            "to its running turn",
            kind="steering_unsupported",
        )


def _supported(meta: Any) -> bool:
    steering = meta.get("steering") if isinstance(meta, dict) else None
    return isinstance(steering, dict) and steering.get("supported") is True


def advertises_steering(result: Any) -> bool:
    """Whether an `initialize` result advertises steering: `_meta.steering.supported: true` at
    its top level (claude-agent-acp), or under `agentCapabilities._meta`."""
    if not isinstance(result, dict):
        return False
    caps = result.get("agentCapabilities")
    return _supported(result.get("_meta")) or (
        isinstance(caps, dict) and _supported(caps.get("_meta"))
    )


def read_outcome(result: Any) -> SteerOutcome:
    """The agent's answer; anything unknown reads as `promptRequired` (the message is then sent
    as a prompt: at worst the agent sees it twice, never not at all)."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    for member in SteerOutcome:
        if outcome == member.value:
            return member
    return SteerOutcome.PROMPT_REQUIRED
