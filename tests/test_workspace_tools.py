"""Workspace confinement and the agent tool dispatcher (malformed, unknown, oversized calls)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from metatrain.episode.tools import MAX_ARGUMENT_BYTES, AgentTools, ToolOutcome
from metatrain.episode.workspace import Workspace, WorkspaceError


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path / "ws", max_file_bytes=1000, max_files=3, max_total_bytes=2500)


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "", "a\x00b", "a\\b", "."])
def test_paths_that_leave_or_are_malformed_are_refused(ws: Workspace, bad: str) -> None:
    with pytest.raises(WorkspaceError):
        ws.resolve(bad)


def test_symlinks_out_are_refused(ws: Workspace, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    os.symlink(secret, ws.root / "link.txt")
    os.symlink(tmp_path, ws.root / "dirlink")
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.read("link.txt")
    with pytest.raises(WorkspaceError, match="symlink"):
        ws.write("dirlink/new.txt", "x")
    assert not (tmp_path / "new.txt").exists()


def test_limits(ws: Workspace) -> None:
    with pytest.raises(WorkspaceError, match="limit per file"):
        ws.write("big.txt", "x" * 1001)
    ws.write("a.txt", "x" * 900)
    ws.write("b.txt", "x" * 900)
    with pytest.raises(WorkspaceError, match="would hold"):
        ws.write("c.txt", "x" * 900)
    ws.write("c.txt", "x")
    with pytest.raises(WorkspaceError, match="already holds 3 files"):
        ws.write("d.txt", "x")
    ws.write("a.txt", "overwrite is fine")


def test_edit_needs_a_unique_match(ws: Workspace) -> None:
    ws.write("f.py", "a = 1\na = 1\nb = 2\n")
    with pytest.raises(WorkspaceError, match="occurs 2 times"):
        ws.edit("f.py", "a = 1", "a = 3")
    with pytest.raises(WorkspaceError, match="not found"):
        ws.edit("f.py", "zzz", "y")
    ws.edit("f.py", "b = 2", "b = 5")
    assert ws.read("f.py").endswith("b = 5\n")


def tools(ws: Workspace) -> AgentTools:
    return AgentTools(ws, {"best_pre": 0.25}, lambda: ToolOutcome("VALID", True, True))


def test_dispatch_round_trip(ws: Workspace) -> None:
    t = tools(ws)
    assert t.dispatch("write_file", json.dumps({"path": "env.py", "content": "x = 1\n"})).ok
    assert t.dispatch("read_file", json.dumps({"path": "env.py"})).content == "x = 1\n"
    assert "env.py\t6" in t.dispatch("list_files", "{}").content
    assert json.loads(t.dispatch("get_baseline_scores", "").content)["best_pre"] == 0.25
    assert t.dispatch("submit_job", "{}").submitted


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("rm_rf", "{}", "unknown tool 'rm_rf'"),
        ("read_file", '{"path": ', "not valid JSON"),
        ("read_file", "[1, 2]", "must be a JSON object"),
        ("read_file", "{}", "missing ['path']"),
        ("list_files", '{"path": "x"}', "unexpected ['path']"),
        ("read_file", '{"path": 3}', "must be strings"),
        ("read_file", '{"path": "../../etc/passwd"}', "contains '..'"),
        ("read_file", '{"path": "nope.txt"}', "no such file"),
    ],
)
def test_bad_calls_get_specific_errors(ws: Workspace, name: str, args: str, message: str) -> None:
    out = tools(ws).dispatch(name, args)
    assert not out.ok
    assert message in out.content


def test_oversized_arguments_are_refused(ws: Workspace) -> None:
    out = tools(ws).dispatch("write_file", json.dumps({"path": "a", "content": "x" * MAX_ARGUMENT_BYTES}))
    assert not out.ok and "exceed" in out.content
