"""Switchboard settings: environment (`SWITCHBOARD_*`, nested with `__`), an optional JSON file
named by `SWITCHBOARD_CONFIG`, then defaults, in that order of precedence."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import secrets
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

log = logging.getLogger(__name__)

AgentName = Literal["kiro", "claude", "codex", "generic"]
ENV_PREFIX = "SWITCHBOARD_"


class ConfigError(Exception):
    """A setting has a value Switchboard cannot use; names the setting, and the command-line
    option too when the value came from one."""

    def __init__(self, setting: str, problem: str, *, option: str = "") -> None:
        self.setting = setting
        self.problem = problem
        self.option = option
        named = f"{option} ({setting})" if option else f"setting {setting}"
        super().__init__(f"Invalid {named}: {problem}")


def _split_ids(value: object) -> object:
    """A user-id list as the environment writes it ("1, 2"), as one id, or as a list."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, list):
        return [str(item).strip() for item in value if str(item).strip()]
    return value


UserIds = Annotated[list[str], NoDecode]


def _shell_words(value: str) -> str:
    try:
        shlex.split(value)
    except ValueError as exc:  # an unbalanced quote or a trailing backslash
        raise ValueError(f"cannot be split into words ({exc}); check its quotes") from exc
    return value


# The kinds of file `SWITCHBOARD_FILE_TYPES` may allow (executables never are).
FILE_TYPE_CATEGORIES = ("image", "audio", "video", "text", "pdf", "document", "archive")


class RetrySettings(BaseModel):
    transient_retries: int = Field(default=3, ge=0, le=10)
    base_delay: float = Field(default=2.0, ge=0)
    jitter: float = Field(default=0.25, ge=0, le=1)
    reconnects: int = Field(default=3, ge=0, le=10)


class SurfaceAccess(BaseModel):
    """Who may use a surface. Empty means nobody. Approvers may answer anyone's tool approvals;
    admins may do everything."""

    allowed_users: UserIds = []
    approvers: UserIds = []
    admins: UserIds = []

    _split = field_validator("allowed_users", "approvers", "admins", mode="before")(_split_ids)

    @property
    def nobody_allowed(self) -> bool:
        """No list names anyone, so nobody can use the surface (every role may chat)."""
        return not (self.allowed_users or self.approvers or self.admins)


class TelegramSettings(SurfaceAccess):
    token: str = ""
    api_url: str = ""  # a local Bot API server or a test fake; default api.telegram.org
    allowed_chats: UserIds = []  # groups (ids) where the bot may answer; DMs need only users
    webhook_url: str = ""  # public HTTPS URL Telegram posts updates to; empty = long polling
    webhook_secret: str = ""  # required with webhook_url; checked on every update
    webhook_listen: str = "0.0.0.0"
    webhook_port: int = Field(default=8443, ge=1, le=65535)

    _split_chats = field_validator("allowed_chats", mode="before")(_split_ids)

    @model_validator(mode="after")
    def _webhook_needs_secret(self) -> TelegramSettings:
        if self.webhook_url and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", self.webhook_secret):
            raise ValueError(
                "webhook mode needs SWITCHBOARD_TELEGRAM__WEBHOOK_SECRET "
                "(1-256 characters of A-Z, a-z, 0-9, _ and -)"
            )
        return self


class SlackSettings(SurfaceAccess):
    bot_token: str = ""
    app_token: str = ""  # Socket Mode; without it, HTTP mode needs signing_secret
    signing_secret: str = ""
    port: int = Field(default=3000, ge=1, le=65535)  # HTTP mode
    listen: str = "0.0.0.0"  # HTTP mode
    api_url: str = ""  # the Web API base (tests, GovSlack); default slack.com/api/

    @model_validator(mode="after")
    def _one_mode(self) -> SlackSettings:
        if self.bot_token and not (self.app_token or self.signing_secret):
            raise ValueError(
                "Slack needs SWITCHBOARD_SLACK__APP_TOKEN (Socket Mode) or "
                "SWITCHBOARD_SLACK__SIGNING_SECRET (HTTP mode) with the bot token"
            )
        return self


class DiscordSettings(SurfaceAccess):
    token: str = ""
    allowed_guilds: UserIds = []  # empty: any guild the bot is in (users are still checked)
    allowed_channels: UserIds = []  # empty: any channel of an allowed guild
    shard_count: int = Field(default=0, ge=0)  # 0: one connection; N: shard with N shards
    api_url: str = ""  # REST base (tests); default discord.com/api/v10
    gateway_url: str = ""  # gateway websocket (tests); default from discord.py

    _split_places = field_validator("allowed_guilds", "allowed_channels", mode="before")(_split_ids)


# -- the dashboard (issue 15): the web chat served on the HTTP server of `switchboard run` ------


def _token_digests(value: object) -> object:
    """`SWITCHBOARD_DASHBOARD__TOKENS` as the environment writes it (JSON text) or as the file
    does: user id -> the SHA-256 hex digest of that user's token (never the token itself)."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object of user id -> SHA-256 hex digest")
    digests: dict[str, str] = {}
    for user, digest in value.items():
        if not str(user).strip():
            raise ValueError("names an empty user id")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", digest):
            raise ValueError(
                f"the entry for {user!r} is not a SHA-256 hex digest (64 hex digits); "
                "`switchboard dashboard-token USER` prints one"
            )
        digests[str(user).strip()] = digest.lower()
    return digests


class DashboardSettings(SurfaceAccess):
    enabled: bool = False
    tokens: Annotated[dict[str, str], NoDecode] = {}
    session_hours: float = Field(default=12.0, gt=0, le=24 * 30)

    _digests = field_validator("tokens", mode="before")(_token_digests)


# -- projects (issue 14): named (workspace, agent) pairs a conversation chooses among ---------


class NamedAgentSettings(BaseModel):
    """One entry of `SWITCHBOARD_AGENTS`: a preset with its own command, mode and model."""

    model_config = {"extra": "forbid"}

    agent: AgentName
    agent_command: str = ""
    mode: str = ""
    model: str = ""

    _words = field_validator("agent_command")(_shell_words)


class ProjectSettings(BaseModel):
    """One entry of `SWITCHBOARD_PROJECTS`. `agent` is a preset or a `SWITCHBOARD_AGENTS` name
    ("" : the agent of `SWITCHBOARD_AGENT`); `agents` names the other agents `/agent NAME` may
    switch to; `users` ("surface:id") limits who may use it (empty: everyone who may chat);
    `approvals` which permission requests are answered without a card (bot/trust.py)."""

    model_config = {"extra": "forbid"}

    workspace: Path
    agent: str = ""
    agent_command: str = ""
    mode: str = ""
    model: str = ""
    users: UserIds = []
    agents: UserIds = []
    approvals: str = "ask"  # "ask" | "reads" | "trusted": checked by bot/projects.py

    _split = field_validator("users", "agents", mode="before")(_split_ids)
    _words = field_validator("agent_command")(_shell_words)


class DuplicateName(ValueError):
    """A JSON object names the same entry twice (exactly, or differing only in case)."""

    def __init__(self, name: str, other: str) -> None:
        self.name = name
        self.other = other
        same = "twice" if name == other else f"twice ({other!r} and {name!r} differ only in case)"
        super().__init__(f"names {name!r} {same}; each name must be unique")


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, str] = {}
    for name, _ in pairs:
        other = seen.get(name.casefold())
        if other is not None:
            raise DuplicateName(name, other)
        seen[name.casefold()] = name
    return dict(pairs)


class _FileObject(dict[str, Any]):
    """A JSON object read from the config file, remembering a key it gave twice (which a plain
    dict would silently keep the last of)."""

    twice: tuple[str, str] | None = None


def _file_object(pairs: list[tuple[str, Any]]) -> _FileObject:
    found = _FileObject(pairs)
    try:
        _unique_pairs(pairs)
    except DuplicateName as exc:
        found.twice = (exc.name, exc.other)
    return found


def _named_entries(value: object) -> object:
    """`SWITCHBOARD_PROJECTS` / `SWITCHBOARD_AGENTS` as the environment writes them (JSON text,
    read so a name given twice is seen, which `json.loads` would hide), or as the file does."""
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value, object_pairs_hook=_unique_pairs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not valid JSON ({exc})") from exc
        if not isinstance(value, dict):
            raise ValueError("must be a JSON object of named entries")
    if isinstance(value, _FileObject) and value.twice is not None:
        raise DuplicateName(*value.twice)
    if isinstance(value, dict):
        _unique_pairs(list(value.items()))  # two names differing only in case
    return value


# -- the HTTP server of `switchboard run` (issue 15): /healthz, /readyz, /metrics, pages --


def _word_list(value: object) -> object:
    """A list as the environment writes it: JSON (`["a", "b"]`) or comma-separated (`a, b`)."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not a JSON list ({exc.msg})") from exc
    return _split_ids(value)


def _networks(value: list[str]) -> list[str]:
    for entry in value:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError as exc:
            raise ValueError(f"{entry!r} is not an IP address or CIDR network") from exc
    return value


class HttpSettings(BaseModel):
    """`SWITCHBOARD_HTTP__LISTEN` / `__PORT` (`off`: no server) / `__METRICS_TOKEN` (when set,
    /metrics wants `Authorization: Bearer <token>`); the edge (issue 21, bot/http_edge.py):
    `__TRUSTED_PROXIES` (peers whose `X-Forwarded-For` names the client), `__ALLOWED_HOSTS`
    (empty: the listen address and localhost; `*`: any), `__HEADER_TIMEOUT` (a request's line
    and headers, and an idle keep-alive), `__MAX_CONNECTIONS_PER_ADDRESS`."""

    listen: str = "127.0.0.1"
    port: int | None = Field(default=8765, ge=0, le=65535)  # None: `off`; 0: any free port
    metrics_token: str = ""
    trusted_proxies: Annotated[list[str], NoDecode] = []
    allowed_hosts: Annotated[list[str], NoDecode] = []
    header_timeout: float = Field(default=15.0, gt=0, le=3600)
    max_connections_per_address: int = Field(default=32, ge=1, le=100_000)

    _lists = field_validator("trusted_proxies", "allowed_hosts", mode="before")(_word_list)
    _proxies = field_validator("trusted_proxies")(_networks)

    @field_validator("port", mode="before")
    @classmethod
    def _off(cls, value: object) -> object:
        if isinstance(value, str):
            word = value.strip().lower()
            if word == "off":
                return None
            if not word.isdigit():
                raise ValueError("must be a port number (0 for any free port) or off")
        return value


def _default_state_path() -> str:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "switchboard" / "state.db")


MIN_CLUSTER_KEY = 32
MAKE_KEY = 'make one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'


def _default_replica_id() -> str:
    # Unique per process start: a replica that restarts is a new replica, and the one it
    # replaces is recovered as any dead replica is (bot/cluster.py).
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="ignore",
        validate_default=True,
    )

    agent: AgentName = "kiro"
    agent_command: str = ""
    workspace: Path = Field(default_factory=Path.cwd)
    model: str = ""
    prompt_timeout: float = Field(default=600.0, gt=0)
    request_timeout: float = Field(default=30.0, gt=0)
    initialize_timeout: float = Field(default=90.0, gt=0)
    cancel_grace: float = Field(default=10.0, ge=0)
    shutdown_grace: float = Field(default=2.0, ge=0)
    allow_ungated_tools: bool = False
    agent_mode: str = ""  # the session mode that asks before tools; "" = the preset's or detected
    approval_timeout: float = Field(default=300.0, gt=0)
    queue_limit: int = Field(default=5, ge=1, le=100)
    # what a message that arrives mid-turn does without a press (issue 24, bot/busy.py)
    busy_mode: Literal["queue", "steer", "interrupt"] = "queue"
    # -- the runtime pool (issue 14): agent processes live at once; each one idle this long stops --
    max_agents: int = Field(default=8, ge=1, le=1000)
    runtime_idle: float = Field(default=900.0, gt=0)
    # -- where agents run (issue 21, acp/sandbox.py, acp/agent_env.py) --
    agent_sandbox: Literal["auto", "bwrap", "off"] = "auto"
    agent_home: Path | None = None  # the agent's HOME; default: `agent-home` beside the state
    agent_user: str = ""  # run agents as this user (Switchboard must be able to switch users)
    agent_env: Annotated[list[str], NoDecode] = []  # more names passed on: NAME, or PREFIX_*
    dedupe_ttl: float = Field(default=86400.0, gt=0)
    # -- what a reply shows besides the answer (issue 13: progress and files out) --
    tool_summary: bool = True  # the final keeps "Tools: 2 reads, 1 edit"
    reply_file_after: int = Field(default=0, ge=0, le=1000)  # messages; 0: never as a .md file
    # an edit's whole patch goes with its approval card as a .diff file past this many lines
    diff_file_after: int = Field(default=40, ge=0, le=100_000)
    state: str = Field(default_factory=_default_state_path)
    # -- replicas on one Redis store (issue 16, bot/cluster.py) --
    replica_id: str = Field(
        default_factory=_default_replica_id, min_length=1, max_length=100, pattern=r"^[\w.-]+$"
    )
    lease_ttl: float = Field(default=10.0, ge=1.0, le=300.0)  # seconds; renewed every third
    # Signs the events replicas relay to each other (bot/cluster.py `RelaySeal`); required with
    # a Redis state, unused with SQLite. A secret: never passed to agents, redacted in logs.
    cluster_key: str = Field(default="", repr=False)
    # -- a shared store's outage (issue 16): each call waits this long for Redis to answer again --
    state_wait: float = Field(default=10.0, ge=0, le=3600)
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    retry: RetrySettings = RetrySettings()
    # Files people attach (bot/attachments.py): per file, per message, which kinds.
    max_file_bytes: int = Field(default=20 * 1024 * 1024, ge=0)
    max_files: int = Field(default=10, ge=0, le=100)
    file_types: Annotated[list[str], NoDecode] = list(FILE_TYPE_CATEGORIES)
    projects: Annotated[dict[str, ProjectSettings], NoDecode] = {}
    agents: Annotated[dict[str, NamedAgentSettings], NoDecode] = {}
    default_project: str = ""
    telegram: TelegramSettings = TelegramSettings()
    slack: SlackSettings = SlackSettings()
    discord: DiscordSettings = DiscordSettings()
    dashboard: DashboardSettings = DashboardSettings()
    # -- operations (issue 15): the HTTP server, and how long the audit log keeps its records --
    http: HttpSettings = HttpSettings()
    audit_days: float = Field(default=90.0, gt=0)

    _words = field_validator("agent_command")(_shell_words)

    _named = field_validator("projects", "agents", mode="before")(_named_entries)

    _env_names = field_validator("agent_env", mode="before")(_word_list)

    @field_validator("cluster_key")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if value and len(value) < MIN_CLUSTER_KEY:
            raise ValueError(f"too short; use at least {MIN_CLUSTER_KEY} characters ({MAKE_KEY})")
        return value

    @field_validator("file_types", mode="before")
    @classmethod
    def _file_categories(cls, value: object) -> object:
        names = _split_ids(value)
        if isinstance(names, list):
            names = [str(name).lower() for name in names]
            unknown = [name for name in names if name not in FILE_TYPE_CATEGORIES]
            if unknown:
                raise ValueError(
                    f"unknown file type {unknown[0]!r}; choose from "
                    + ", ".join(FILE_TYPE_CATEGORIES)
                )
        return names

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _JsonFileSource(settings_cls))


class _JsonFileSource(PydanticBaseSettingsSource):
    """The file named by SWITCHBOARD_CONFIG. A broken file must not stop the bot: warn, use
    defaults."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = os.environ.get(f"{ENV_PREFIX}CONFIG", "")
        if not path:
            return {}
        try:
            text = Path(path).read_text(encoding="utf-8")
            data = json.loads(text, object_pairs_hook=_file_object)
        except FileNotFoundError:
            log.warning(
                "config file %s (%sCONFIG) does not exist; using the environment and defaults",
                path,
                ENV_PREFIX,
            )
            return {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            log.warning("config file %s is not valid JSON (%s); using defaults", path, exc)
            return {}
        if not isinstance(data, dict):
            log.warning("config file %s must hold a JSON object; using defaults", path)
            return {}
        unknown = list(_unknown_keys(data, self.settings_cls))
        if unknown:
            log.warning(
                "config file %s has unknown keys, which are ignored (check their spelling): %s",
                path,
                ", ".join(unknown),
            )
        return data


def _unknown_keys(data: dict[str, Any], model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Dotted paths of the keys no setting reads, at any depth (`telegram.tokn`)."""
    fields = model.model_fields
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            yield prefix + key
            continue
        nested = field.annotation
        if isinstance(value, dict) and isinstance(nested, type) and issubclass(nested, BaseModel):
            yield from _unknown_keys(value, nested, f"{prefix}{key}.")


def _setting_name(loc: tuple[int | str, ...]) -> str:
    if len(loc) >= 2 and loc[0] in ("projects", "agents"):  # SWITCHBOARD_PROJECTS["web"].users
        tail = "".join(f".{part}" if isinstance(part, str) else f"[{part}]" for part in loc[2:])
        return f'{ENV_PREFIX}{str(loc[0]).upper()}["{loc[1]}"]{tail}'
    return ENV_PREFIX + "__".join(str(part).upper() for part in loc)


def _problem(pydantic_message: str) -> str:
    """pydantic's "Input should be greater than 0" reads as "must be greater than 0" after the
    setting's name; a validator's own "Value error, ..." loses its prefix."""
    message = pydantic_message.removeprefix("Value error, ")
    if message == "Field required":
        return "is required"
    if message == "Extra inputs are not permitted":
        return "is not a setting here; check its spelling"
    if message.startswith("Input should be "):
        return "must be " + message.removeprefix("Input should be ")
    return message


def load_settings(**overrides: Any) -> Settings:
    """Build Settings, turning a validation failure into a ConfigError naming the setting."""
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(_setting_name(tuple(first["loc"])), _problem(first["msg"])) from exc
    except SettingsError as exc:  # a nested setting whose text is not JSON
        found = re.search(r'field "(\w+)"', str(exc))
        name = _setting_name((found.group(1),)) if found else f"{ENV_PREFIX}*"
        raise ConfigError(name, "expected a JSON object (or set its parts with __)") from exc
