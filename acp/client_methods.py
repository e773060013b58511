"""The client methods an agent may call on us besides permission requests: `fs/*` and
`terminal/*`, what `initialize` advertises of them, and their answers.

A request names its session; it is served only for a session this client holds, and the
mutating ones (`fs/write_text_file`, `terminal/create`) only while that session runs a turn (an
agent acts on a prompt, never between them) and only once `authorize` lets them: the gate, which
runs them only under a person's approval (acp/approval_cover.py says which approval covers a
request; without one Switchboard asks the person itself). Everything is confined to the
workspace. A method we did not advertise is answered -32601 with one debug line."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from acp.approval_cover import ClientAction, terminal_action, write_action
from acp.sandbox import Isolation
from acp.session_handle import METHOD_NOT_FOUND, RpcReply
from acp.terminals import TerminalHost
from acp.workspace_files import (
    INVALID_PARAMS,
    ClientRequestRefused,
    read_text_file,
    write_text_file,
)

log = logging.getLogger(__name__)

_Handler = Callable[[str, dict[str, Any]], Awaitable[Any]]
# The gate: returns to run the request, raises ClientRequestRefused to refuse it.
Authorize = Callable[[str, ClientAction], Awaitable[None]]

# Methods that change something: served only while the session runs a turn.
_DURING_TURN_ONLY = frozenset({"fs/write_text_file", "terminal/create"})


def method_not_found(method: object) -> RpcReply:
    log.debug("answering -32601 to the agent's %.100r: a method we did not advertise", method)
    return RpcReply(error={"code": METHOD_NOT_FOUND, "message": "Method not found"})


class ClientMethods:
    """The fs and terminal methods for one agent process bound to `workspace`."""

    def __init__(
        self,
        workspace: Path,
        env: Mapping[str, str],
        isolation: Isolation | None = None,
        tmp: Path | None = None,
    ) -> None:
        self.workspace = workspace
        self.terminals = TerminalHost(workspace, env, isolation, tmp)
        self._unasked = 0  # numbers the cards Switchboard shows for requests nobody asked about
        self._handlers: dict[str, _Handler] = {
            "fs/read_text_file": self._read,
            "fs/write_text_file": self._write,
            "terminal/create": self.terminals.create,
            "terminal/output": self.terminals.output,
            "terminal/wait_for_exit": self.terminals.wait_for_exit,
            "terminal/kill": self.terminals.kill,
            "terminal/release": self.terminals.release,
        }

    @staticmethod
    def advertised() -> dict[str, Any]:
        """`initialize`'s clientCapabilities: what `answer` serves."""
        return {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": True}

    async def _read(self, session_id: str, params: dict[str, Any]) -> Any:
        return await read_text_file(self.workspace, params)

    async def _write(self, session_id: str, params: dict[str, Any]) -> Any:
        return await write_text_file(self.workspace, params)

    async def _action(self, method: str, params: dict[str, Any]) -> ClientAction:
        self._unasked += 1
        if method == "terminal/create":
            return terminal_action(self.workspace, params, self._unasked)
        return await write_action(self.workspace, params, self._unasked)

    async def answer(
        self,
        method: str,
        params: Any,
        session_state: Callable[[str], str],
        authorize: Authorize | None = None,
    ) -> RpcReply:
        """The reply to one fs/terminal request. `session_state(id)` says "turn" for a session
        running a turn, "idle" for one we hold between turns, "" for one we do not hold;
        `authorize` (None: the gate is off) is asked before a write or a new terminal."""
        handler = self._handlers.get(method)
        if handler is None:
            return method_not_found(method)
        try:
            if not isinstance(params, dict):
                raise ClientRequestRefused(method, "params must be an object", code=INVALID_PARAMS)
            session_id = params.get("sessionId")
            state = session_state(session_id) if isinstance(session_id, str) else ""
            if not state:
                raise ClientRequestRefused(
                    method, "sessionId names no session of this client", code=INVALID_PARAMS
                )
            if method in _DURING_TURN_ONLY and state != "turn":
                raise ClientRequestRefused(method, "the session is not running a prompt turn")
            assert isinstance(session_id, str)
            if method in _DURING_TURN_ONLY and authorize is not None:
                await authorize(session_id, await self._action(method, params))
            result = await handler(session_id, params)
        except ClientRequestRefused as refusal:
            log.info("agent request %s", refusal)
            return RpcReply(error=refusal.rpc_error())
        return RpcReply(result=result)
