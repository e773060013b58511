"""What can go wrong between the dashboard and a browser, and the sentences people read.

There is no platform SDK here: the foreign exceptions are aiohttp's when a browser went away
mid-send. A closed tab is no failure of the bot (what it missed is in the conversation's recent
messages, sent again when it reconnects), so a send to a gone socket is dropped, not raised."""

from __future__ import annotations

import aiohttp

__all__ = [
    "BAD_FRAME",
    "GONE_SOCKET",
    "NOT_ADMIN",
    "NOT_READY",
    "NOT_YOURS",
    "SIGNED_OUT",
    "STALE_BUTTON",
    "TOO_MANY",
    "WRONG_TOKEN",
]

# Sending on a WebSocket whose browser is gone.
GONE_SOCKET = (ConnectionError, aiohttp.ClientError, RuntimeError)

WRONG_TOKEN = "That access token is not valid."
TOO_MANY = "Too many wrong access tokens from your address; wait a minute and try again."
SIGNED_OUT = "You are not signed in; sign in with your access token."
NOT_READY = "Switchboard is starting; try again in a moment."
NOT_YOURS = "That conversation is not yours."
STALE_BUTTON = "That button is no longer active."
BAD_FRAME = "The page sent something Switchboard does not understand; reload the page."
NOT_ADMIN = "Only an admin of the dashboard can use the operations view."
