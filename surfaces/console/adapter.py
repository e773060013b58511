"""The terminal surface: lines from stdin are messages, replies stream to stdout, tool approvals
are numbered menus answered by typing the number. Also the in-process test surface.

When stdin is not a terminal (a script, a pipe) each message waits for the previous reply to
finish, so output stays in order; lines that answer a pending approval are taken at once."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, TextIO

import anyio
import anyio.abc

from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    MessageRef,
    OnEvent,
    SurfaceCapabilities,
    UserRef,
)
from surfaces.console.convert import choice_menu, pick_choice, render, split_status

CONSOLE_KEY = ConversationKey("console", "local")
LOCAL_USER = UserRef("local", "you")


async def read_lines(fd: int) -> AsyncIterator[str]:
    """Lines from a file descriptor without a thread: a blocked read must not keep the process
    alive at shutdown. Regular files are always readable, so they are read directly."""
    regular = stat.S_ISREG(os.fstat(fd).st_mode)
    was_blocking = os.get_blocking(fd)
    if not regular:
        os.set_blocking(fd, False)
    buffer = b""
    try:
        while True:
            if not regular:
                await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
            if regular:
                await anyio.lowlevel.checkpoint()
        if buffer:
            yield buffer.decode("utf-8", "replace")
    finally:
        if not regular:
            os.set_blocking(fd, was_blocking)


class ConsoleSurface:
    name = "console"

    def __init__(
        self,
        *,
        input_fd: int,
        output: TextIO,
        interactive: bool,
        max_chars: int = 100_000,
    ) -> None:
        self._fd = input_fd
        self._out = output
        self.interactive = interactive
        self.capabilities = SurfaceCapabilities(
            max_chars=max_chars,
            min_edit_interval=0.05,
            can_edit=interactive,  # scripted runs print each reply once, whole
            buttons=True,
        )
        self._printed: dict[str, str] = {}
        self._at_line_start = True
        self._last_ref = ""
        self._next_id = 0
        self._choices: list[tuple[MessageRef, Sequence[Choice]]] = []
        self._choice_posted = anyio.Event()

    # ---- output -------------------------------------------------------------------------------
    def _write(self, text: str) -> None:
        if text:
            self._out.write(text)
            self._out.flush()
            self._at_line_start = text.endswith("\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _start_message(self) -> MessageRef:
        self._end_line()
        self._next_id += 1
        ref = MessageRef(CONSOLE_KEY, str(self._next_id))
        self._last_ref = ref.id
        return ref

    def render(self, markdown: str) -> str:
        return render(markdown)

    async def send(self, key: ConversationKey, text: str, *, formatted: bool = False) -> MessageRef:
        ref = self._start_message()
        answer = render(split_status(text)[0])
        self._printed[ref.id] = answer
        self._write(answer)
        return ref

    async def edit(self, ref: MessageRef, text: str, *, formatted: bool = False) -> None:
        answer = render(split_status(text)[0])
        shown = self._printed.get(ref.id, "")
        if answer.startswith(shown):
            delta = answer[len(shown) :]
        elif shown.startswith(answer):
            return  # nothing new; a terminal cannot take text back
        else:
            delta = "\n" + answer
        if not delta:
            return
        if ref.id != self._last_ref:
            self._start_message()
            self._last_ref = ref.id
        self._printed[ref.id] = answer
        self._write(delta)

    async def preview(self, key: ConversationKey, text: str) -> None:
        return None  # a terminal streams by appending (edit), it has no drafts

    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        ref = await self.send(key, choice_menu(prompt, choices) + "\n")
        self._choices.append((ref, choices))
        self._choice_posted.set()
        return ref

    async def close_choice(self, ref: MessageRef, outcome: str) -> None:
        self._choices = [(r, c) for r, c in self._choices if r != ref]
        await self.send(ref.key, outcome + "\n")

    async def typing(self, key: ConversationKey) -> None:
        return None

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        return None

    async def close(self) -> None:
        self._end_line()

    # ---- input --------------------------------------------------------------------------------
    def _answer_for(self, line: str) -> ChoiceAnswer | None:
        if not self._choices:
            return None
        choices = self._choices[-1][1]
        choice = pick_choice(line, choices)
        if choice is None:
            return None
        self._choices.pop()  # answered: the next number belongs to the next menu

        async def notify(text: str) -> None:
            await self.send(CONSOLE_KEY, text + "\n")

        return ChoiceAnswer(CONSOLE_KEY, LOCAL_USER, choice.token, _event_id(), notify)

    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        async with anyio.create_task_group() as tg:
            turn_done: anyio.Event | None = None
            sent: list[anyio.Event] = []
            async for raw in read_lines(self._fd):
                line = raw.rstrip("\r")
                while True:
                    answer = self._answer_for(line)
                    if answer is not None:
                        tg.start_soon(on_event, answer)
                        break
                    if self.interactive or turn_done is None or turn_done.is_set():
                        if line.strip():
                            turn_done = anyio.Event()
                            inbound = Inbound(
                                CONSOLE_KEY, LOCAL_USER, line, _event_id(), handled=turn_done
                            )
                            sent = [e for e in sent if not e.is_set()] + [turn_done]
                            await on_event(inbound)  # returns once queued: order is kept
                        break
                    # scripted: wait for the reply, unless an approval shows up that this
                    # line may answer
                    self._choice_posted = anyio.Event()
                    await _first_of(turn_done, self._choice_posted)
            for handled in sent:  # at end of input, every reply is still shown
                await handled.wait()
        self._end_line()


async def _first_of(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


def _event_id() -> str:
    return f"{os.getpid()}-{time.time_ns()}"
