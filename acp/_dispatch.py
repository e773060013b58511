"""Pure frame parsing shared by every path: `session/update` -> AcpEvent, kiro refusal metadata ->
RefusalInfo, and redaction of credentials and links in text that reaches a person or a log.

Nothing here raises on unexpected shapes: an unknown variant or content type is skipped (None),
because agents add variants faster than clients learn them. Every agent string that can reach a
person (text, tool titles and inputs, command and option names, refusal fields) leaves here as
valid Unicode (`config.valid_text`): a lone surrogate in a frame must not crash a surface."""

from __future__ import annotations

import base64
import binascii
import logging
import re
from typing import Any

from acp.agent_reports import child_event, parse_plan, parse_report
from acp.tool_parsing import parse_tool
from acp.types import (
    AcpEvent,
    AgentFile,
    EventKind,
    PermissionOption,
    PermissionRequest,
    RefusalInfo,
    ToolCall,
    UsageInfo,
    normalize_option_kind,
)
from config import valid_text

log = logging.getLogger(__name__)

_TEXT = EventKind.TEXT

REFUSAL_CATEGORY_MAX = 64
REFUSAL_EXPLANATION_MAX = 600
REFUSAL_MODEL_MAX = 128

_RE_SECRET = re.compile(
    r"(?:"
    r"sk-(?:ant-)?[A-Za-z0-9_\-]{8,}"  # Anthropic / OpenAI keys
    r"|xox[abposr]-[A-Za-z0-9\-]{8,}|xapp-[A-Za-z0-9\-]{8,}"  # Slack
    r"|\b\d{6,12}:[A-Za-z0-9_\-]{30,}\b"  # Telegram bot token
    r"|\b[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,}\b"  # Discord
    r"|\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"  # AWS access key id
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}\b"
    r"|\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{5,}"  # JWT
    r")"
)
# A credential's name, a separator, then its value. The separator is required (the lookbehind):
# a name that merely continues, as in `slack_bolt.middleware.authorization.async_...` or
# `tokenizer_config`, is an identifier, not an assignment.
_RE_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b((?:bearer|authorization|api[_-]?key|x-api-key|token|secret|password|session[_-]?token)"
    r"[\"']?\s*[:=]?\s*[\"']?)(?<=[\s:=\"'])([A-Za-z0-9_\-./+=]{12,})"
)
# A URL's password, any scheme (`redis://:pw@host`, `postgres://user:pw@host`): the user and
# host stay, so the line still says which server; `/` cannot occur in either part, nor a quote
# (a JSON string ends there).
_RE_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@\"'<>]*:)[^\s/@\"'<>]+@")
# Digests (SHA-1, SHA-256, SHA-512 in hex: a dashboard token's, a webhook's signature) and
# `sha256=<hex>` signatures. UUIDs (session ids) are dashed, so never 40 hex digits in a row; a
# digest mixes digits and letters (a run of "C"s or of digits alone is something else).
_RE_DIGEST = re.compile(
    r"(?i)\b(sha(?:1|256|384|512)=)[0-9a-f]{16,}"
    r"|(?<![0-9A-Za-z])(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])"
    r"(?:[0-9a-fA-F]{128}|[0-9a-fA-F]{64}|[0-9a-fA-F]{40})(?![0-9A-Za-z])"
)
_RE_URL = re.compile(r"(?i)\b(?:https?|ftp|wss?)://[^\s<>\"')\]]+")


def redact(text: str) -> str:
    """Remove credentials; keep the surrounding words so the sentence still reads."""
    text = _RE_URL_PASSWORD.sub(lambda m: m.group(1) + "***@", text)
    text = _RE_DIGEST.sub(lambda m: (m.group(1) or "") + "[redacted]", text)
    text = _RE_SECRET.sub("[redacted]", text)
    return _RE_SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + "[redacted]", text)


def redact_links(text: str) -> str:
    """Credentials and every link: a link in provider text can smuggle data out when clicked."""
    return _RE_URL.sub("[link removed]", redact(text))


def _clean_field(value: Any, limit: int) -> str:
    if not isinstance(value, str):
        return ""
    cleaned = " ".join(redact_links(valid_text(value)).split())
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1].rstrip() + "…"
    return cleaned


def parse_refusal(params: Any) -> RefusalInfo | None:
    """kiro's `_kiro.dev/metadata`: a refusal iff stopReason is CONTENT_FILTERED or a refusal
    object is present (top level or under stopDetails)."""
    if not isinstance(params, dict):
        return None
    refusal = params.get("refusal")
    stop_details = params.get("stopDetails")
    if not isinstance(refusal, dict) and isinstance(stop_details, dict):
        refusal = stop_details.get("refusal")
    stop_reason = params.get("stopReason")
    if not isinstance(stop_reason, str) and isinstance(stop_details, dict):
        stop_reason = stop_details.get("stopReason")
    filtered = isinstance(stop_reason, str) and stop_reason.strip().upper() == "CONTENT_FILTERED"
    if not filtered and not isinstance(refusal, dict):
        return None
    fields = refusal if isinstance(refusal, dict) else {}
    return RefusalInfo(
        category=_clean_field(fields.get("category"), REFUSAL_CATEGORY_MAX),
        explanation=_clean_field(fields.get("explanation"), REFUSAL_EXPLANATION_MAX),
        recommended_model=_clean_field(fields.get("recommendedModel"), REFUSAL_MODEL_MAX),
    )


def _content_text(content: Any) -> tuple[str, bool] | None:
    """(text, is_thought) of a ContentBlock, or None for blocks we do not show."""
    if not isinstance(content, dict):
        return None
    kind = content.get("type")
    text = content.get("text")
    if kind == "text" and isinstance(text, str):
        return valid_text(text), False
    if kind in ("thinking", "reasoning"):
        thought = text if isinstance(text, str) else content.get("thinking")
        return (valid_text(thought), True) if isinstance(thought, str) else None
    return None


def parse_update(params: dict[str, Any]) -> AcpEvent | None:
    """One `session/update` notification -> one event, or None to skip it."""
    update = params.get("update")
    if not isinstance(update, dict):
        return child_event(update)  # a subagent's update, routed to its parent; else None
    variant = update.get("sessionUpdate")
    if variant == "agent_message_chunk":
        # the streaming hot path: a plain text block (what _content_text would return as such)
        content = update.get("content")
        if isinstance(content, dict) and content.get("type") == "text":
            text = content.get("text")
            if isinstance(text, str):
                message_id = update.get("messageId")
                # positional: the cheapest call of the dataclass constructor
                return AcpEvent(
                    _TEXT, valid_text(text), message_id if type(message_id) is str else None
                )
    if variant == "agent_message_chunk" or variant == "agent_thought_chunk":
        content = update.get("content")
        if variant == "agent_message_chunk" and isinstance(content, dict):
            file = parse_file_block(content)
            if file is not None:
                return AcpEvent(EventKind.FILE, file=file)
        parsed = _content_text(content)
        if parsed is None:
            flat = update.get("text")  # older kiro sent the text flat
            if not isinstance(flat, str):
                return None
            parsed = (valid_text(flat), False)
        text, is_thought = parsed
        kind = (
            EventKind.THOUGHT if is_thought or variant == "agent_thought_chunk" else EventKind.TEXT
        )
        message_id = update.get("messageId")
        return AcpEvent(
            kind, text=text, message_id=message_id if isinstance(message_id, str) else None
        )
    if variant == "tool_call" or variant == "tool_call_update":
        tool = parse_tool(update)
        if tool is None:
            return None
        kind = EventKind.TOOL_CALL if variant == "tool_call" else EventKind.TOOL_UPDATE
        return AcpEvent(kind, tool=tool, raw=update)
    if variant == "plan":
        return AcpEvent(EventKind.PLAN, raw=update, plan=parse_plan(update.get("entries")))
    if variant == "usage_update":
        return AcpEvent(EventKind.USAGE, usage=parse_usage_update(update), raw=update)
    if variant == "available_commands_update":
        names = [
            valid_text(command["name"])
            for command in update.get("availableCommands") or ()
            if isinstance(command, dict) and isinstance(command.get("name"), str)
        ]
        return AcpEvent(EventKind.COMMANDS, commands=tuple(names), raw=update)
    if variant == "session_info_update":
        return AcpEvent(EventKind.SESSION_INFO, raw=update)
    if variant in ("user_message_chunk", "current_mode_update", "config_option_update"):
        return None
    if isinstance(variant, str):  # plans by id, subagents, notices, compactions; else logged
        return parse_report(variant, update)
    log.debug("skipping a session/update without a variant")
    return None


def parse_permission_request(params: dict[str, Any]) -> PermissionRequest:
    tool = parse_tool(params.get("toolCall") or {}) or ToolCall(tool_call_id="")
    options = []
    for raw in params.get("options") or ():
        if not isinstance(raw, dict):
            continue
        option_id = raw.get("optionId", raw.get("id"))
        if not isinstance(option_id, str):
            continue
        name = raw.get("name", raw.get("label"))
        kind = raw.get("kind")
        options.append(
            PermissionOption(
                option_id=option_id,
                name=valid_text(name if isinstance(name, str) else option_id),
                kind=normalize_option_kind(kind if isinstance(kind, str) else option_id),
            )
        )
    session_id = params.get("sessionId")
    return PermissionRequest(
        session_id=session_id if isinstance(session_id, str) else "",
        tool=tool,
        options=tuple(options),
    )


def codex_thread_status(update: dict[str, Any]) -> str | None:
    """codex reports provider failures as thread status `systemError` in session_info_update."""
    meta = update.get("_meta")
    if not isinstance(meta, dict):
        return None
    codex = meta.get("codex")
    if not isinstance(codex, dict):
        return None
    status = codex.get("threadStatus")
    if isinstance(status, dict) and isinstance(status.get("type"), str):
        return str(status["type"])
    return None


def kiro_context_percent(params: dict[str, Any]) -> float | None:
    value = params.get("contextUsagePercentage")
    return float(value) if isinstance(value, int | float) else None


# ---- files in the agent's reply -----------------------------------------------------
# Largest file the agent may hand us inline (base64 in a frame); more is refused, not decoded.
MAX_AGENT_FILE_BYTES = 20 * 1024 * 1024
MAX_FILE_NAME = 120
MAX_MIME = 100
MAX_URI = 2048
_RE_UNSAFE_NAME = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069/\\:]")
_RE_MIME = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,63}/[a-z0-9][a-z0-9!#$&^_.+-]{0,63}")
_EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "audio/wav": ".wav",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "application/json": ".json",
    "application/pdf": ".pdf",
}


def _clean_mime(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    mime = value.split(";", 1)[0].strip().lower()
    return mime if len(mime) <= MAX_MIME and _RE_MIME.fullmatch(mime) else ""


def _file_name(value: Any, uri: str, mime: str, fallback: str) -> str:
    """A bare, visible file name: the last path part of what the agent named (or of the uri),
    without control or direction characters, no leading dots, bounded; else `fallback`."""
    raw = value if isinstance(value, str) and value.strip() else uri.rsplit("/", 1)[-1]
    raw = valid_text(raw).replace("\\", "/").rsplit("/", 1)[-1]
    name = _RE_UNSAFE_NAME.sub("", raw).strip().lstrip(".").strip()
    if len(name) > MAX_FILE_NAME:
        _, dot, ext = name.rpartition(".")
        keep = ext if dot and len(ext) <= 10 else ""
        name = name[: MAX_FILE_NAME - len(keep) - 1].rstrip() + ("." + keep if keep else "")
    return name or fallback + _EXTENSIONS.get(mime, "")


def _decode(data: Any) -> bytes | None:
    """Base64 from a frame, or None when it is not base64 or decodes past the cap."""
    if not isinstance(data, str) or len(data) > (MAX_AGENT_FILE_BYTES // 3 + 1) * 4 + 8:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_file_block(content: dict[str, Any]) -> AgentFile | None:
    """An `image`, `audio`, `resource` or `resource_link` block -> AgentFile; None for other
    blocks and for ones whose data is not base64 or too large (logged: skipped, never raised)."""
    kind = content.get("type")
    if kind in ("image", "audio"):
        mime = _clean_mime(content.get("mimeType"))
        uri = content.get("uri")
        uri = valid_text(uri)[:MAX_URI] if isinstance(uri, str) else ""
        data = _decode(content.get("data"))
        if data is None:
            log.warning(
                "skipping an %s block from the agent: its data is not base64 or too large", kind
            )
            return None
        name = _file_name(None, uri, mime, kind)
        return AgentFile(name=name, mime=mime, data=data, uri=uri, size=len(data))
    if kind == "resource":
        resource = content.get("resource")
        if not isinstance(resource, dict):
            return None
        uri = resource.get("uri")
        uri = valid_text(uri)[:MAX_URI] if isinstance(uri, str) else ""
        mime = _clean_mime(resource.get("mimeType"))
        text = resource.get("text")
        if isinstance(text, str):
            data = valid_text(text).encode("utf-8")
            if len(data) > MAX_AGENT_FILE_BYTES:
                log.warning("skipping an embedded resource from the agent: too large")
                return None
            mime = mime or "text/plain"
        else:
            blob = _decode(resource.get("blob"))
            if blob is None:
                log.warning("skipping an embedded resource from the agent: not base64 or too large")
                return None
            data = blob
        name = _file_name(None, uri, mime, "resource")
        return AgentFile(name=name, mime=mime, data=data, uri=uri, size=len(data))
    if kind == "resource_link":
        uri = content.get("uri")
        if not isinstance(uri, str) or not uri.strip() or len(uri) > MAX_URI:
            return None
        uri = valid_text(uri)
        mime = _clean_mime(content.get("mimeType"))
        size = content.get("size")
        return AgentFile(
            name=_file_name(content.get("name"), uri, mime, "file"),
            mime=mime,
            uri=uri,
            size=size if type(size) is int and size >= 0 else None,
        )
    return None


def parse_usage_update(update: dict[str, Any]) -> UsageInfo:
    """`usage_update`: context used of the window, and the session's cost when given."""
    used, size = update.get("used"), update.get("size")
    cost, currency = None, ""
    raw_cost = update.get("cost")
    if isinstance(raw_cost, dict):
        amount = raw_cost.get("amount")
        if isinstance(amount, int | float) and not isinstance(amount, bool) and 0 <= amount < 1e12:
            cost = float(amount)
            said = raw_cost.get("currency")
            if isinstance(said, str) and re.fullmatch(r"[A-Za-z]{1,8}", said):
                currency = said.upper()
    return UsageInfo(
        used=used if type(used) is int and used >= 0 else None,
        size=size if type(size) is int and size > 0 else None,
        cost=cost,
        currency=currency,
    )
