"""Pure conversions for Telegram: update payloads (the Bot API's JSON, as dicts) -> what a person
did (Markdown -> the HTML subset Telegram accepts is `markup.py`).

Who may reach the bot is decided in two places: the bot's allowlist of users (not here), and
group gating (here): in groups the bot listens only in allowlisted chats, and only to messages
addressed to it — a mention, a reply to one of its messages, or a command (bare if it is one of
ours, or `/cmd@botname`)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from surfaces.base import ConversationKey, Inbound, IncomingFile, MenuCommand, UserRef
from surfaces.text import ellipsize

SURFACE = "telegram"
MAX_CALLBACK_DATA = 64  # bytes (Bot API)
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # the cloud Bot API hands bots no larger file
_RE_COMMAND = re.compile(r"^/([A-Za-z0-9_]{1,32})(?:@([A-Za-z0-9_]+))?(?=\s|$)")


# ---- who and where --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BotIdentity:
    id: int
    username: str


@dataclass(frozen=True, slots=True)
class GroupGate:
    """Where the bot listens outside private chats, and which bare commands are its own."""

    allowed_chats: frozenset[str]
    commands: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Press:
    """A button press, before the adapter wires its answer."""

    key: ConversationKey
    user: UserRef
    data: str
    event_id: str
    query_id: str
    message_id: int


def is_private(key: ConversationKey) -> bool:
    """Private chats have positive ids (the user's id); groups and channels negative ones."""
    return not key.chat.startswith("-")


def chat_and_thread(key: ConversationKey) -> tuple[int, int | None]:
    return int(key.chat), (int(key.thread) if key.thread else None)


def user_ref(user: Mapping[str, Any]) -> UserRef:
    name = " ".join(str(user[part]) for part in ("first_name", "last_name") if user.get(part))
    return UserRef(str(user["id"]), name or str(user.get("username") or ""))


def conversation_key(message: Mapping[str, Any]) -> ConversationKey:
    """The private chat, or the (group, forum topic) pair; "" outside topics."""
    chat = message["chat"]
    thread = message.get("message_thread_id")
    topic = str(thread) if thread and message.get("is_topic_message") else ""
    return ConversationKey(SURFACE, str(chat["id"]), topic)


@dataclass(frozen=True, slots=True)
class FileRef:
    """One file a message carries, as the Bot API describes it (not downloaded)."""

    file_id: str
    name: str
    mime: str
    size: int | None
    kind: str  # one of surfaces.base.FILE_KINDS


@dataclass(frozen=True, slots=True)
class Received:
    """A message the bot may see, before the adapter wires its files' downloads.

    `refusal`: the message carries something no agent can take (a game, an animated sticker):
    what it is and the sentence saying why reach the person through the bot (after its access
    check) as a file of that name whose download is refused. `album`: the media group it is a
    part of ("" when none); `addressed`: in a group, whether this part alone is addressed to
    the bot."""

    key: ConversationKey
    user: UserRef
    text: str
    event_id: str
    files: tuple[FileRef, ...] = ()
    refusal: tuple[str, str] | None = None  # (what it is, why it is refused)
    album: str = ""
    addressed: bool = True
    message_id: int = 0  # in its chat: what a question for this person replies to

    def inbound(self, files: Sequence[IncomingFile] = ()) -> Inbound:
        return Inbound(self.key, self.user, self.text, self.event_id, files=tuple(files))


def received_from_update(
    update: Mapping[str, Any],
    me: BotIdentity,
    gate: GroupGate,
    agent_commands: Mapping[str, str] | None = None,
) -> Received | None:
    """What a message update carries, if the bot may see it; None to ignore it. A part of an
    album in a group comes back even when it is not addressed (`addressed` False): the album is
    addressed when any of its parts is. `agent_commands` maps this chat's menu names of the
    agent's commands to the text the bot expects (`agent_status` -> `//status`)."""
    message = update.get("message")
    if not isinstance(message, Mapping):
        return None  # edits, channel posts, membership changes: not for us
    sender = message.get("from")
    if not isinstance(sender, Mapping) or sender.get("is_bot"):
        return None
    files, refusal, described = message_content(message)
    raw = message.get("text") or message.get("caption") or ""
    album = str(message.get("media_group_id") or "")
    if not raw.strip() and not files and not refusal and not described:
        return None  # a service message (someone joined, a pin): nothing was said
    chat = message["chat"]
    addressed = True
    if chat.get("type") in ("group", "supergroup"):
        if str(chat["id"]) not in gate.allowed_chats:
            return None
        addressed = is_addressed(message, me, gate, agent_commands or {})
        if not addressed and not album:
            return None
    elif chat.get("type") != "private":
        return None
    text = strip_mention(raw, me.username)
    text = agent_command_text(text, agent_commands or {})
    if described:
        text = f"{text}\n\n{described}" if text else described
    if not text and not files and not refusal and not album:
        return None
    return Received(
        conversation_key(message),
        user_ref(sender),
        text,
        str(update["update_id"]),
        files,
        refusal,
        album,
        addressed,
        int(message.get("message_id") or 0),
    )


# What a message may carry besides text, and the kind of file each is.
_MEDIA_KINDS = (
    ("document", "document"),
    ("audio", "audio"),
    ("voice", "voice"),
    ("video", "video"),
    ("video_note", "video"),
    ("animation", "video"),
)
# Content that carries nothing an agent can take: what it is called, and why it is refused
# (the bot says "<what> was not sent to the agent: <why>").
_REFUSED = {
    "game": ("The game", "An agent cannot play or read a Telegram game."),
    "story": ("The story", "Telegram does not let bots read stories."),
    "paid_media": ("The paid media", "Telegram keeps paid media locked for bots."),
    "invoice": ("The invoice", "An invoice carries nothing an agent can read."),
    "giveaway": ("The giveaway", "A giveaway carries nothing an agent can read."),
    "giveaway_winners": ("The giveaway", "A giveaway carries nothing an agent can read."),
}
_ANIMATED_STICKER = (
    "The animated sticker",
    "Animated stickers carry nothing an agent can read; send a picture or text.",
)
# Each refusal by what it is called: how one travels to another replica (files.py).
REFUSALS: dict[str, str] = dict((*_REFUSED.values(), _ANIMATED_STICKER))


def message_content(
    message: Mapping[str, Any],
) -> tuple[tuple[FileRef, ...], tuple[str, str] | None, str]:
    """(files, refusal, description) of what a message carries besides its text: files to
    download; a sentence for content no agent can take; a text description of content that
    is only words (a location, a contact, a poll, a dice roll)."""
    files: list[FileRef] = []
    photo = largest_photo(message.get("photo"))
    if photo is not None:
        files.append(photo)
    for field_name, kind in _MEDIA_KINDS:
        item = message.get(field_name)
        if isinstance(item, Mapping) and item.get("file_id"):
            files.append(_file_ref(item, kind))
            break  # a message carries at most one of these (an animation also as a document)
    sticker = message.get("sticker")
    refusal: tuple[str, str] | None = None
    if isinstance(sticker, Mapping) and sticker.get("file_id"):
        if sticker.get("is_animated") or sticker.get("is_video"):
            refusal = _ANIMATED_STICKER
        else:  # a static sticker is a WebP picture
            files.append(
                FileRef(str(sticker["file_id"]), "", "image/webp", _size(sticker), "image")
            )
    for field_name, refused in _REFUSED.items():
        if field_name in message and not refusal:
            refusal = refused
    return tuple(files), refusal, describe(message)


def largest_photo(sizes: object, limit: int = MAX_DOWNLOAD_BYTES) -> FileRef | None:
    """The largest size of a photo Telegram lets a bot download (sizes come smallest first)."""
    if not isinstance(sizes, Sequence) or not sizes:
        return None
    usable = [size for size in sizes if isinstance(size, Mapping) and size.get("file_id")]
    within = [size for size in usable if (_size(size) or 0) <= limit] or usable[:1]
    if not within:
        return None
    best = max(within, key=lambda size: (_size(size) or 0, int(size.get("width") or 0)))
    return FileRef(str(best["file_id"]), "", "image/jpeg", _size(best), "image")


def _size(item: Mapping[str, Any]) -> int | None:
    size = item.get("file_size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def _file_ref(item: Mapping[str, Any], kind: str) -> FileRef:
    return FileRef(
        str(item["file_id"]),
        str(item.get("file_name") or ""),
        str(item.get("mime_type") or ""),
        _size(item),
        kind,
    )


def describe(message: Mapping[str, Any]) -> str:
    """Content that is only words, as a line the agent can read ("" for none)."""
    venue = message.get("venue")
    location = message.get("location")
    if isinstance(venue, Mapping):
        where = venue.get("location") or {}
        return (
            f"[Venue: {venue.get('title', '')}, {venue.get('address', '')} "
            f"({where.get('latitude')}, {where.get('longitude')})]"
        )
    if isinstance(location, Mapping):
        return f"[Location: {location.get('latitude')}, {location.get('longitude')}]"
    contact = message.get("contact")
    if isinstance(contact, Mapping):
        name = " ".join(
            str(contact[part]) for part in ("first_name", "last_name") if contact.get(part)
        )
        return f"[Contact: {name}, {contact.get('phone_number', '')}]"
    poll = message.get("poll")
    if isinstance(poll, Mapping):
        options = "; ".join(
            str(option.get("text", ""))
            for option in poll.get("options") or ()
            if isinstance(option, Mapping)
        )
        return f"[Poll: {poll.get('question', '')} — {options}]"
    dice = message.get("dice")
    if isinstance(dice, Mapping):
        return f"[Dice {dice.get('emoji', '')}: {dice.get('value')}]"
    return ""


def agent_command_text(text: str, agent_commands: Mapping[str, str]) -> str:
    """`/agent_status args` -> `//status args`, `/foo_bar` -> `/foo-bar`: a menu name of the
    agent's command back to the text the bot expects (after the mention was stripped)."""
    command = _RE_COMMAND.match(text)
    if command is None:
        return text
    target = agent_commands.get(command.group(1).lower())
    if target is None:
        return text
    return f"{target}{text[command.end() :]}"


def is_addressed(
    message: Mapping[str, Any],
    me: BotIdentity,
    gate: GroupGate,
    agent_commands: Mapping[str, str] | None = None,
) -> bool:
    """In a group: a command for us (or one of the agent's in this chat's menu), a mention of
    us, or a reply to one of our messages."""
    text = message.get("text") or message.get("caption") or ""
    command = _RE_COMMAND.match(text)
    if command is not None:
        target = command.group(2)
        if target is not None:
            return target.lower() == me.username.lower()
        name = command.group(1).lower()
        if name in gate.commands or name in (agent_commands or {}):
            return True
    if mentions(text, me.username):
        return True
    entities = message.get("entities") or message.get("caption_entities") or ()
    for entity in entities:
        if entity.get("type") == "text_mention" and (entity.get("user") or {}).get("id") == me.id:
            return True
    replied = message.get("reply_to_message")
    if not isinstance(replied, Mapping) or (replied.get("from") or {}).get("id") != me.id:
        return False
    # In a forum topic every message "replies" to the topic's first message: that is no reply.
    topic_root = message.get("is_topic_message") and (
        replied.get("forum_topic_created")
        or replied.get("message_id") == message.get("message_thread_id")
    )
    return not topic_root


def _mention_pattern(username: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w@/])@{re.escape(username)}(?!\w)", re.IGNORECASE)


def mentions(text: str, username: str) -> bool:
    return bool(username) and _mention_pattern(username).search(text) is not None


def strip_mention(text: str, username: str) -> str:
    """Drop "@botname" (and "/cmd@botname" -> "/cmd"); what remains is what the person asked."""
    if not username:
        return text.strip()
    command = _RE_COMMAND.match(text)
    if command is not None and (command.group(2) or "").lower() == username.lower():
        text = f"/{command.group(1)}{text[command.end() :]}"
    text = _mention_pattern(username).sub("", text)
    text = re.sub(r"^[\s,:;]+", "", text)  # "@bot, do this" -> "do this"
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def press_from_update(update: Mapping[str, Any], gate: GroupGate) -> Press | None:
    query = update.get("callback_query")
    if not isinstance(query, Mapping) or not isinstance(query.get("message"), Mapping):
        return None
    message = query["message"]
    if (
        message.get("chat", {}).get("type") != "private"
        and str(message["chat"]["id"]) not in gate.allowed_chats
    ):
        return None
    return Press(
        conversation_key(message),
        user_ref(query["from"]),
        str(query.get("data") or ""),
        str(update["update_id"]),
        str(query["id"]),
        int(message["message_id"]),
    )


def command_menu(commands: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """(name, description) pairs Telegram accepts: 1-32 of a-z 0-9 _, 1-256 characters."""
    menu = []
    for name, description in commands:
        name = name.lower()
        if re.fullmatch(r"[a-z0-9_]{1,32}", name) and description.strip():
            menu.append((name, description.strip()[:256]))
    return menu[:100]


MAX_MENU = 100  # commands per scope (Bot API)
_RE_MENU_NAME = re.compile(r"[a-z0-9_]{1,32}")


@dataclass(frozen=True, slots=True)
class AgentMenu:
    """One chat's command menu: ours, then the agent's under names Telegram accepts; `targets`
    maps each of the agent's menu names to the text the bot expects for it."""

    entries: tuple[tuple[str, str], ...]
    targets: Mapping[str, str]


def agent_menu(ours: Sequence[tuple[str, str]], commands: Sequence[MenuCommand]) -> AgentMenu:
    """Ours (already valid) and the agent's commands mapped to Telegram's rules: lowercase,
    other characters as `_`, at most 32; a name that clashes with ours becomes `agent_<name>`
    and says it is the agent's; a name taken already is dropped; at most 100 in all."""
    entries = list(ours)[:MAX_MENU]
    taken = {name for name, _ in entries}
    targets: dict[str, str] = {}
    for command in commands:
        spelled = command.name.strip().lstrip("/")
        base = re.sub(r"[^a-z0-9_]", "_", spelled.lower())[:32]
        if not spelled or not base.strip("_"):
            continue
        clash = base in taken and base not in targets
        name = f"agent_{base}"[:32] if clash else base
        if name in taken or not _RE_MENU_NAME.fullmatch(name) or len(entries) >= MAX_MENU:
            continue
        about = command.description.strip() or f"The agent's /{spelled}"
        if clash:
            about = f"The agent's /{spelled}: {about}"
        if command.hint.strip():
            about = f"{about} ({command.hint.strip()})"
        entries.append((name, ellipsize(" ".join(about.split()), 256)))
        taken.add(name)
        targets[name] = f"//{spelled}" if clash else f"/{spelled}"
    return AgentMenu(tuple(entries), targets)


def choice_rows(labels: Sequence[str]) -> list[list[int]]:
    """Indices of buttons per keyboard row: one row if the labels are short, else one each."""
    if sum(len(label) for label in labels) <= 30 and len(labels) <= 4:
        return [list(range(len(labels)))]
    return [[index] for index in range(len(labels))]


def fits_callback_data(token: str) -> bool:
    return 0 < len(token.encode("utf-8")) <= MAX_CALLBACK_DATA
