"""Inline keyboards: the bot's choices as buttons whose presses come back as the choices' tokens.

Telegram carries at most 64 bytes of `callback_data` per button, so a longer token travels as a
short alias (`~N`) remembered both ways, bounded; a live message's Stop button keeps its alias
through every edit, so the keyboard Telegram shows does not change while the text streams. A link
choice is a `url` button (http(s) only: `surfaces.links`), which Telegram opens and never
reports."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from surfaces.base import Choice
from surfaces.bounded import BoundedMap
from surfaces.links import renderable
from surfaces.telegram.convert import choice_rows, fits_callback_data

__all__ = ["Keyboards"]

ALIASES = 1000  # long choice tokens remembered by their short callback_data


class Keyboards:
    """`markup(choices)` for a message; `token(data)` for a press."""

    def __init__(self) -> None:
        self._aliases: BoundedMap[str, str] = BoundedMap(ALIASES)  # callback_data -> token
        self._alias_of: BoundedMap[str, str] = BoundedMap(ALIASES)  # token -> callback_data
        self._counter = itertools.count(1)

    def markup(self, choices: Sequence[Choice]) -> InlineKeyboardMarkup | None:
        """Inline buttons whose presses come back as the choices' tokens (None: no buttons)."""
        shown = renderable(choices, surface="telegram")
        if not shown:
            return None
        buttons = [self._button(choice) for choice in shown]
        rows = choice_rows([choice.label for choice in shown])
        return InlineKeyboardMarkup([[buttons[index] for index in row] for row in rows])

    def _button(self, choice: Choice) -> InlineKeyboardButton:
        if choice.url:
            return InlineKeyboardButton(choice.label, url=choice.url)
        return InlineKeyboardButton(choice.label, callback_data=self._callback_data(choice.token))

    def token(self, data: str) -> str:
        """The token a press's `callback_data` stands for."""
        return self._aliases.get(data, data)

    def _callback_data(self, token: str) -> str:
        """The token itself when it fits Telegram's 64 bytes, else a short alias of it."""
        if fits_callback_data(token):
            return token
        alias = self._alias_of.get(token)
        if alias is None or self._aliases.get(alias) != token:
            alias = f"~{next(self._counter)}"
            self._aliases.remember(alias, token)
            self._alias_of.remember(token, alias)
        return alias
