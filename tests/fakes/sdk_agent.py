"""A scripted ACP agent built on the official Python SDK (``agent-client-protocol`` 0.12.1), for the
protocol corners where a third-party implementation of the wire format matters.

Run it with the SDK venv's python in isolated mode (``python -I sdk_agent.py ...``; see
``tests/fakes/real_agents.sdk_agent_argv``): the SDK's import name ``acp`` collides with ours, and
``-I`` keeps the current directory (our repository) off ``sys.path``.

Flags:
  --log PATH                  one JSON line per call the agent receives: {"method", "params"}
  --protocol-version N        the protocolVersion answered to initialize (default: the client's)
  --commands NAME:DESC,...    available_commands_update sent inside session/new, before its answer
  --config                    config options of every shape: "llm" (category model, grouped
                              select), "effort" (category thought_level, flat select) and
                              "thinking" (boolean); session/set_config_option answers them all
  --modes                     modes yolo (current, auto-approves) / default (asks) / plan;
                              session/set_mode is confirmed by a current_mode_update

Prompt text (one word, then arguments separated by spaces):
  fs IN OUT      fs/read_text_file IN, then fs/write_text_file OUT ("written by sdk"); each
                 outcome is one agent_message_chunk: "read: <content>" / "read error: <code>
                 <message>", "write: ok" / "write error: <code> <message>"
  term           terminal/create (sh -c 'echo from-terminal; exit 4'), wait_for_exit, output,
                 release; one chunk "term: exit=<code> output=<output>"
  anything else  one chunk "sdk: <text>"
"""

# ruff: noqa: I001  (the `acp` imported here is the SDK, not our first-party package)

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.helpers import update_agent_message_text, update_available_commands, update_current_mode
from acp.schema import (
    AvailableCommand,
    ConfigOptionUpdate,
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
)

MODES = [
    {"id": "yolo", "name": "YOLO", "description": "Auto-approves all tools"},
    {"id": "default", "name": "Default", "description": "Prompts for approval"},
    {"id": "plan", "name": "Plan", "description": "Read-only planning"},
]


def _config(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": "llm",
            "name": "Model",
            "category": "model",
            "type": "select",
            "currentValue": values["llm"],
            "options": [
                {
                    "group": "anthropic",
                    "name": "Anthropic",
                    "options": [{"value": "sonnet", "name": "Sonnet"}],
                },
                {
                    "group": "openai",
                    "name": "OpenAI",
                    "options": [{"value": "gpt-x", "name": "GPT"}],
                },
            ],
        },
        {
            "id": "effort",
            "name": "Reasoning effort",
            "category": "thought_level",
            "type": "select",
            "currentValue": values["effort"],
            "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}],
        },
        {
            "id": "thinking",
            "name": "Show thinking",
            "type": "boolean",
            "currentValue": values["thinking"],
        },
    ]


class ScriptedAgent:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.conn: Any = None
        self.values: dict[str, dict[str, Any]] = {}  # session id -> config values
        self.modes: dict[str, str] = {}

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    def _log(self, method: str, **params: Any) -> None:
        if self.args.log:
            with open(self.args.log, "a", encoding="utf-8") as log:
                log.write(json.dumps({"method": method, "params": params}, default=str) + "\n")

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        self._log("initialize", protocolVersion=protocol_version)
        answered = self.args.protocol_version
        return InitializeResponse.model_validate(
            {
                "protocolVersion": protocol_version if answered is None else answered,
                "agentCapabilities": {"loadSession": False},
                "agentInfo": {"name": "sdk-agent", "version": "0.12.1"},
            }
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = f"sdk-{uuid.uuid4().hex[:8]}"
        self._log("session/new", cwd=cwd)
        if self.args.commands:
            commands = []
            for item in self.args.commands.split(","):
                name, _, description = item.partition(":")
                commands.append(AvailableCommand(name=name, description=description or name))
            # Sent before the answer: the client learns of the session from a notification first.
            await self.conn.session_update(session_id, update_available_commands(commands))
        result: dict[str, Any] = {"sessionId": session_id}
        if self.args.config:
            self.values[session_id] = {"llm": "sonnet", "effort": "low", "thinking": False}
            result["configOptions"] = _config(self.values[session_id])
        if self.args.modes:
            self.modes[session_id] = "yolo"
            result["modes"] = {"currentModeId": "yolo", "availableModes": MODES}
        return NewSessionResponse.model_validate(result)

    async def set_session_mode(
        self, mode_id: str, session_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        self._log("session/set_mode", sessionId=session_id, modeId=mode_id)
        if mode_id not in {m["id"] for m in MODES}:
            raise RequestError.invalid_params({"modeId": mode_id})
        self.modes[session_id] = mode_id
        await self.conn.session_update(session_id, update_current_mode(mode_id))
        return SetSessionModeResponse()

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        self._log(
            "session/set_config_option", sessionId=session_id, configId=config_id, value=value
        )
        values = self.values.get(session_id)
        if values is None or config_id not in values:
            raise RequestError.invalid_params({"configId": config_id})
        values[config_id] = value
        options = _config(values)
        await self.conn.session_update(
            session_id,
            ConfigOptionUpdate.model_validate(
                {"sessionUpdate": "config_option_update", "configOptions": options}
            ),
        )
        return SetSessionConfigOptionResponse.model_validate({"configOptions": options})

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse:
        text = " ".join(getattr(block, "text", "") for block in prompt).strip()
        self._log("session/prompt", sessionId=session_id, text=text)
        word, *rest = text.split(" ") or [""]
        if word == "fs" and len(rest) == 2:
            for line in await self._fs(session_id, rest[0], rest[1]):
                await self._say(session_id, line)
        elif word == "term":
            await self._say(session_id, await self._terminal(session_id))
        else:
            await self._say(session_id, f"sdk: {text}")
        return PromptResponse(stop_reason="end_turn")

    async def _say(self, session_id: str, text: str) -> None:
        await self.conn.session_update(session_id, update_agent_message_text(text + "\n"))

    async def _fs(self, session_id: str, source: str, target: str) -> list[str]:
        lines = []
        try:
            read = await self.conn.read_text_file(path=source, session_id=session_id)
            lines.append(f"read: {read.content}")
        except RequestError as refused:
            lines.append(f"read error: {refused.code} {refused}")
        try:
            await self.conn.write_text_file(
                path=target, content="written by sdk", session_id=session_id
            )
            lines.append("write: ok")
        except RequestError as refused:
            lines.append(f"write error: {refused.code} {refused}")
        return lines

    async def _terminal(self, session_id: str) -> str:
        created = await self.conn.create_terminal(
            command="sh", args=["-c", "echo from-terminal; exit 4"], session_id=session_id
        )
        terminal = created.terminal_id
        waited = await self.conn.wait_for_terminal_exit(session_id=session_id, terminal_id=terminal)
        output = await self.conn.terminal_output(session_id=session_id, terminal_id=terminal)
        await self.conn.release_terminal(session_id=session_id, terminal_id=terminal)
        return f"term: exit={waited.exit_code} output={output.output.strip()}"

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self._log("session/cancel", sessionId=session_id)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--log")
    parser.add_argument("--protocol-version", type=int)
    parser.add_argument("--commands")
    parser.add_argument("--config", action="store_true")
    parser.add_argument("--modes", action="store_true")
    args = parser.parse_args()
    assert PROTOCOL_VERSION == 1, "written against ACP protocol version 1"
    asyncio.run(run_agent(ScriptedAgent(args)))


if __name__ == "__main__":
    main()
