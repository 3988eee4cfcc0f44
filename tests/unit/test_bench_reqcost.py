"""The request-cost workloads' pieces that need no mount: the replayed agent
log runs on a real workspace, and the peer table puts each peer in its column."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench import gen, reqcost
from bench.report import WorkloadResult


def test_agent_log_is_valid_shell_and_covers_the_agents_tools() -> None:
    commands = reqcost.agent_commands()
    assert len(commands) >= 15
    assert not [c for c in commands if c.lstrip().startswith("#")]
    for cmd in commands:
        cp = subprocess.run(["sh", "-n", "-c", cmd], capture_output=True, text=True, timeout=30)
        assert cp.returncode == 0, f"{cmd}: {cp.stderr}"
    tools = {c.split()[0] for c in commands}
    assert {"grep", "find", "cat", "ls", "$PY"} <= tools
    assert any("openpyxl" in c for c in commands)
    assert sum("$PARSED" in c for c in commands) >= 3


def test_agent_log_replays_on_a_workspace(tmp_path: Path) -> None:
    root = gen.workspace(tmp_path, 60, 8)
    parsed = tmp_path / "parsed"
    (parsed / "sheet.xlsx").mkdir(parents=True)
    (parsed / "sheet.xlsx" / "Sheet1.md").write_text("total covenant 12\n")
    env = dict(os.environ, PY=sys.executable, PARSED=str(parsed), LC_ALL="C")
    outputs = []
    for cmd in reqcost.agent_commands():
        cp = subprocess.run(
            ["sh", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, timeout=120
        )
        assert cp.returncode in (0, 1), f"{cmd}: exit {cp.returncode}: {cp.stderr}"
        outputs.append(cp.stdout)
    xlsx_line = next(i for i, c in enumerate(reqcost.agent_commands()) if "openpyxl" in c)
    # The script printed each workbook's sheets (their path, title, rows, header).
    assert ".xlsx" in outputs[xlsx_line]
    assert "Traceback" not in outputs[xlsx_line]
    assert any("sheet.xlsx/Sheet1.md:1:total covenant 12" in out for out in outputs)


def _ratio(result: WorkloadResult, name: str, native: float, mount: float) -> None:
    m = result.metric(name, "s")
    m.native.append(native)
    m.mount.append(mount)


def test_peer_table_one_column_per_peer() -> None:
    r = WorkloadResult("reqcost_tree")
    _ratio(r, "find_root@hp", 1.0, 2.0)
    _ratio(r, "find_root@pyfuse3", 1.0, 10.0)
    _ratio(r, "find_root@hp_same", 1.0, 20.0)  # the C peer over a copy of swfs's tree
    r.metric("find_root@hp_nopt", "s").note = "passthrough_hp unavailable: no network"
    _ratio(r, "find_root", 1.0, 300.0)
    _ratio(r, "lonely", 1.0, 3.0)  # no peer rows: not in the peer table
    other = WorkloadResult("search")
    _ratio(other, "grep_rn", 1.0, 4.0)
    lines = reqcost.peer_table([r, other]).splitlines()
    assert lines[0].split()[0] == "workload.metric"
    assert "C passthrough_hp" in lines[0]
    assert lines[0].rstrip().endswith("swfs")
    assert len(lines) == 2
    cells = lines[1].split()
    assert cells == ["reqcost_tree.find_root", "2.00x", "n/a", "20.00x", "10.00x", "300.00x"]
    assert reqcost.peer_table([other]) == ""


def test_walks_from_the_root_are_held_to_twice_the_peer_serving_the_same_tree() -> None:
    """Issue 38: ``find_root`` and ``grep_root`` against twice ``hp_same``'s
    ratio (the C peer serving swfs's visible tree), the rest against ``hp``'s."""
    result = WorkloadResult("reqcost_tree")
    plan = reqcost.Plan({"find_root": 2.0, "ls_lR": 1.0}, peer={"find_root": "hp_same"})
    ratios = {
        ("hp", "find_root"): 1.0,
        ("hp_same", "find_root"): 6.0,
        ("hp", "ls_lR"): 3.0,
        ("hp_same", "ls_lR"): 5.0,
    }
    reqcost.set_targets(result, plan, ratios)
    find, ls = result.metric("find_root", "s").target, result.metric("ls_lR", "s").target
    assert find is not None
    assert ls is not None
    assert (find.bound, find.text) == (12.0, "<=12x (C hp_same x2)")
    assert (ls.bound, ls.text) == (3.0, "<=3x (C)")
    plan = reqcost.Plan({"grep_root": 2.0}, peer={"grep_root": "hp_same"})
    reqcost.set_targets(result, plan, {("hp", "grep_root"): 4.0})  # hp_same could not run
    assert result.metric("grep_root", "s").target is None
