"""The content blocks of a prompt (ACP `ContentBlock`s): what the bot sends besides plain text.

A prompt is either a `str` (sent as one `text` block, exactly as before) or a sequence of the
blocks these functions build; only the kinds the agent advertised in `promptCapabilities`
should be sent (`image`, `audio`, embedded `resource`); `text` and `resource_link` every agent
takes."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

ContentBlock = dict[str, Any]
PromptContent = str | Sequence[ContentBlock]


def text_block(text: str) -> ContentBlock:
    return {"type": "text", "text": text}


def image_block(data: bytes, mime: str) -> ContentBlock:
    return {"type": "image", "data": base64.b64encode(data).decode("ascii"), "mimeType": mime}


def audio_block(data: bytes, mime: str) -> ContentBlock:
    return {"type": "audio", "data": base64.b64encode(data).decode("ascii"), "mimeType": mime}


def resource_link_block(
    uri: str, name: str, mime: str = "", size: int | None = None
) -> ContentBlock:
    block: ContentBlock = {"type": "resource_link", "uri": uri, "name": name}
    if mime:
        block["mimeType"] = mime
    if size is not None:
        block["size"] = size
    return block


def embedded_text_block(uri: str, text: str, mime: str = "text/plain") -> ContentBlock:
    return {"type": "resource", "resource": {"uri": uri, "text": text, "mimeType": mime}}


def prompt_blocks(prompt: PromptContent) -> list[ContentBlock]:
    """The `prompt` array of `session/prompt` (a copy: the caller's blocks are resent verbatim
    on retries)."""
    if isinstance(prompt, str):
        return [text_block(prompt)]
    return [dict(block) for block in prompt]
