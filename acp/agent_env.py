"""The agent's environment, built from an allowlist: an agent runs whatever its model asks, so it
gets only what it needs to run and to reach its model service, never what Switchboard holds.

What passes: the locale and terminal basics, the network's proxies and certificates, the
preset's own credentials and endpoints (`PRESET_NAMES`), and the names the operator lists
(`SWITCHBOARD_AGENT_ENV`; `NAME_*` passes every name with that prefix). No `SWITCHBOARD_*`
variable ever passes, listed or not: those are Switchboard's settings and secrets."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

OWN_PREFIX = "SWITCHBOARD_"

BASE_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "COLORTERM",
        # Agents call their model services: behind a proxy, or trusting an internal CA.
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
    }
)
BASE_PREFIXES = ("LC_",)

# Each preset's own credentials, endpoints and configuration, by prefix: the vendor's namespace.
PRESET_NAMES: dict[str, tuple[str, ...]] = {
    "claude": ("ANTHROPIC_", "CLAUDE_"),
    "codex": ("OPENAI_", "CODEX_", "AZURE_OPENAI_"),
    "kiro": ("KIRO_",),
    "generic": (),
}


def _allowed(name: str, exact: frozenset[str], prefixes: tuple[str, ...]) -> bool:
    if name.startswith(OWN_PREFIX):
        return False
    return name in exact or name.startswith(prefixes)


def split_listed(listed: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """The operator's names: exact ones, and `NAME_*` prefixes (a bare `*` passes nothing: it
    would make the allowlist a denylist again)."""
    exact: set[str] = set()
    prefixes: list[str] = []
    for raw in listed:
        name = raw.strip()
        if name.endswith("*"):
            if name[:-1]:
                prefixes.append(name[:-1])
        elif name:
            exact.add(name)
    return frozenset(exact), tuple(prefixes)


def agent_environment(
    base: Mapping[str, str] | None = None,
    *,
    preset: str = "generic",
    listed: Iterable[str] = (),
    home: Path | None = None,
    user: str = "",
) -> dict[str, str]:
    """The environment an agent of `preset` starts with, from `base` (default: ours). `home`
    replaces HOME (the agent's own home), `user` USER and LOGNAME (the user it runs as)."""
    source = os.environ if base is None else base
    exact, prefixes = split_listed(listed)
    exact = exact | BASE_NAMES
    prefixes = (*BASE_PREFIXES, *PRESET_NAMES.get(preset, ()), *prefixes)
    env = {k: v for k, v in source.items() if _allowed(k, exact, prefixes)}
    env.setdefault("PATH", os.defpath)
    if home is not None:
        env["HOME"] = str(home)
    if user:
        env["USER"] = env["LOGNAME"] = user
    return env


def terminal_environment(base: Mapping[str, str], given: Mapping[str, str]) -> dict[str, str]:
    """A terminal's environment: the agent's, plus what `terminal/create` set, except any
    `SWITCHBOARD_*` name (the agent cannot make a command look like it holds our settings)."""
    env = dict(base)
    env.update({k: v for k, v in given.items() if not k.startswith(OWN_PREFIX)})
    return env
