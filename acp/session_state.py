"""What an agent has told us about one session, kept up to date whenever it says it: during a
turn, between turns, before the first prompt and while a `session/load` replays the history.

`SessionState.apply` reads one notification (a `session/update` state variant, or one of
kiro-cli's `_kiro.dev/...` extensions) into the state and returns the notice it stands for, if
any. Every agent string and list in it is read defensively, bounded, by `acp.state_parsing`."""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from acp._dispatch import parse_usage_update
from acp.backends import Backend
from acp.client import _acp_error_from
from acp.gate_options import switches_approvals_off
from acp.state_parsing import (
    MAX_DESCRIPTION,
    MAX_NAME,
    MAX_TITLE,
    clean,
    compaction_phase,
    failure_reason,
    http_status,
    parse_commands,
    parse_config_options,
    parse_legacy_models,
    sign_in_link,
)
from acp.types import (
    AgentCommand,
    ConfigOption,
    NoticeKind,
    SessionNotice,
    UsageInfo,
)
from config import valid_text

log = logging.getLogger(__name__)

MAX_SIGN_IN_SERVERS = 64
MAX_PENDING_NOTICES = 16
MAX_WARNING = 500
MAX_WARNINGS = 32  # distinct warnings told per session; more are the same noise

MODEL_CATEGORY = "model"
# kiro: a compaction failure is transient only if the facts say so.
_TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
_RE_TRANSIENT_REASON = re.compile(r"(?i)throttl|unavailable|timed? ?out|timeout")

NoticeSink = Callable[[SessionNotice], None]


class SessionState:
    """The agent's commands, context use, credits, config options (models among them), mode and
    title for one session. Notices go to `on_notice` once the bot listens (a few wait until
    then: an agent may speak before anyone listens)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.commands: tuple[AgentCommand, ...] = ()
        self.withheld_commands: tuple[str, ...] = ()  # names: see `_listed`
        self.usage: UsageInfo | None = None
        self.credits: float | None = None
        self.config_options: tuple[ConfigOption, ...] = ()
        self.legacy_models: tuple[str, ...] = ()
        self.legacy_model = ""
        self.legacy_mode = ""
        # How many notifications reported the current mode (the tool gate reads one that came
        # after its switch as the agent's word, even when it names the mode it was in).
        self.mode_reports = 0
        self.option_reports = 0  # config_option_update frames read (the gate's confirmations)
        self.title = ""
        # Told each new title (session_info_update) on the reader's stack: it must return at once.
        self.on_title: Callable[[str], None] | None = None
        self._sign_in_shown: set[str] = set()
        self._warned: set[str] = set()  # warnings already told, by text
        self._pending: deque[SessionNotice] = deque(maxlen=MAX_PENDING_NOTICES)
        self._on_notice: NoticeSink | None = None

    # ---- reading ----------------------------------------------------------------------------
    @property
    def command_names(self) -> tuple[str, ...]:
        return tuple(command.name for command in self.commands)

    @property
    def model_option(self) -> ConfigOption | None:
        """The config option that picks the model: category "model" whatever its id (an agent
        without categories may still call it "model")."""
        for option in self.config_options:
            if option.category == MODEL_CATEGORY:
                return option
        for option in self.config_options:
            if option.option_id == MODEL_CATEGORY and not option.category:
                return option
        return None

    @property
    def models(self) -> list[str]:
        option = self.model_option
        if option is not None:
            return [choice.value for choice in option.choices]
        return list(self.legacy_models)

    @property
    def model(self) -> str:
        option = self.model_option
        return option.current if option is not None else self.legacy_model

    @property
    def mode(self) -> str:
        for option in self.config_options:
            if option.category == "mode":
                return option.current
        return self.legacy_mode

    # ---- notices ----------------------------------------------------------------------------
    def listen(self, sink: NoticeSink | None) -> None:
        """Send notices to `sink` from now on, starting with any that waited."""
        self._on_notice = sink
        while sink is not None and self._pending:
            sink(self._pending.popleft())

    def warn(self, text: str) -> None:
        """A warning the agent put into its reply stream: one notice per distinct text."""
        detail = clean(text, MAX_WARNING)
        if detail in self._warned or len(self._warned) >= MAX_WARNINGS:
            return
        self._warned.add(detail)
        self._notice(SessionNotice(NoticeKind.AGENT_WARNING, detail=detail))

    def tell(self, notice: SessionNotice) -> None:
        """A notice of Switchboard's own about this session (the tool gate's)."""
        self._notice(notice)

    def _notice(self, notice: SessionNotice) -> None:
        sink = self._on_notice
        if sink is None:
            self._pending.append(notice)
            return
        try:
            sink(notice)
        except Exception:  # the reader serves every session: a listener's fault stays here
            log.exception("a session notice listener failed")

    # ---- writing ----------------------------------------------------------------------------
    def absorb_result(self, result: Any) -> None:
        """A session/new, session/load or session/set_config_option answer."""
        if not isinstance(result, dict):
            return
        if isinstance(result.get("configOptions"), list):
            self.config_options = parse_config_options(result["configOptions"])
        if "models" in result:
            self.legacy_models, self.legacy_model = parse_legacy_models(result["models"])
        modes = result.get("modes")
        if isinstance(modes, dict) and isinstance(modes.get("currentModeId"), str):
            self.legacy_mode = clean(modes["currentModeId"], MAX_NAME)

    def now_in_mode(self, mode: str) -> None:
        """The session is in `mode` (the agent said so, or accepted the switch to it); the mode
        config option, when there is one, says the same from now on."""
        self.legacy_mode = clean(mode, MAX_NAME)
        self.config_options = tuple(
            replace(option, current=self.legacy_mode) if option.category == "mode" else option
            for option in self.config_options
        )

    def chose(self, option_id: str, value: str) -> None:
        """A set_config_option the agent accepted without listing the options again."""
        self.config_options = tuple(
            ConfigOption(o.option_id, o.name, o.category, o.kind, value, o.choices)
            if o.option_id == option_id
            else o
            for o in self.config_options
        )

    def apply(self, method: str, params: Any) -> None:
        """One notification for this session; anything that is not state is ignored."""
        if not isinstance(params, dict):
            return
        try:
            if method == "session/update":
                self._apply_update(params.get("update"))
            elif method.startswith("_kiro.dev/"):
                self._apply_kiro(method, params)
        except Exception:  # a shape we did not foresee: this frame only
            log.exception("could not read %s into the session state", method)

    def _apply_update(self, update: Any) -> None:
        if not isinstance(update, dict):
            return
        variant = update.get("sessionUpdate")
        if variant == "available_commands_update":
            self._listed(parse_commands(update.get("availableCommands")))
        elif variant == "usage_update":
            self.usage = parse_usage_update(update)
        elif variant == "config_option_update":
            if isinstance(update.get("configOptions"), list):
                self.config_options = parse_config_options(update["configOptions"])
                self.option_reports += 1
                if any(option.category == "mode" for option in self.config_options):
                    self.mode_reports += 1
        elif variant == "current_mode_update":
            mode = update.get("currentModeId", update.get("modeId"))
            if isinstance(mode, str):
                self.now_in_mode(mode)
                self.mode_reports += 1
        elif variant == "session_info_update":
            if "title" in update:
                self._retitle(clean(update.get("title"), MAX_TITLE))

    def _listed(self, commands: tuple[AgentCommand, ...]) -> None:
        """The agent's command list: those that would switch its approvals off are withheld
        (never offered in /help or a menu, refused when typed: approvals are Switchboard's)."""
        self.commands = tuple(
            c for c in commands if not switches_approvals_off(c.name, c.description)
        )
        self.withheld_commands = tuple(
            c.name for c in commands if switches_approvals_off(c.name, c.description)
        )

    def _retitle(self, title: str) -> None:
        if title == self.title:
            return
        self.title = title
        if title and self.on_title is not None:
            try:
                self.on_title(title)
            except Exception:  # the reader serves every session: a listener's fault stays here
                log.exception("a session title listener failed")

    def _apply_kiro(self, method: str, params: dict[str, Any]) -> None:
        if method == "_kiro.dev/commands/available":
            self._listed(parse_commands(params.get("commands")))
        elif method == "_kiro.dev/metadata":
            self._kiro_metadata(params)
        elif method == "_kiro.dev/compaction/status":
            self._kiro_compaction(params)
        elif method == "_kiro.dev/mcp/oauth_request":
            self._kiro_sign_in(params)
        elif method == "_kiro.dev/mcp/server_init_failure":
            server = clean(params.get("serverName") or params.get("name"), MAX_NAME)
            reason = clean(failure_reason(params), MAX_DESCRIPTION)
            self._notice(SessionNotice(NoticeKind.MCP_FAILED, server=server, detail=reason))
        elif method == "_kiro.dev/agent/switched":
            name = params.get("agentName") or params.get("agent") or params.get("name")
            agent = clean(name, MAX_NAME)
            self._notice(SessionNotice(NoticeKind.AGENT_SWITCHED, detail=agent))

    def _kiro_metadata(self, params: dict[str, Any]) -> None:
        percent = params.get("contextUsagePercentage")
        if isinstance(percent, int | float) and not isinstance(percent, bool):
            if 0 <= percent <= 100:
                self.usage = UsageInfo(percent=float(percent))
        credits = 0.0
        seen = False
        for meter in params.get("meteringUsage") or ():
            if not isinstance(meter, dict) or meter.get("unit") != "credit":
                continue
            value = meter.get("value")
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                credits += float(value)
                seen = True
        if seen:
            self.credits = credits

    def _kiro_compaction(self, params: dict[str, Any]) -> None:
        phase = compaction_phase(params)
        if phase == "started":
            self._notice(SessionNotice(NoticeKind.COMPACTION_STARTED))
        elif phase == "completed":
            self._notice(SessionNotice(NoticeKind.COMPACTION_COMPLETED))
        elif phase == "failed":
            reason = valid_text(failure_reason(params))
            status = http_status(params)
            transient = status in _TRANSIENT_STATUS or bool(_RE_TRANSIENT_REASON.search(reason))
            detail = ""
            if reason:
                error = {"code": -32603, "message": "Internal error", "data": reason}
                detail = _acp_error_from(error, backend=self.backend).what
            self._notice(
                SessionNotice(NoticeKind.COMPACTION_FAILED, detail=detail, transient=transient)
            )

    def _kiro_sign_in(self, params: dict[str, Any]) -> None:
        server = clean(params.get("serverName"), MAX_NAME) or "an MCP server"
        link = sign_in_link(params.get("oauthUrl"))
        if not link:
            log.warning("ignoring a sign-in request for %s without an http(s) link", server)
            return
        if server in self._sign_in_shown or len(self._sign_in_shown) >= MAX_SIGN_IN_SERVERS:
            return
        self._sign_in_shown.add(server)
        self._notice(SessionNotice(NoticeKind.MCP_SIGN_IN, server=server, link=link))
