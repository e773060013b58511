"""Pure conversions for the Slack surface: event payloads -> what a person did, and the Block Kit
of a choice (agent Markdown -> Slack mrkdwn is `markup.py`). Nothing here touches the network or
the SDK.

Streamed text (`chat.appendStream`) is standard
Markdown, where entities are not the way to neutralise a `<`: there a zero-width space after any
`<` that would open a mention keeps it literal, and that rewrite never changes text already
streamed (`neutralise_markdown(a)` is a prefix of `neutralise_markdown(a + b)`)."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from surfaces.base import STATUS_MARK, Choice, MenuCommand
from surfaces.links import renderable
from surfaces.text import ellipsize, escape_angle_brackets, unescape_angle_brackets

BLOCK_ID = "switchboard-choice"  # our buttons carry it; other apps' actions are not ours
BUTTON_TEXT_LIMIT = 75
SECTION_TEXT_LIMIT = 3000
BUTTONS_PER_BLOCK = 25
URL_LIMIT = 3000  # a button's url, in characters
LINK_ACTION = "link-"  # the action ids of link buttons: Slack reports their clicks, never ours
_ZWSP = "\u200b"

# ---- escaping ------------------------------------------------------------------------------------

_MENTION_OPENER = re.compile(r"<(?=[!@#])")


def neutralise_markdown(markdown: str) -> str:
    """Standard Markdown for Slack's streaming methods, with every `<!…>`, `<@…>` and `<#…>`
    broken by a zero-width space so it shows as typed and notifies nobody."""
    return _MENTION_OPENER.sub("<" + _ZWSP, markdown)


def split_status(text: str) -> tuple[str, str]:
    """(answer, status): the bot's live text may end with a status block, its last paragraph,
    whose first line starts with STATUS_MARK (lines of a plan and tools may follow)."""
    if text.startswith(STATUS_MARK) and "\n\n" not in text:
        return "", text
    head, sep, last = text.rpartition("\n\n" + STATUS_MARK)
    if sep and "\n\n" not in last:
        return head.rstrip("\n"), STATUS_MARK + last
    head, sep, last = text.rpartition("\n")  # a one-line status right after the text
    if sep and last.startswith(STATUS_MARK):
        return head.rstrip("\n"), last
    return text, ""


# ---- Slack text -> what the person typed -------------------------------------------------------

_ANGLE = re.compile(r"<([^<>]*)>")


def strip_mention(text: str, bot_user_id: str) -> str:
    """The text without `<@BOT>` (or `<@BOT|name>`) wherever it appears."""
    if not bot_user_id:
        return text.strip()
    pattern = re.compile(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>\s*")
    return pattern.sub("", text).strip()


def slack_to_plain(text: str) -> str:
    """Slack's message text -> what the person sees: mentions, channels and links as words,
    entities decoded. `!compact` and `/compact` come out as typed."""

    def word(match: re.Match[str]) -> str:
        inner = match.group(1)
        target, _, label = inner.partition("|")
        if target.startswith("@"):
            return "@" + (label or target[1:])
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):
            special = target[1:].split("^")[0]
            return label or "@" + special
        if label and label != target and label != target.removeprefix("mailto:"):
            return f"{label} ({target})"
        return target.removeprefix("mailto:")

    return unescape_angle_brackets(_ANGLE.sub(word, text))


# ---- events -> what a person did -----------------------------------------------------------------

# A reply also sent to the channel, and a message with files (we take its text), are still
# someone talking to us; edits, joins, bot posts and the rest are not.
_PLAIN_SUBTYPES = (None, "thread_broadcast", "file_share")


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """A message the bot should take: where it belongs and who wrote what."""

    channel: str
    thread: str  # the conversation's thread: "" for a DM outside threads
    ts: str
    user: str
    user_name: str
    team: str
    text: str  # without the bot mention, as the person sees it
    is_dm: bool
    mentioned: bool
    files: tuple[SlackFile, ...] = ()

    @property
    def event_id(self) -> str:
        """One message, however it reached us: the `message` and `app_mention` twins of a
        mention have different `event_id`s, and retries repeat one. (channel, ts) is the
        message itself."""
        return f"{self.channel}:{self.ts}"


def message_from_event(
    event: dict[str, Any],
    *,
    bot_user_id: str,
    in_known_thread: Callable[[str, str], bool],
    team_id: str = "",
) -> SlackMessage | None:
    """A `message` or `app_mention` event -> the message to hand the bot, or None when it is not
    for us: the bot's own or another bot's, an edit or other subtype, a channel message that
    neither mentions the bot nor belongs to a thread it is part of."""
    kind = event.get("type")
    if kind not in ("message", "app_mention"):
        return None
    user = event.get("user")
    if not isinstance(user, str) or not user or user == bot_user_id or event.get("bot_id"):
        return None
    if event.get("subtype") not in _PLAIN_SUBTYPES:
        return None
    channel, ts = event.get("channel"), event.get("ts")
    if not isinstance(channel, str) or not isinstance(ts, str) or not channel or not ts:
        return None
    raw = event.get("text") or ""
    thread = str(event.get("thread_ts") or "")
    if thread == ts:
        thread = ""  # the parent of a thread is a top-level message
    mentioned = kind == "app_mention" or (bool(bot_user_id) and f"<@{bot_user_id}" in raw)
    is_dm = event.get("channel_type") == "im" or (kind == "message" and channel.startswith("D"))
    if is_dm:
        key_thread = thread
    elif thread:
        belongs = in_known_thread(channel, thread) or event.get("parent_user_id") == bot_user_id
        if not (mentioned or belongs):
            return None
        key_thread = thread
    elif mentioned:
        key_thread = ts  # a top-level mention starts a thread, and a conversation
    else:
        return None
    profile = event.get("user_profile") or {}
    name = ""
    if isinstance(profile, dict):
        name = str(profile.get("display_name") or profile.get("real_name") or "")
    text = slack_to_plain(strip_mention(raw, bot_user_id))
    files = files_of(event)
    if not text.strip() and not files:
        return None  # a bare mention: nothing to ask
    team = str(event.get("team") or event.get("user_team") or team_id or "")
    return SlackMessage(channel, key_thread, ts, user, name, team, text, is_dm, mentioned, files)


# ---- files ---------------------------------------------------------------------------------------

# What Slack sets on a file it will not hand over as a file: hidden past the free plan's
# storage, deleted (a tombstone), or a link to another service.
_UNAVAILABLE_MODES = {
    "hidden_by_limit": "Slack hides this file (the workspace is past its storage limit)",
    "tombstone": "This file was deleted from Slack",
    "external": "This file lives on another service, so the bot cannot fetch it from Slack",
}


@dataclass(frozen=True, slots=True)
class SlackFile:
    """A file shared in a message, as the event describes it. Only the id is used to fetch it
    (through `files.info`); the rest is what the person is told and the bot checks first."""

    id: str
    name: str
    mime: str
    size: int | None
    unavailable: str = ""  # why Slack will not hand it over, as a sentence ("" when it will)

    @property
    def kind(self) -> str:
        return file_kind(self.mime)


def file_kind(mime: str) -> str:
    """One of `surfaces.base.FILE_KINDS` from the claimed mime type."""
    major = mime.split("/", 1)[0].lower()
    return major if major in ("image", "audio", "video") else "document"


def unavailable_reason(file: dict[str, Any]) -> str:
    """Why Slack will not hand this file over (a sentence), or "" when it will."""
    mode = str(file.get("mode") or "")
    if mode in _UNAVAILABLE_MODES:
        return _UNAVAILABLE_MODES[mode] + "."
    if file.get("is_external"):
        return _UNAVAILABLE_MODES["external"] + "."
    if file.get("file_access") == "access_denied":
        return "Slack does not let the bot open this file."
    return ""


def files_of(event: dict[str, Any]) -> tuple[SlackFile, ...]:
    """The files shared in a `message` event (subtype `file_share`, or files on a plain one)."""
    raw = event.get("files")
    if not isinstance(raw, list):
        return ()
    files = []
    for item in raw:  # Slack attaches at most 10; the bot answers a count past its limit
        if not isinstance(item, dict):
            continue
        file_id = item.get("id")
        reason = unavailable_reason(item)
        if not isinstance(file_id, str) or not file_id:
            file_id, reason = "", "Slack did not say which file this is."  # answered, not dropped
        size = item.get("size")
        files.append(
            SlackFile(
                id=file_id,
                name=str(item.get("name") or item.get("title") or ""),
                mime=str(item.get("mimetype") or ""),
                size=size if isinstance(size, int) and size >= 0 else None,
                unavailable=reason,
            )
        )
    return tuple(files)


@dataclass(frozen=True, slots=True)
class SlackPress:
    """A press on one of our buttons."""

    channel: str
    thread: str
    message_ts: str
    user: str
    user_name: str
    token: str

    action_ts: str

    @property
    def event_id(self) -> str:
        return f"{self.channel}:{self.message_ts}:{self.action_ts}:{self.user}"


def press_from_payload(body: dict[str, Any]) -> SlackPress | None:
    """A `block_actions` payload -> the press, or None when it is not one of our buttons."""
    if body.get("type") != "block_actions":
        return None
    actions = body.get("actions") or []
    action = actions[0] if actions and isinstance(actions[0], dict) else None
    if action is None or not str(action.get("block_id", "")).startswith(BLOCK_ID):
        return None
    if str(action.get("action_id", "")).startswith(LINK_ACTION):
        return None  # a link button's click: acknowledged, and nothing to hand back
    user = body.get("user") or {}
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = (body.get("channel") or {}).get("id") or container.get("channel_id") or ""
    message_ts = message.get("ts") or container.get("message_ts") or ""
    thread = message.get("thread_ts") or container.get("thread_ts") or ""
    if thread == message_ts:
        thread = ""
    token = action.get("value")
    if not channel or not message_ts or not isinstance(token, str) or not user.get("id"):
        return None
    name = str(user.get("username") or user.get("name") or "")
    action_ts = str(action.get("action_ts") or body.get("trigger_id") or "")
    return SlackPress(channel, thread, message_ts, user["id"], name, token, action_ts)


# ---- Block Kit ---------------------------------------------------------------------------------


def _section(text: str) -> dict[str, Any]:
    shown = ellipsize(escape_angle_brackets(text), SECTION_TEXT_LIMIT)
    return {"type": "section", "text": {"type": "mrkdwn", "text": shown}}


def choice_blocks(prompt: str, choices: Sequence[Choice]) -> list[dict[str, Any]]:
    """The prompt and one button per choice (value = the choice's one-time token)."""
    blocks = [_section(prompt)]
    shown = slack_buttons(choices)
    for start in range(0, len(shown), BUTTONS_PER_BLOCK):
        buttons = _buttons(shown[start : start + BUTTONS_PER_BLOCK], start)
        blocks.append({"type": "actions", "block_id": f"{BLOCK_ID}-{start}", "elements": buttons})
    return blocks


LIVE_BLOCK_ID = f"{BLOCK_ID}-live"  # the buttons on a reply (Stop), pressed like a choice's


def slack_buttons(choices: Sequence[Choice]) -> list[Choice]:
    """The choices Slack shows: a link only with an http(s) url within its limit."""
    return renderable(choices, surface="slack", max_url=URL_LIMIT)


def message_blocks(shown: str, buttons: Sequence[Choice]) -> list[dict[str, Any]]:
    """A message's text (mrkdwn, escaped, as its `text` is) as sections of 3,000 characters,
    then its buttons (those `slack_buttons` keeps)."""
    blocks: list[dict[str, Any]] = []
    rest = shown
    while rest.strip():
        cut = len(rest)
        if cut > SECTION_TEXT_LIMIT:
            cut = rest.rfind("\n", 0, SECTION_TEXT_LIMIT) + 1 or SECTION_TEXT_LIMIT
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": rest[:cut]}})
        rest = rest[cut:]
    blocks.extend(button_blocks(buttons))
    return blocks


def button_blocks(buttons: Sequence[Choice]) -> list[dict[str, Any]]:
    """The actions block of a reply's buttons; none when Slack shows none of them."""
    shown = _buttons(slack_buttons(buttons), 0)
    return [{"type": "actions", "block_id": LIVE_BLOCK_ID, "elements": shown}] if shown else []


def _buttons(choices: Sequence[Choice], start: int) -> list[dict[str, Any]]:
    buttons = []
    for index, choice in enumerate(choices, start):
        button: dict[str, Any] = {
            "type": "button",
            "action_id": f"{LINK_ACTION if choice.url else 'choice-'}{index}",
            "text": {
                "type": "plain_text",
                "text": ellipsize(choice.label, BUTTON_TEXT_LIMIT),
                "emoji": True,
            },
        }
        button.update({"url": choice.url} if choice.url else {"value": choice.token})
        if choice.style in ("primary", "danger"):
            button["style"] = choice.style
        buttons.append(button)
    return buttons


def closed_choice_blocks(prompt: str, outcome: str) -> list[dict[str, Any]]:
    """The prompt with the outcome where the buttons were."""
    blocks = [_section(prompt)] if prompt else []
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": escape_angle_brackets(outcome)}],
        }
    )
    return blocks


# ---- the agent's commands and App Home -----------------------------------------------------------

_RE_BANG = re.compile(r"^!([A-Za-z][A-Za-z0-9_-]*)(\s.*)?$", re.DOTALL)


def agent_spelling(text: str, agent_commands: Sequence[str]) -> str:
    """`!name args` for one of the agent's commands -> `/name args`, the text the agent expects
    (typed `/name` is Slack's own slash command, so people type `!`). Ours, a doubled `!!` and
    anything else stay as typed: the bot reads those."""
    match = _RE_BANG.match(text.strip())
    if match is None or match.group(1) not in agent_commands:
        return text
    return f"/{match.group(1)}{match.group(2) or ''}"


@dataclass(frozen=True, slots=True)
class RecentConversation:
    """One conversation a person had with the bot, for App Home."""

    channel: str
    thread: str
    when: float  # time.time() of their last message
    first_words: str


HOME_WORDS = 60  # characters of the last message shown in App Home
HOME_RECENT = 10  # conversations shown per person


def home_view(
    ours: Sequence[tuple[str, str]],
    agents: Sequence[MenuCommand],
    recent: Sequence[RecentConversation],
) -> dict[str, Any]:
    """The App Home view of someone allowed to chat: the commands (ours with `!`, then the
    agent's last listed) and their recent conversations, newest first."""
    lines = [f"`!{name}` — {escape_angle_brackets(summary)}" for name, summary in ours]
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": "Switchboard"}},
        _section("Write to the bot in a DM, or mention it in a channel. Commands:"),
        {"type": "section", "text": {"type": "mrkdwn", "text": _capped("\n".join(lines))}},
    ]
    if agents:
        shown = []
        for command in agents:
            hint = f" _{escape_angle_brackets(command.hint)}_" if command.hint else ""
            about = (
                f" — {escape_angle_brackets(command.description)}" if command.description else ""
            )
            shown.append(f"`!{command.name}`{hint}{about}")
        blocks.append(_section("The agent's own commands:"))
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": _capped("\n".join(shown))}}
        )
    blocks.append({"type": "divider"})
    if recent:
        blocks.append(_section("Your recent conversations:"))
        rows = []
        for item in recent[:HOME_RECENT]:
            where = f"<#{item.channel}>" if not item.channel.startswith("D") else "our DM"
            thread = " (thread)" if item.thread else ""
            words = escape_angle_brackets(ellipsize(item.first_words, HOME_WORDS))
            when = f"<!date^{int(item.when)}^{{date_short_pretty}} {{time}}|{_iso(item.when)}>"
            rows.append(f"• {where}{thread}, {when}: {words}")
        blocks.append(
            {"type": "section", "text": {"type": "mrkdwn", "text": _capped("\n".join(rows))}}
        )
    else:
        blocks.append(_section("No conversations with the bot yet."))
    return {"type": "home", "blocks": blocks}


def stranger_home_view() -> dict[str, Any]:
    """The App Home view of someone who may not chat with the bot."""
    return {
        "type": "home",
        "blocks": [_section("You do not have access to this bot. Ask its admin to add you.")],
    }


def _capped(text: str) -> str:
    return ellipsize(text, SECTION_TEXT_LIMIT)


def _iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
