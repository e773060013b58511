"""The module layout the error-handling design names, and the one-way imports between layers that
import-linter cannot express (bot/ uses only what acp/ exports)."""

from __future__ import annotations

import ast
from pathlib import Path

import acp
import acp.client
from acp import AGENT_ERRORS, AcpError, AcpRuntimeError
from acp._dispatch import parse_refusal
from acp.runtime import AcpWorkspaceBindingError
from acp.types import RefusalInfo

ROOT = Path(__file__).resolve().parent.parent


def test_each_error_family_and_parser_lives_where_the_design_names_it() -> None:
    assert AcpError.__module__ == "acp.client"
    assert acp.client._format_acp_error.__module__ == "acp.client"
    assert acp.client._is_transient_raw_error.__module__ == "acp.client"
    assert AcpRuntimeError.__module__ == "acp.session_handle"
    assert AcpWorkspaceBindingError.__module__ == "acp.runtime"
    assert parse_refusal.__module__ == "acp._dispatch"
    assert RefusalInfo.__module__ == "acp.types"
    assert acp.client.AcpClient is acp.AcpClient  # the session API, named on the client module


def test_the_two_error_families_are_independent_and_exported_together() -> None:
    assert AGENT_ERRORS == (AcpError, AcpRuntimeError)
    assert not issubclass(AcpError, AcpRuntimeError)
    assert not issubclass(AcpRuntimeError, AcpError)
    assert issubclass(AcpWorkspaceBindingError, AcpRuntimeError)


def test_bot_imports_only_what_acp_exports() -> None:
    internal = []
    for path in sorted((ROOT / "bot").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("acp."):
                internal.append(f"{path.name}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                internal += [
                    f"{path.name}: import {alias.name}"
                    for alias in node.names
                    if alias.name.startswith("acp.")
                ]
            elif isinstance(node, ast.ImportFrom) and node.module == "acp":
                missing = [a.name for a in node.names if a.name not in acp.__all__]
                internal += [f"{path.name}: {name} is not in acp.__all__" for name in missing]
    assert internal == []
