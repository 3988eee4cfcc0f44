"""Lineage precise enough to grade an agent (issue 37).

Scripted tasks run through a real mount as a shell agent runs them (one
``bash -c`` per task, or a Python script): long command sequences with
several reads and writes, pipelines, command and process substitution,
Python scripts, reads of ``.review`` diffs, short-lived processes.  Each
task has its ground-truth edges (output <- inputs).  ``swfs lineage
--json`` is scored over all tasks by edge precision and recall (over
paths), both printed; each must be at least 0.95.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, swfs, workspace

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(600)]

ROWS = 300


def populate(src: Path) -> None:
    for d in ("data", "docs", "notes", "reports", "out"):
        (src / d).mkdir()
    lines = ["id,region,amount"] + [f"{i},{'NSEW'[i % 4]},{i * 7 % 101}" for i in range(1, ROWS)]
    (src / "data" / "export.csv").write_text("\n".join(lines) + "\n")
    (src / "data" / "unrelated.csv").write_text("x,y\n1,2\n")
    for name, words in (("a", "alpha apple"), ("b", "beta banana"), ("c", "gamma cherry")):
        (src / "docs" / f"{name}.txt").write_text(
            "".join(f"{w} {i}\n" for i in range(20) for w in words.split())
        )
    (src / "notes" / "brief.md").write_text("# Brief\n\nSummarise Q3 revenue by region.\n")
    (src / "reports" / "q3.txt").write_text("Q3 report\nrevenue up\nmargins flat\nend\n")
    (src / "readme.md").write_text("zeta\nalpha\nmu\n")
    (src / "config.json").write_text('{"mode": "draft", "threshold": 3}\n')


# Scripts live outside the mount: the interpreter's reads of them are no input.
SCRIPTS = {
    "two_outputs": """
import json
a = open("docs/a.txt").read()
cfg = json.load(open("config.json"))
open("out/py1.txt", "w").write(a.upper())
open("out/py2.txt", "w").write(str(cfg["threshold"] * len(a)))
""",
    "ab_json": """
import json
a, b = open("docs/a.txt").read(), open("docs/b.txt").read()
json.dump({"a": len(a), "b": len(b)}, open("out/ab.json", "w"))
""",
    "subprocess_cat": """
import subprocess
text = subprocess.run(["cat", "docs/b.txt"], capture_output=True, text=True, check=True).stdout
open("out/sub.txt", "w").write(text[::-1])
""",
    "glob_summary": """
import glob
parts = [open(p).read().splitlines()[0] for p in sorted(glob.glob("docs/*.txt"))]
with open("out/summary.md", "w") as f:
    f.write("\\n".join(parts))
""",
    "stdin_and_config": """
import json, sys
text = sys.stdin.read()
cfg = json.load(open("config.json"))
open("out/cfg_c.txt", "w").write(cfg["mode"] + text)
""",
}

# (the command: a bash -c string, or "py:NAME [args]"; truth: output -> inputs)
TASKS: list[tuple[str, dict[str, set[str]]]] = [
    # Within one bash -c, a reader that writes nothing gives its reads to nobody.
    ("head -3 data/export.csv; cat readme.md | sort > out/g2.txt", {"out/g2.txt": {"readme.md"}}),
    (
        "wc -l data/export.csv notes/brief.md; python3 {py}/ab_json.py",
        {"out/ab.json": {"docs/a.txt", "docs/b.txt"}},
    ),
    (
        "cat docs/a.txt docs/b.txt > out/ab.txt; sort docs/c.txt > out/c_sorted.txt; "
        "grep -c x reports/q3.txt; wc -l notes/brief.md > out/brief_lines.txt",
        {
            "out/ab.txt": {"docs/a.txt", "docs/b.txt"},
            "out/c_sorted.txt": {"docs/c.txt"},
            "out/brief_lines.txt": {"notes/brief.md"},
        },
    ),
    # Short-lived processes upstream of a pipe.
    ("head -c 100 data/export.csv | cut -c1-10 > out/o.txt", {"out/o.txt": {"data/export.csv"}}),
    (
        "cat data/export.csv | grep ,N, | sort -t, -k3 -n | tail -5 > out/north_top.txt",
        {"out/north_top.txt": {"data/export.csv"}},
    ),
    (
        "for i in 1 2 3; do head -c 10 docs/a.txt; done | wc -c > out/wc_a.txt",
        {"out/wc_a.txt": {"docs/a.txt"}},
    ),
    # Command substitution: the shell writes what its child read.
    ('n=$(wc -l < notes/brief.md); echo "$n" > out/n.txt', {"out/n.txt": {"notes/brief.md"}}),
    # A redirection of a compound command: its children write the file.
    (
        'for f in docs/a.txt docs/b.txt; do cat "$f"; done > out/loop.txt',
        {"out/loop.txt": {"docs/a.txt", "docs/b.txt"}},
    ),
    (
        "{ echo '# Notes'; cat notes/brief.md; } > out/notes_doc.md",
        {"out/notes_doc.md": {"notes/brief.md"}},
    ),
    # Process substitution.
    (
        "paste -d, <(cut -d, -f1 data/export.csv) <(cut -d, -f3 data/export.csv) > out/paste.csv",
        {"out/paste.csv": {"data/export.csv"}},
    ),
    # Python scripts.
    (
        "py:two_outputs",
        {
            "out/py1.txt": {"docs/a.txt", "config.json"},
            "out/py2.txt": {"docs/a.txt", "config.json"},
        },
    ),
    ("cat readme.md; python3 {py}/subprocess_cat.py", {"out/sub.txt": {"docs/b.txt"}}),
    ("py:glob_summary", {"out/summary.md": {"docs/a.txt", "docs/b.txt", "docs/c.txt"}}),
    (
        "cat docs/c.txt | python3 {py}/stdin_and_config.py",
        {"out/cfg_c.txt": {"docs/c.txt", "config.json"}},
    ),
    (
        "python3 -c 'import sys; print(sys.stdin.read().upper())' < reports/q3.txt"
        " > out/q3_upper.txt",
        {"out/q3_upper.txt": {"reports/q3.txt"}},
    ),
    # Long sequences: each output from what its own command read.
    (
        "diff docs/a.txt docs/b.txt > out/ab.diff; cat readme.md > out/readme_copy.md",
        {"out/ab.diff": {"docs/a.txt", "docs/b.txt"}, "out/readme_copy.md": {"readme.md"}},
    ),
    (
        "grep -h region data/export.csv | head -1 > out/header.txt; cat config.json",
        {"out/header.txt": {"data/export.csv"}},
    ),
    (
        "sort docs/a.txt | uniq -c > out/counts_a.txt; "
        "sort docs/b.txt | uniq -c > out/counts_b.txt",
        {"out/counts_a.txt": {"docs/a.txt"}, "out/counts_b.txt": {"docs/b.txt"}},
    ),
    ("cat docs/a.txt; cat docs/b.txt; cat docs/c.txt; echo summary > out/plain.txt", {}),
    (
        "tr a-z A-Z < docs/a.txt > out/upper.txt; cat out/upper.txt docs/b.txt > out/both.txt",
        {"out/upper.txt": {"docs/a.txt"}, "out/both.txt": {"out/upper.txt", "docs/b.txt"}},
    ),
    (
        "head -n1 data/export.csv > out/h1.txt; head -n1 data/unrelated.csv > out/h2.txt; "
        "cat out/h1.txt out/h2.txt > out/h12.txt",
        {
            "out/h1.txt": {"data/export.csv"},
            "out/h2.txt": {"data/unrelated.csv"},
            "out/h12.txt": {"out/h1.txt", "out/h2.txt"},
        },
    ),
    (
        "cat docs/a.txt | tee out/tee.txt | wc -l > out/tee_count.txt",
        {"out/tee.txt": {"docs/a.txt"}, "out/tee_count.txt": {"docs/a.txt"}},
    ),
    (
        "cat .parsed/data/export.csv/* | grep -c ,S, > out/south.txt",
        {"out/south.txt": {"data/export.csv"}},
    ),
    # Programs that run others: find -exec, xargs, a while loop, a here-document.
    (
        "find docs -name '*.txt' -exec cat {} + > out/all_docs.txt; ls notes",
        {"out/all_docs.txt": {"docs/a.txt", "docs/b.txt", "docs/c.txt"}},
    ),
    (
        "cat readme.md; ls docs | xargs -I{} head -1 docs/{} | wc -l > out/xargs_count.txt",
        {"out/xargs_count.txt": {"docs/a.txt", "docs/b.txt", "docs/c.txt"}},
    ),
    (
        'while read f; do wc -c "docs/$f"; done < <(ls docs) > out/sizes.txt; cat config.json',
        {"out/sizes.txt": {"docs/a.txt", "docs/b.txt", "docs/c.txt"}},
    ),
    (
        "head -2 reports/q3.txt; python3 - <<'EOF'\n"
        "open('out/heredoc.txt', 'w').write(open('config.json').read())\n"
        "EOF",
        {"out/heredoc.txt": {"config.json"}},
    ),
    # A file outside the mount between two commands.
    (
        "t=$(mktemp); cut -d, -f2 data/export.csv > $t; sort $t | uniq > out/regions.txt; rm $t",
        {"out/regions.txt": {"data/export.csv"}},
    ),
    # .review: an edit, then a report made from its diff.
    ("sed -i 's/Q3/third-quarter/' notes/brief.md", {"notes/brief.md": {"notes/brief.md"}}),
    (
        "ls .review >/dev/null; cat .review/notes/brief.md.diff > out/from_diff.md",
        {"out/from_diff.md": {"notes/brief.md"}},
    ),
    (
        "grep -c '^+' .review/notes/brief.md.diff > out/diff_count.txt; cat docs/c.txt",
        {"out/diff_count.txt": {"notes/brief.md"}},
    ),
]


def run_task(m: Mount, cmd: str, scripts: Path) -> None:
    if cmd.startswith("py:"):
        name, *args = cmd[3:].split()
        argv = [sys.executable, str(scripts / f"{name}.py"), *args]
    else:
        argv = ["bash", "-c", cmd.replace("{py}", str(scripts))]
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    proc = subprocess.run(
        argv, cwd=m.mnt, capture_output=True, text=True, timeout=120, check=False, env=env
    )
    assert proc.returncode in (0, 1), f"{cmd}: {proc.stderr}"  # diff and grep -c say 1


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    for name, text in SCRIPTS.items():
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path


@pytest.fixture
def ws() -> Iterator[Mount]:
    with workspace(populate=populate) as m:
        yield m


def score(truth: set[tuple[str, str]], got: set[tuple[str, str]]) -> tuple[float, float]:
    tp = len(truth & got)
    precision = tp / len(got) if got else 1.0
    recall = tp / len(truth) if truth else 1.0
    return precision, recall


def test_edge_precision_and_recall_over_scripted_tasks(
    ws: Mount, scripts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(TASKS) >= 20
    truth: set[tuple[str, str]] = set()
    outputs: set[str] = set()
    for cmd, edges in TASKS:
        run_task(ws, cmd, scripts)
        for out, ins in edges.items():
            outputs.add(out)
            truth |= {(i, out) for i in ins}
    graph = json.loads(swfs("lineage", ws.mnt, "--json").stdout)
    got = {(e["from_path"], e["to_path"]) for e in graph["edges"]}
    precision, recall = score(truth, got)
    with capsys.disabled():
        print(
            f"\nlineage over {len(TASKS)} scripted tasks, {len(truth)} true edges:"
            f" edge precision {precision:.3f}, recall {recall:.3f}"
            f"\n  missing {sorted(truth - got)}\n  extra {sorted(got - truth)}"
        )
    assert precision >= 0.95, sorted(got - truth)
    assert recall >= 0.95, sorted(truth - got)

    # A diff read is credited to the two versions it compares.
    brief = {
        e["from_hash"]
        for e in graph["edges"]
        if e["to_path"] == "out/from_diff.md" and e["from_path"] == "notes/brief.md"
    }
    now = os.getxattr(ws.mnt / "notes" / "brief.md", "user.sw.hash").decode()
    assert now in brief
    assert len(brief) == 2

    # The text form: each input once, with a count; what is gone, said.
    (ws.mnt / "out" / "h1.txt").unlink()
    text = swfs("lineage", ws.mnt).stdout
    lines = text.splitlines()
    h12 = next(x for x in lines if x.startswith("out/h12.txt <- "))
    assert "out/h1.txt (gone" in h12, h12
    paths = {i for _cmd, edges in TASKS for ins in edges.values() for i in ins}
    for line in lines:
        listed = line.partition(" <- ")[2]
        for p in paths:
            assert len(re.findall(rf"(?:^|, ){re.escape(p)}(?=[ ,]|$)", listed)) <= 1, line
