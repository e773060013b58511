"""Each backend's habits that decide how one of its turns reads, as an object the turn consults
(`PromptTurn`, acp/_turn.py); the backend's descriptor (acp/backends.py) names its class, and
each turn gets a fresh one, since some hold text back while they wait to see what it was.

- kiro: a refusal arrives as structured `_kiro.dev/metadata` (and the context use beside it),
  then the turn ends with a bare -32603 that is that refusal's end, not an error; a turn whose
  tool uses were interrupted ends with an idle line as a text chunk and never answers.
- codex: a provider failure is a `systemError` thread status, then a text chunk that is the
  failure itself when the turn ends with `usage: null` (output after all if the thread recovers).
- claude: an error's text is echoed as a chunk before the error itself arrives.
- any agent may inject a warning line into its reply stream (codex: "Warning: Model metadata
  for `m` not found. ..."): told as a notice, not the answer (`injected_warning`).
- any other agent may be kiro or codex run under the generic preset: their end-of-turn habits
  (the idle line, the systemError chunk) are read for it too."""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum
from typing import Any, ClassVar

from acp._dispatch import codex_thread_status, kiro_context_percent, parse_refusal
from acp.growing_text import GrowingText
from acp.types import AcpEvent, EventKind, UsageInfo

KIRO_INTERRUPTED = "Tool uses were interrupted, waiting for the next user prompt"
_RE_INJECTED_WARNING = re.compile(r"\s*Warning: [^\n]{1,500}\n\s*\Z")

ErrorScreen = Callable[[str], bool]  # whether a chunk reads like an error the catalogue knows


class Take(Enum):
    """What a backend's quirks make of one text chunk."""

    OUTPUT = "output"  # the answer: the turn counts and shows it
    HELD = "held"  # kept back until it is known to be output (or the failure itself)
    ENDS_TURN = "ends turn"  # kiro's idle line: the turn is over, interrupted


def injected_warning(chunk: str, before: GrowingText) -> bool:
    """Whether `chunk` is a warning the agent injected into its reply (written `before`): one
    whole `Warning: ...` line, as a chunk of its own, at the start of a line. Streamed answers
    arrive in pieces, so an answer that begins with the word is not one."""
    if not _RE_INJECTED_WARNING.match(chunk):
        return False
    return not before or before.tail(1) == "\n"


def _idle_line_or_output(event: AcpEvent) -> Take:
    """kiro's idle line ends the turn; any other chunk is output."""
    chunk = event.text  # `in` first: it allocates nothing, unlike strip()
    if KIRO_INTERRUPTED in chunk and chunk.strip() == KIRO_INTERRUPTED:
        return Take.ENDS_TURN
    return Take.OUTPUT


class TurnQuirks:
    """No quirks: every hook says "nothing special". `holding` is True while text is kept back;
    the turn then leaves every chunk to its state machine and calls `content_follows` before
    the next piece of content."""

    structured_refusals: ClassVar[bool] = False

    def __init__(self, looks_like_error: ErrorScreen) -> None:
        # Every class is built alike (the descriptor names the class); claude's reads errors.
        self.holding = False

    def claims(self, chunk: str) -> bool:
        """Whether only the turn's state machine may decide about `chunk` (so the reader's
        stack leaves it queued). Called for every chunk: kept to a test or two."""
        return self.holding

    def take_chunk(self, event: AcpEvent) -> Take:
        return Take.OUTPUT

    def content_follows(self) -> list[AcpEvent]:
        """More content (or a permission request) came while holding: what was held and is
        now known to be output, in order."""
        return []

    def status(self, update: dict[str, Any]) -> list[AcpEvent]:
        """A `session_info_update`: what was held and is now known to be output."""
        return []

    def notification(self, method: str, params: Any) -> AcpEvent | None:
        """The event a notification other than `session/update` stands for, if any."""
        return None

    def ends_in_refusal(self, error: dict[str, Any], refused: bool) -> bool:
        """Whether the error answering the prompt is merely the end of a refusal already told."""
        return False

    def failure(self, result: dict[str, Any]) -> str | None:
        """The text of a failure the prompt's successful answer hides, if any."""
        return None

    def answered(self) -> list[AcpEvent]:
        """The prompt was answered without failure: what is still held was output."""
        return []


class KiroQuirks(TurnQuirks):
    structured_refusals = True

    def claims(self, chunk: str) -> bool:
        return KIRO_INTERRUPTED in chunk

    take_chunk = staticmethod(_idle_line_or_output)

    def notification(self, method: str, params: Any) -> AcpEvent | None:
        if method != "_kiro.dev/metadata" or not isinstance(params, dict):
            return None
        refusal = parse_refusal(params)
        if refusal is not None:
            return AcpEvent(EventKind.REFUSAL, refusal=refusal, raw=params)
        percent = kiro_context_percent(params)
        if percent is not None:
            return AcpEvent(EventKind.USAGE, usage=UsageInfo(percent=percent), raw=params)
        return None

    def ends_in_refusal(self, error: dict[str, Any], refused: bool) -> bool:
        return refused and not error.get("data")


class CodexQuirks(TurnQuirks):
    """Text after a `systemError` status is held: the failure's own words if the turn ends
    with `usage: null`, output if the thread goes `active` again or the turn ends otherwise."""

    def __init__(self, looks_like_error: ErrorScreen) -> None:
        super().__init__(looks_like_error)
        self._held: list[AcpEvent] = []

    def take_chunk(self, event: AcpEvent) -> Take:
        if self.holding:
            self._held.append(event)
            return Take.HELD
        return Take.OUTPUT

    def status(self, update: dict[str, Any]) -> list[AcpEvent]:
        status = codex_thread_status(update)
        if status == "systemError":
            self.holding = True
        elif status == "active" and self.holding:
            self.holding = False  # it recovered: the text was output
            return self.answered()
        return []

    def failure(self, result: dict[str, Any]) -> str | None:
        if self.holding and self._held and "usage" in result and result["usage"] is None:
            message = "".join(event.text for event in self._held).strip()
            self._held = []
            return message
        return None

    def answered(self) -> list[AcpEvent]:
        held, self._held = self._held, []
        return held


class GenericQuirks(CodexQuirks):
    def claims(self, chunk: str) -> bool:
        return self.holding or KIRO_INTERRUPTED in chunk

    def take_chunk(self, event: AcpEvent) -> Take:
        return super().take_chunk(event) if self.holding else _idle_line_or_output(event)


class ClaudeQuirks(TurnQuirks):
    """A chunk that reads like an error is held: the echo of the error to come, unless more
    content or a successful answer follows."""

    def __init__(self, looks_like_error: ErrorScreen) -> None:
        super().__init__(looks_like_error)
        self._looks_like_error = looks_like_error
        self._echo: AcpEvent | None = None

    def claims(self, chunk: str) -> bool:
        return self.holding or self._looks_like_error(chunk)

    def take_chunk(self, event: AcpEvent) -> Take:
        if self._looks_like_error(event.text):
            self._echo, self.holding = event, True
            return Take.HELD
        return Take.OUTPUT

    def content_follows(self) -> list[AcpEvent]:
        return self.answered()

    def answered(self) -> list[AcpEvent]:
        echo, self._echo, self.holding = self._echo, None, False
        return [] if echo is None else [echo]
