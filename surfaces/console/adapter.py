"""The terminal surface: lines from stdin are messages, replies stream to stdout, tool approvals
are numbered menus answered by typing the number. Also the in-process test surface.

Output reads like a transcript: a reply streams by appending (a terminal cannot take text back),
and every finished message ends with a newline. While a reply streams, nothing else is written
into it: other messages (a "queued" notice, a command's answer) wait until it is done. Only an
approval menu interrupts it, since the reply waits for the answer, and so does a question
asked for text (`ask_text`): its prompt is printed, the input prompt becomes "answer> ", and the
next line typed is sent as an ordinary message (the bot takes it as the answer). Link buttons,
which a terminal cannot open, are printed as "label: url".

On a terminal, a "> " prompt shows when Switchboard waits for input; while a reply streams the
prompt is not shown and the terminal's echo is off, so typed text cannot land inside the reply
(a line typed meanwhile is shown after the reply, then queued as usual).

When stdin is not a terminal (a script, a pipe) each message waits for the previous reply to
finish, so output stays in order; lines that answer a pending approval or a question are taken at
once. At the end of input an approval still pending is declined at once, and `run` returns after
the last reply."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import anyio.abc

from surfaces.base import (
    Choice,
    ChoiceAnswer,
    ConversationKey,
    Inbound,
    IncomingFile,
    LiveReply,
    MenuCommand,
    MessageRef,
    OnEvent,
    OutgoingFile,
    SurfaceCapabilities,
    UserRef,
)
from surfaces.console.convert import (
    ANSWER_PROMPT,
    FILE_USAGE,
    PROMPT,
    choice_menu,
    declining_choice,
    link_lines,
    parse_file_line,
    pick_choice,
    render,
    split_status,
)
from surfaces.console.input import TerminalEcho, read_lines
from surfaces.errors import FileRefused
from surfaces.links import pressable, renderable
from surfaces.live import EditedLive
from surfaces.local_files import LocalFileMissing, local_file

CONSOLE_KEY = ConversationKey("console", "local")
LOCAL_USER = UserRef("local", "you")


@dataclass(frozen=True, slots=True)
class _Menu:
    ref: MessageRef
    text: str
    choices: Sequence[Choice]


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
            can_edit=True,  # streamed by appending, piped or not
            # no uploads, no Stop button, no native menu: a terminal shows text
            message_buttons=False,
            max_upload_bytes=0,
            agent_menus=False,
        )
        self._printed: dict[str, str] = {}
        self._live: set[str] = set()  # messages still streaming (no final edit yet)
        self._held: list[str] = []  # finished messages waiting for the live ones
        self._at_line_start = True
        self._last_ref = ""
        self._next_id = 0
        self._menus: list[_Menu] = []
        self._menu_posted = anyio.Event()  # a menu or a question: the next line may answer it
        self._text_wanted = False  # a question waits for the next line (`ask_text`)
        self._pending: set[anyio.Event] = set()  # `handled` of messages not answered yet
        self._input_ended = False
        self._echo = TerminalEcho(input_fd) if interactive else None

    # ---- output -------------------------------------------------------------------------------
    def _write(self, text: str) -> None:
        if text:
            self._out.write(text)
            self._out.flush()
            self._at_line_start = text.endswith("\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _block(self, text: str) -> None:
        """Write a finished message on lines of its own."""
        self._end_line()
        self._write(text if text.endswith("\n") else text + "\n")

    def _say(self, text: str) -> None:
        """A finished message: now, or after the reply that is streaming."""
        if self._live:
            self._held.append(text)
        else:
            self._block(text)

    def _new_ref(self) -> MessageRef:
        self._next_id += 1
        return MessageRef(CONSOLE_KEY, str(self._next_id))

    def render(self, markdown: str) -> str:
        return render(markdown)

    async def send(
        self,
        key: ConversationKey,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),  # links printed; the rest not shown: there is /stop
    ) -> MessageRef:
        ref = self._new_ref()
        answer = render(split_status(text)[0])
        self._printed[ref.id] = answer
        shown_links = link_lines(renderable(buttons, surface=self.name))
        if formatted:
            self._say("\n".join([answer, *shown_links]))
            return ref
        if shown_links:
            self._say("\n".join(shown_links))  # after the reply this message starts
        self._live.add(ref.id)  # the start of a streamed reply
        self._hide_echo()
        self._end_line()
        self._last_ref = ref.id
        self._write(answer)
        return ref

    async def edit(
        self,
        ref: MessageRef,
        text: str,
        *,
        formatted: bool = False,
        buttons: Sequence[Choice] = (),
    ) -> None:
        answer = render(split_status(text)[0])
        shown = self._printed.get(ref.id, "")
        if answer.startswith(shown):
            delta = answer[len(shown) :]
        elif shown.startswith(answer):
            delta = ""  # nothing new; a terminal cannot take text back
        else:
            delta = "\n" + answer
        if delta:
            if ref.id != self._last_ref:  # another message was written since: a new line
                self._end_line()
                self._last_ref = ref.id
            self._printed[ref.id] = answer
            self._write(delta)
        if formatted and ref.id in self._live:  # the final edit: this message is done
            self._live.discard(ref.id)
            if ref.id == self._last_ref:
                self._end_line()
            self._settle()

    async def send_file(self, key: ConversationKey, file: OutgoingFile) -> MessageRef:
        # never called: max_upload_bytes is 0, so the bot writes a note with the path instead
        raise FileRefused("The terminal cannot show files", limit=0)

    def open_live(self, key: ConversationKey) -> LiveReply:
        return EditedLive(self, key)  # a terminal streams by appending (edit)

    async def ask_choice(
        self,
        key: ConversationKey,
        prompt: str,
        choices: Sequence[Choice],
        *,
        allowed_users: Sequence[str],
    ) -> MessageRef:
        shown = renderable(choices, surface=self.name)
        menu = _Menu(self._new_ref(), choice_menu(prompt, shown), shown)
        self._block(menu.text)  # at once: the reply waits for this answer
        if not pressable(shown):
            return menu.ref  # links only: nothing to type
        self._menus.append(menu)
        self._menu_posted.set()
        self._ask_for_input()
        return menu.ref

    async def ask_text(self, key: ConversationKey, prompt: str, *, user: UserRef) -> MessageRef:
        """The prompt at once (the reply waits for the answer), then the answer prompt; the next
        line is an ordinary message, taken even while a turn runs."""
        self._block(prompt)
        self._text_wanted = True
        self._menu_posted.set()
        self._ask_for_input()
        return self._new_ref()

    async def close_choice(self, ref: MessageRef, prompt: str, outcome: str) -> None:
        self._menus = [menu for menu in self._menus if menu.ref != ref]
        self._block(outcome)
        if not self._menus and (self._pending or self._live):
            self._hide_echo()  # the reply goes on

    async def typing(self, key: ConversationKey) -> None:
        return None

    def command_menu(self, commands: Sequence[tuple[str, str]]) -> Any:
        return None

    async def agent_command_menu(
        self, key: ConversationKey, commands: Sequence[MenuCommand]
    ) -> None:
        return None  # never called: agent_menus is False (/help lists the agent's commands)

    async def close(self) -> None:
        self._live.clear()
        self._flush_held()
        self._end_line()
        self._show_echo()

    # ---- the prompt and the echo ----------------------------------------------------------------
    def _flush_held(self) -> None:
        held, self._held = self._held, []
        for text in held:
            self._block(text)

    def _settle(self) -> None:
        """After a reply or a message's turn ended: show what waited, then ask for input."""
        if self._live:
            return
        self._flush_held()
        self._pending = {event for event in self._pending if not event.is_set()}
        if not self._pending and not self._input_ended:
            self._ask_for_input()

    def _ask_for_input(self) -> None:
        if self._echo is None or self._input_ended:
            return
        self._show_echo()
        self._end_line()
        self._write(ANSWER_PROMPT if self._text_wanted else PROMPT)

    def _hide_echo(self) -> None:
        if self._echo is not None and not self._menus and not self._text_wanted:
            self._echo.hide()

    def _show_echo(self) -> None:
        if self._echo is not None:
            self._echo.show()

    # ---- input --------------------------------------------------------------------------------
    def _answer(self, menu: _Menu, choice: Choice) -> ChoiceAnswer:
        self._menus.remove(menu)  # answered: the next number belongs to the next menu

        async def notify(text: str) -> None:
            self._block(text)

        return ChoiceAnswer(CONSOLE_KEY, LOCAL_USER, choice.token, _event_id(), notify)

    def _answer_menu(self, line: str, tg: anyio.abc.TaskGroup, on_event: OnEvent) -> bool:
        """Whether the line was for the open menu: a number answers it; anything else but a
        command shows the menu again, since it cannot be a reply to it."""
        menu = self._menus[-1]
        choice = pick_choice(line, menu.choices)
        if choice is not None:
            tg.start_soon(on_event, self._answer(menu, choice))
            return True
        if line.strip().startswith("/"):
            return False
        self._block(menu.text)
        self._ask_for_input()
        return True

    def _attachment(self, line: str) -> tuple[str, tuple[IncomingFile, ...]] | None:
        """The line's text and files: `/file PATH [caption]` attaches a local file. None when
        the line names no file it can attach (said in one sentence)."""
        parsed = parse_file_line(line)
        if parsed is None:
            return line, ()
        path, caption = parsed
        if not path:
            self._say(FILE_USAGE)
            return None
        try:
            return caption, (local_file(path),)
        except LocalFileMissing as exc:
            self._say(str(exc))
            return None

    async def _submit(self, line: str, on_event: OnEvent, tg: anyio.abc.TaskGroup) -> anyio.Event:
        handled = anyio.Event()
        if self._echo is not None and self._echo.hidden:
            self._say(PROMPT + line)  # typed while a reply streamed: shown after it
        message = self._attachment(line)
        if message is None:
            handled.set()
            self._settle()
            return handled
        text, files = message
        self._text_wanted = False  # this line is the answer, if one was wanted
        self._pending.add(handled)
        self._hide_echo()
        await on_event(
            Inbound(CONSOLE_KEY, LOCAL_USER, text, _event_id(), handled=handled, files=files)
        )
        tg.start_soon(self._settle_when, handled)  # on_event returns once queued: order is kept
        return handled

    async def _settle_when(self, handled: anyio.Event) -> None:
        await handled.wait()
        self._pending.discard(handled)
        if not any(not event.is_set() for event in self._pending):
            self._live.clear()  # no turn is left that could still stream
            self._text_wanted = False  # nor a question that waits for a line
        self._settle()

    async def run(
        self,
        on_event: OnEvent,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:
                self._ask_for_input()
                await self._read(on_event, tg)
                self._input_ended = True
                await self._finish_replies(on_event, tg)
                tg.cancel_scope.cancel()
        finally:
            self._show_echo()
        self._flush_held()
        self._end_line()

    async def _read(self, on_event: OnEvent, tg: anyio.abc.TaskGroup) -> None:
        turn_done: anyio.Event | None = None
        async for raw in read_lines(self._fd):
            line = raw.rstrip("\r")
            if self._echo is not None and not self._echo.hidden:
                self._at_line_start = True  # the terminal echoed the line and its newline
            while True:
                if self._menus and self._answer_menu(line, tg, on_event):
                    break
                if (
                    self.interactive
                    or turn_done is None
                    or turn_done.is_set()
                    or self._menus
                    or self._text_wanted
                ):
                    if line.strip():
                        answering = self._text_wanted and turn_done is not None
                        handled = await self._submit(line, on_event, tg)
                        # an answer is part of the running turn: the next line waits for it
                        turn_done = turn_done if answering else handled
                    else:
                        self._settle()  # an empty line: ask again
                    break
                # scripted: wait for the reply, unless an approval or a question shows up
                # that this line may answer
                self._menu_posted = anyio.Event()
                await _first_of(turn_done, self._menu_posted)

    async def _finish_replies(self, on_event: OnEvent, tg: anyio.abc.TaskGroup) -> None:
        """At end of input every reply is still shown; an approval nobody can answer any more is
        declined at once instead of waiting out its timeout."""
        while True:
            self._pending = {event for event in self._pending if not event.is_set()}
            if not self._pending:
                return
            while self._menus:
                menu = self._menus[-1]
                decline = declining_choice(menu.choices)
                if decline is None:
                    return  # nothing to decline with: stopping the chat cancels the turn
                tg.start_soon(on_event, self._answer(menu, decline))
            self._menu_posted = anyio.Event()
            await _first_of(next(iter(self._pending)), self._menu_posted)


async def _first_of(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


def _event_id() -> str:
    return f"{os.getpid()}-{time.time_ns()}"
