"""`fs/read_text_file` and `fs/write_text_file` (acp/workspace_files.py, acp/beneath.py) called
directly: reads bounded whatever the file's shape, and the symlink rules the same under openat2
and the component walk. The race against a swapping symlink is in test_workspace_files_race.py;
the methods served to a real agent subprocess are in test_client_capabilities.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from acp.beneath import Resolution, openat2_available
from acp.line_reader import MAX_READ_BYTES
from acp.workspace_files import ClientRequestRefused, read_text_file, write_text_file

pytestmark = pytest.mark.anyio

BOTH = pytest.mark.parametrize("how", [Resolution.OPENAT2, Resolution.WALK], ids=lambda h: h.value)
GIB = 1024 * 1024 * 1024
RSS_BOUND_KIB = 64 * 1024  # a read that kept one whole 1 GiB line could not stay under this


def test_this_kernel_has_openat2() -> None:
    # The OPENAT2 cases below would fail anyway; this says why first.
    assert openat2_available(), "openat2(2) needs Linux 5.6 or later (and no seccomp filter)"


async def _read(workspace: Path, how: Resolution, path: str, **params: Any) -> str:
    reply = await read_text_file(workspace, {"path": path, **params}, how=how)
    content = reply["content"]
    assert isinstance(content, str)
    return content


async def _refusal(workspace: Path, how: Resolution, path: str, **params: Any) -> str:
    with pytest.raises(ClientRequestRefused) as refused:
        await _read(workspace, how, path, **params)
    return refused.value.reason


# ---- bounded reads -------------------------------------------------------------------------------
_MEASURE = textwrap.dedent(
    """
    import json, resource, sys
    from pathlib import Path
    import functools
    import anyio
    from acp.beneath import Resolution
    from acp.workspace_files import read_text_file

    workspace, path, params, how = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    read = functools.partial(read_text_file, how=Resolution(how))
    reply = anyio.run(read, workspace, {"path": path, **params})
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"grew_kib": after - before, "chars": len(reply["content"]),
                      "tail": reply["content"][-200:]}))
    """
)


def _measured_read(workspace: Path, path: Path, how: Resolution, **params: Any) -> dict[str, Any]:
    """The read done in a fresh interpreter, whose peak RSS is its own and not pytest's."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(workspace), str(path), json.dumps(params), how.value],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=Path(__file__).resolve().parent.parent,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    return result


@BOTH
@pytest.mark.parametrize(
    "params", [{"limit": 1}, {}, {"line": 1, "limit": 1}], ids=["limit1", "whole", "line1limit1"]
)
def test_a_one_gib_sparse_file_of_one_line_costs_a_few_mib(
    workspace: Path, how: Resolution, params: dict[str, Any]
) -> None:
    sparse = workspace / "sparse.bin"
    subprocess.run(["truncate", "-s", str(GIB), str(sparse)], check=True)  # NULs, no newline
    result = _measured_read(workspace, sparse, how, **params)
    assert result["grew_kib"] < RSS_BOUND_KIB, result
    assert result["chars"] < MAX_READ_BYTES + 300
    assert result["tail"].endswith(
        "[Switchboard cut this reply at 1 MiB, inside line 1, which is longer than that: "
        "only its start is shown]"
    )


def test_skipping_to_a_line_past_a_huge_one_keeps_only_what_is_asked(workspace: Path) -> None:
    big = workspace / "big.txt"
    with big.open("wb") as file:
        file.truncate(256 * 1024 * 1024)  # line 1: 256 MiB of NULs
        file.seek(0, os.SEEK_END)
        file.write(b"\nsecond\nthird\n")
    result = _measured_read(workspace, big, Resolution.AUTO, line=2, limit=1)
    assert result["grew_kib"] < RSS_BOUND_KIB, result
    assert result["tail"] == "second\n"


@BOTH
async def test_line_and_limit_are_honoured_across_chunks(workspace: Path, how: Resolution) -> None:
    lines = [f"line {n} " + "y" * (n % 97) + "\n" for n in range(1, 20001)]
    (workspace / "many.txt").write_text("".join(lines), encoding="utf-8")
    path = str(workspace / "many.txt")
    assert await _read(workspace, how, path, line=9000, limit=3) == "".join(lines[8999:9002])
    assert await _read(workspace, how, path, line=19999) == "".join(lines[19998:])
    assert await _read(workspace, how, path, line=30000) == ""
    assert await _read(workspace, how, path, limit=2) == "".join(lines[:2])


@BOTH
async def test_a_cut_inside_a_line_never_splits_a_character(
    workspace: Path, how: Resolution
) -> None:
    (workspace / "wide.txt").write_text("é" * MAX_READ_BYTES, encoding="utf-8")  # 2 bytes each
    content = await _read(workspace, how, str(workspace / "wide.txt"))
    text, note = content.split("\n[Switchboard cut this reply", 1)
    assert text == "é" * (MAX_READ_BYTES // 2)
    assert "inside line 1" in note


@BOTH
async def test_what_the_cap_keeps_of_whole_lines_ends_at_a_line(
    workspace: Path, how: Resolution
) -> None:
    row = "z" * 99 + "\n"
    (workspace / "rows.txt").write_text(row * 20000, encoding="utf-8")  # about 2 MiB
    content = await _read(workspace, how, str(workspace / "rows.txt"), line=5)
    kept = MAX_READ_BYTES // 100
    assert content == row * kept + (
        f"[Switchboard cut this reply at 1 MiB: the file goes on at line {5 + kept}; "
        f"read on with line={5 + kept} and a limit]"
    )


# ---- symlinks: the same rules both ways ---------------------------------------------------------
@pytest.fixture
def linked(workspace: Path, tmp_path: Path) -> Path:
    """A workspace with symlinks of every kind, and a secret beside it."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("SECRET", encoding="utf-8")
    (workspace / "docs").mkdir()
    (workspace / "docs" / "AGENTS.md").write_text("rules\n", encoding="utf-8")
    (workspace / "CLAUDE.md").symlink_to("docs/AGENTS.md")  # relative, stays inside
    (workspace / "alias").symlink_to("docs", target_is_directory=True)
    (workspace / "docs" / "up").symlink_to("..", target_is_directory=True)  # the workspace
    (workspace / "absolute.md").symlink_to(workspace / "docs" / "AGENTS.md")
    (workspace / "out").symlink_to(tmp_path / "outside", target_is_directory=True)
    (workspace / "climb").symlink_to("../outside", target_is_directory=True)
    (workspace / "loop").symlink_to("loop")
    return workspace


@BOTH
async def test_a_relative_symlink_that_stays_inside_is_followed(
    linked: Path, how: Resolution
) -> None:
    for path in ("CLAUDE.md", "alias/AGENTS.md", "docs/up/docs/AGENTS.md", "docs/../CLAUDE.md"):
        assert await _read(linked, how, f"{linked}/{path}") == "rules\n", path


@BOTH
async def test_absolute_escaping_and_looping_symlinks_are_refused(
    linked: Path, how: Resolution
) -> None:
    for path in ("absolute.md", "out/secret.txt", "climb/secret.txt", "docs/up/../outside/x"):
        reason = await _refusal(linked, how, f"{linked}/{path}")
        assert reason == f"path '{linked}/{path}' is outside the workspace", path
        assert "SECRET" not in reason
    assert "too many symbolic links" in await _refusal(linked, how, f"{linked}/loop")


@BOTH
async def test_writes_follow_the_same_rules_and_never_replace_a_symlink(
    linked: Path, how: Resolution, tmp_path: Path
) -> None:
    await write_text_file(linked, {"path": f"{linked}/alias/new/deep.txt", "content": "x"}, how=how)
    assert (linked / "docs" / "new" / "deep.txt").read_text(encoding="utf-8") == "x"
    for path in ("out/x.txt", "climb/x.txt", "climb/made/x.txt", "../outside/x.txt"):
        with pytest.raises(ClientRequestRefused, match="outside the workspace"):
            await write_text_file(linked, {"path": f"{linked}/{path}", "content": "x"}, how=how)
    with pytest.raises(ClientRequestRefused, match="is a symbolic link"):
        await write_text_file(linked, {"path": f"{linked}/CLAUDE.md", "content": "x"}, how=how)
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["secret.txt"]
    assert (linked / "CLAUDE.md").is_symlink()
    assert not [name for _, _, names in os.walk(linked) for name in names if name.endswith(".tmp")]


async def test_a_path_under_the_workspace_through_its_configured_symlink_is_inside(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("a", encoding="utf-8")
    configured = tmp_path / "ws-link"
    configured.symlink_to(workspace, target_is_directory=True)
    for root in (configured, workspace):
        assert await _read(configured, Resolution.AUTO, f"{root}/a.txt") == "a"
