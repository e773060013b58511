"""The container's health check, `python -m bot.healthcheck` (the Dockerfile's HEALTHCHECK): asks
`/healthz` of `switchboard run`'s HTTP server where the settings put it, the settings read by
config/settings.py exactly as `switchboard run` reads them (the environment, then the file named
by SWITCHBOARD_CONFIG), so the check and the server never disagree about the port.

- `SWITCHBOARD_HTTP__PORT=off` (in any case): there is no server, so nothing to ask: healthy, and
  one line says the check is off.
- `0`: the server takes any free port, which only the running process knows: healthy, and one
  line says the check is skipped (give a fixed port to have it checked).
- a port number: `GET /healthz` on the listen address (`0.0.0.0` and `::`, every interface, are
  asked on the loopback address of their family) within `TIMEOUT` seconds; healthy on a 200.
- settings that do not load: unhealthy, with the sentence `switchboard run` would stop with.

Exit status 0 is healthy, 1 unhealthy (what Docker's HEALTHCHECK reads); one line on stdout
either way, which `docker inspect` shows."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from config import ConfigError, load_settings
from config.settings import HttpSettings

__all__ = ["check", "main"]

TIMEOUT = 4.0  # seconds; under the HEALTHCHECK's own --timeout=5s
# Every interface (the image listens on 0.0.0.0) is asked on the loopback address of its family.
_LOOPBACK = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _url(http: HttpSettings, port: int) -> str:
    host = _LOOPBACK.get(http.listen, http.listen)
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    return f"http://{host}:{port}/healthz"


def check(http: HttpSettings) -> tuple[bool, str]:
    """Whether the server the settings describe is healthy, and the line that says so."""
    if http.port is None:
        return True, "the HTTP server is off (SWITCHBOARD_HTTP__PORT=off): nothing to check"
    if http.port == 0:
        return True, (
            "the HTTP server takes any free port (SWITCHBOARD_HTTP__PORT=0): the check is"
            " skipped; set a fixed port to have it checked"
        )
    url = _url(http, http.port)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:  # refused, timed out, no such host
        reason = getattr(exc, "reason", exc)
        return False, f"{url} did not answer ({reason})"
    if status != 200:
        return False, f"{url} answered {status}"
    return True, f"{url} answered 200"


def main() -> int:
    try:
        settings = load_settings()
    except ConfigError as exc:
        print(exc)
        return 1
    healthy, line = check(settings.http)
    print(line)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
