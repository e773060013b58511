"""Throwaway raw JSON-RPC (ACP over stdio) driver for poking real agents.

Spawns an agent argv in its own process group, then: initialize → session/new → optional
``session/set_config_option {configId:"mode"}`` → one ``session/prompt`` per ``--prompt``.
Answers every ``session/request_permission`` by optionId or kind (``--permission``), every
``elicitation/create`` with what the ``elicitation`` callback returns (when ``RawAcpProbe`` is
given one), every other agent→client request with -32601, and prints every frame received from
the agent as one JSON line on stdout (``--annotate`` wraps each in ``{"t", "dir", "frame"}`` and
adds our sent frames and meta lines). ``send_request`` sends a request without waiting (e.g.
``_session/steering`` while a prompt runs; its answer lands in ``responses``). Everything is
bounded by ``--timeout``; the agent is shut down the way ACP clients should (close stdin → wait →
SIGTERM group → SIGKILL group) and the EOF exit time is reported.

Examples::

    python tests/fakes/raw_acp_probe.py --agent claude --env nocreds --prompt hi --annotate
    python tests/fakes/raw_acp_probe.py --agent codex --mock --mode read-only \
        --prompt "SCN_TOOL please" --permission allow_once --annotate

Stdlib only (imports the sibling mock_model.py / real_agents.py).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import real_agents
from mock_model import MockModelServer

MAX_LINE = 64 * 1024 * 1024
KINDS = ("allow_once", "allow_always", "reject_once", "reject_always")


class ProbeError(Exception):
    pass


class RawAcpProbe:
    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        emit: Callable[[dict], None],
        *,
        stderr_path: str | None = None,
        permission: str = "allow_once",
        annotate: bool = False,
        elicitation: Callable[[dict], dict] | None = None,
    ) -> None:
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.emit_line = emit
        self.annotate = annotate
        self.permission = permission
        self.stderr_path = stderr_path
        self.t0 = time.monotonic()
        self.q: queue.Queue = queue.Queue()
        self.next_id = 0
        self.responses: dict[int, dict] = {}
        self.frames: list[dict] = []  # every parsed frame received, in order
        self.permission_requests: list[dict] = []
        # elicitation/create params -> its result ({action, content}); None answers -32601
        self.elicitation = elicitation
        self.elicitation_requests: list[dict] = []
        self.proc = None
        self.stderr_lines: list[str] = []
        self._stderr_lock = threading.Lock()

    # ---- output ---------------------------------------------------------------------------

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def out(self, direction: str, frame: Any) -> None:
        if self.annotate:
            self.emit_line({"t": self.now(), "dir": direction, "frame": frame})
        elif direction == "in":
            self.emit_line(frame)

    def meta(self, **kw: Any) -> None:
        self.out("meta", kw)

    # ---- process --------------------------------------------------------------------------

    def start(self) -> None:
        self.proc = real_agents.spawn_agent(self.argv, self.env, self.cwd)
        self.meta(event="spawned", pid=self.proc.pid, argv=self.argv)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc and self.proc.stdout
        stream = self.proc.stdout
        while True:
            line = stream.readline(MAX_LINE)
            if not line:
                self.q.put(("eof", None))
                return
            if not line.endswith(b"\n") and len(line) >= MAX_LINE:
                # over-long: read through the newline and drop it (bounded by pipe EOF)
                while True:
                    rest = stream.readline(MAX_LINE)
                    if not rest or rest.endswith(b"\n"):
                        break
                self.q.put(("junk", "<over-long line dropped>"))
                continue
            try:
                text = line.decode("utf-8").strip()
            except UnicodeDecodeError:
                self.q.put(("junk", repr(line[:200])))
                continue
            if not text:
                continue
            try:
                obj = json.loads(text)
            except ValueError:
                self.q.put(("junk", text[:500]))
                continue
            self.q.put(("frame", obj))

    def _read_stderr(self) -> None:
        assert self.proc and self.proc.stderr
        fh = open(self.stderr_path, "ab") if self.stderr_path else None
        try:
            for line in iter(lambda: self.proc.stderr.readline(MAX_LINE), b""):
                if fh:
                    fh.write(line)
                    fh.flush()
                with self._stderr_lock:
                    if len(self.stderr_lines) < 2000:
                        self.stderr_lines.append(line.decode("utf-8", "replace").rstrip("\n"))
        finally:
            if fh:
                fh.close()

    def send(self, obj: dict) -> None:
        assert self.proc and self.proc.stdin
        self.out("out", obj)
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise ProbeError(f"agent stdin closed: {e}") from e

    # ---- dispatch -------------------------------------------------------------------------

    def _choose_permission(self, params: dict) -> dict:
        options = params.get("options") or []
        sel = self.permission
        if sel == "cancelled":
            return {"outcome": {"outcome": "cancelled"}}
        for opt in options:
            if opt.get("optionId") == sel:
                return {"outcome": {"outcome": "selected", "optionId": sel}}
        for opt in options:
            if opt.get("kind") == sel:
                return {"outcome": {"outcome": "selected", "optionId": opt.get("optionId")}}
        if sel.startswith("reject"):
            for opt in options:
                if str(opt.get("kind", "")).startswith("reject"):
                    return {"outcome": {"outcome": "selected", "optionId": opt.get("optionId")}}
        return {"outcome": {"outcome": "cancelled"}}

    def _handle(self, kind: str, obj: Any) -> None:
        if kind == "junk":
            self.out("junk", obj)
            return
        self.frames.append(obj) if isinstance(obj, dict) else None
        self.out("in", obj)
        if not isinstance(obj, dict):
            return
        if "method" in obj and "id" in obj:
            method = obj["method"]
            if method == "session/request_permission":
                self.permission_requests.append(obj.get("params") or {})
                result = self._choose_permission(obj.get("params") or {})
                self.send({"jsonrpc": "2.0", "id": obj["id"], "result": result})
            elif method == "elicitation/create" and self.elicitation is not None:
                params = obj.get("params") or {}
                self.elicitation_requests.append(params)
                self.send({"jsonrpc": "2.0", "id": obj["id"], "result": self.elicitation(params)})
            else:
                self.send(
                    {
                        "jsonrpc": "2.0",
                        "id": obj["id"],
                        "error": {"code": -32601, "message": "Method not found"},
                    }
                )
        elif "id" in obj and "method" not in obj:
            self.responses[obj["id"]] = obj

    def pump(self, until: Callable[[], bool], deadline: float) -> bool:
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                kind, obj = self.q.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if kind == "eof":
                self.meta(event="stdout_eof")
                self.q.put(("eof", None))  # keep signalling
                if until():
                    return True
                raise ProbeError("agent closed stdout")
            self._handle(kind, obj)
        return True

    def send_request(self, method: str, params: dict) -> int:
        """Send a request without waiting; its answer lands in ``responses`` while pumping."""
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def request(
        self,
        method: str,
        params: dict,
        timeout: float,
        during: Callable[[float], None] | None = None,
    ) -> dict:
        rid = self.next_id
        self.next_id += 1
        t_start = time.monotonic()
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        if during is not None:
            during_deadline = deadline

            def until() -> bool:
                if rid in self.responses:
                    return True
                during(time.monotonic() - t_start)
                return False

            ok = self.pump(until, during_deadline)
        else:
            ok = self.pump(lambda: rid in self.responses, deadline)
        if not ok:
            raise ProbeError(f"timeout waiting for {method}")
        resp = self.responses.pop(rid)
        self.meta(event="response", method=method, elapsed=round(time.monotonic() - t_start, 3))
        return resp

    def notify(self, method: str, params: dict) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def drain(self, seconds: float) -> None:
        """Keep reading frames for a while (late notifications such as titles)."""
        try:
            self.pump(lambda: False, time.monotonic() + seconds)
        except ProbeError:
            pass

    def stop(self, eof_grace: float = 5.0) -> float | None:
        if self.proc is None:
            return None
        exited = real_agents.stop_agent(self.proc, eof_grace=eof_grace)
        self.meta(
            event="stopped",
            exit_after_eof=None if exited is None else round(exited, 3),
            returncode=self.proc.returncode,
        )
        return exited


def run(args: argparse.Namespace, emit: Callable[[dict], None]) -> int:
    tmp_root = Path(tempfile.mkdtemp(prefix="sb-probe-"))
    home = Path(args.home) if args.home else tmp_root / "home"
    cwd = Path(args.cwd) if args.cwd else tmp_root / "work"
    home.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    mock = None
    probe = None
    rc = 0
    try:
        if args.argv:
            argv = json.loads(args.argv)
        else:
            argv = real_agents.agent_argv(args.agent)
        if not argv:
            emit(
                {
                    "probe_error": f"{args.agent} agent not installed; "
                    "run tests/fakes/install_agents.sh"
                }
            )
            return 2
        mock_url = args.mock_url
        if args.mock:
            mock = MockModelServer(
                slow_interval=args.slow_interval, slow_duration=args.slow_duration
            ).start()
            mock_url = mock.url
        if args.env == "nocreds" and not mock_url:
            env = (
                real_agents.claude_env_no_credentials(home)
                if args.agent == "claude"
                else real_agents.codex_env_no_credentials(home)
            )
        elif mock_url:
            env = {
                "claude": real_agents.claude_env_mock,
                "codex": real_agents.codex_env_mock,
                "gemini": real_agents.gemini_env_mock,
                "opencode": real_agents.opencode_env_mock,
            }[args.agent](home, mock_url)
        else:
            env = dict(os.environ)
        probe = RawAcpProbe(
            argv,
            env,
            str(cwd),
            emit,
            stderr_path=args.stderr,
            permission=args.permission,
            annotate=args.annotate,
        )
        deadline = time.monotonic() + args.timeout

        def left() -> float:
            return max(0.1, deadline - time.monotonic())

        probe.start()
        init = probe.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {
                    "fs": {"readTextFile": False, "writeTextFile": False},
                    "terminal": False,
                },
                "clientInfo": {"name": "switchboard-probe", "version": "0.0.0"},
            },
            left(),
        )
        if "error" in init:
            return 1
        new = probe.request("session/new", {"cwd": str(cwd), "mcpServers": []}, left())
        if "error" in new:
            probe.drain(min(args.linger, left()))
            return 1
        sid = new["result"]["sessionId"]
        if args.mode:
            probe.request(
                "session/set_config_option",
                {"sessionId": sid, "configId": "mode", "value": args.mode},
                left(),
            )
        for text in args.prompt:

            def during(elapsed: float, cancelled: list[bool] = [False]) -> None:  # noqa: B006
                # the default list is fresh for each prompt (a new function per iteration)
                if (
                    args.cancel_after is not None
                    and not cancelled[0]
                    and elapsed >= args.cancel_after
                ):
                    cancelled[0] = True
                    probe.notify("session/cancel", {"sessionId": sid})
                    probe.meta(event="cancel_sent", elapsed=round(elapsed, 3))

            resp = probe.request(
                "session/prompt",
                {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
                left(),
                during=during if args.cancel_after is not None else None,
            )
            if "error" in resp:
                rc = 1
        probe.drain(min(args.linger, left()))
    except ProbeError as e:
        emit({"probe_error": str(e)})
        rc = 3
    finally:
        if probe is not None:
            probe.stop(eof_grace=args.eof_grace)
            if args.annotate and mock is not None:
                probe.meta(
                    event="mock_requests",
                    requests=[
                        {
                            k: v
                            for k, v in r.to_dict().items()
                            if k not in ("body", "headers", "query")
                        }
                        for r in mock.requests
                    ],
                )
            if args.annotate and cwd.joinpath("tool_ran.txt").exists():
                probe.meta(event="tool_ran.txt", content=cwd.joinpath("tool_ran.txt").read_text())
        if mock is not None:
            if args.dump_mock:
                with open(args.dump_mock, "w") as fh:
                    json.dump([r.to_dict() for r in mock.requests], fh, indent=1)
            mock.stop()
        if not args.keep:
            shutil.rmtree(tmp_root, ignore_errors=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="raw ACP probe for real agents")
    ap.add_argument("--agent", choices=("claude", "codex", "gemini", "opencode"), default="claude")
    ap.add_argument("--argv", help="JSON list overriding the agent argv")
    ap.add_argument("--env", choices=("nocreds", "mock", "inherit"), default="nocreds")
    ap.add_argument("--mock", action="store_true", help="start an in-process mock model")
    ap.add_argument("--mock-url", help="use a running mock model at this base URL")
    ap.add_argument("--slow-interval", type=float, default=0.2)
    ap.add_argument("--slow-duration", type=float, default=30.0)
    ap.add_argument(
        "--mode", help="session/set_config_option mode value (claude: default; codex: read-only)"
    )
    ap.add_argument("--prompt", action="append", default=[], help="prompt text (repeatable)")
    ap.add_argument(
        "--permission",
        default="allow_once",
        help="optionId, kind (allow_once/reject_once/...) or 'cancelled'",
    )
    ap.add_argument(
        "--cancel-after", type=float, help="send session/cancel this many s into each prompt"
    )
    ap.add_argument("--timeout", type=float, default=90.0, help="overall time limit (s)")
    ap.add_argument(
        "--linger", type=float, default=1.0, help="read late frames this long at the end"
    )
    ap.add_argument(
        "--eof-grace",
        type=float,
        default=5.0,
        help="wait this long for the agent to exit after stdin EOF before SIGTERM",
    )
    ap.add_argument(
        "--annotate", action="store_true", help="wrap frames with time/direction; add meta"
    )
    ap.add_argument("--stderr", help="append agent stderr to this file")
    ap.add_argument("--home", help="HOME for the agent (default: a fresh temp dir)")
    ap.add_argument("--cwd", help="workspace (default: a fresh temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs")
    ap.add_argument(
        "--dump-mock", help="write the mock's recorded requests (with bodies) to this file"
    )
    args = ap.parse_args(argv)
    if args.mock or args.mock_url:
        args.env = "mock"

    def emit(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
        sys.stdout.flush()

    return run(args, emit)


if __name__ == "__main__":
    sys.exit(main())
