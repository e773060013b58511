"""Where the error families and the refusal parser live: placements the design names (issue 23) that
no import contract can say. That bot/ imports only what acp/ exports is import-linter's
"acp's submodules are acp's own" contract (pyproject.toml) for the modules, and mypy's strict
`no_implicit_reexport` for the names (a name imported from `acp` must be in its `__all__`)."""

from __future__ import annotations

import acp.client
from acp import AGENT_ERRORS, AcpError, AcpRuntimeError
from acp._dispatch import parse_refusal
from acp.runtime import AcpWorkspaceBindingError
from acp.types import RefusalInfo


def test_each_error_family_and_parser_lives_where_the_design_names_it() -> None:
    assert AcpError.__module__ == "acp.client"
    assert acp.client._format_acp_error.__module__ == "acp.client"
    assert acp.client._is_transient_raw_error.__module__ == "acp.client"
    assert [
        name for name in vars(acp.client) if name.startswith("_RE_")
    ]  # the catalogue's patterns
    assert AcpRuntimeError.__module__ == "acp.session_handle"
    assert AcpWorkspaceBindingError.__module__ == "acp.runtime"
    assert parse_refusal.__module__ == "acp._dispatch"
    assert RefusalInfo.__module__ == "acp.types"


def test_the_two_error_families_are_independent_and_exported_together() -> None:
    assert AGENT_ERRORS == (AcpError, AcpRuntimeError)
    assert not issubclass(AcpError, AcpRuntimeError)
    assert not issubclass(AcpRuntimeError, AcpError)
    assert issubclass(AcpWorkspaceBindingError, AcpRuntimeError)
