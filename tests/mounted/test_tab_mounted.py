"""`.tab/` and `swfs tab` through a real mount.

* A read of page 17 shows in reads.md as `report.pdf#page=17`, with the
  process and the page's first lines; reading the tab itself is no evidence.
* A listed-but-unopened file that matches an open requirement is ranked in
  unopened.md above unrelated ones (which sort before it by name), with its
  snippet; a file that was opened is not there.
* `swfs tab check` fails while a requirement is open and passes once it is
  resolved (sed -i: temp file and rename) or set aside (a Python
  temp-then-rename save); requirements.md holds exactly the bytes written.
* `swfs tab new` keeps the old tab readable under `.tab/@old/NAME/`.
* Nothing else under `.tab/` is writable.
* With allow_other, an unprivileged user gets EACCES on `.tab/`; with
  `--share-tab` they may read it, but never an excerpt of a file they cannot read.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import docgen
from tests.mountutil import Mount, needs_fuse, run_as, swfs, unprivileged_ids, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]

FACT = "Revenue in the North territory reached 4.2 million in the third quarter."
MATCH = "Quarterly revenue by territory: the North territory led all regions."
SECRET = "PAYROLL-MARKER-3b7e"


def wait_for(what: str, fn: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def sh(cmd: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=60, check=True
    )


def errno_of(fn: Callable[[], object]) -> int:
    """The errno ``fn()`` failed with, 0 if it did not fail."""
    try:
        fn()
    except OSError as exc:
        return exc.errno or -1
    return 0


def tab_file(mnt: Path, name: str) -> str:
    return (mnt / ".tab" / name).read_text(encoding="utf-8")


def populate(src: Path) -> None:
    (src / "report.pdf").write_bytes(docgen.pdf_bytes(20, fact_page=17, fact=FACT))
    (src / "data").mkdir()
    (src / "data" / "aardvark.txt").write_text("Notes on burrowing animals of the savanna.\n")
    (src / "data" / "apiary.txt").write_text("Bee keeping schedule for the spring.\n")
    (src / "data" / "territories.txt").write_text(MATCH + "\n")
    (src / "data" / "weather.txt").write_text("Revenue of the north wind: none at all.\n")
    (src / "secret.txt").write_text(f"{SECRET} salaries by territory\n")
    os.chmod(src / "secret.txt", 0o600)


@pytest.fixture(scope="module")
def mount() -> Iterator[Mount]:
    with workspace(populate=populate) as m:
        yield m


@pytest.fixture
def fresh(mount: Mount) -> Path:
    """The mount point, in a new empty tab."""
    swfs("tab", "new", mount.mnt)
    assert tab_file(mount.mnt, "requirements.md") == ""
    return mount.mnt


def test_read_of_page_17_is_in_reads(fresh: Path) -> None:
    mnt = fresh
    page = sh("cat .parsed/report.pdf/page-0017.md", mnt).stdout
    assert FACT in page
    sh("head -c 100 data/apiary.txt > /dev/null", mnt)
    reads = tab_file(mnt, "reads.md")
    assert "## report.pdf#page=17\nby cat[" in reads, reads
    # The excerpt is the page's first lines (after its header), not another page's.
    block = reads.split("## report.pdf#page=17", 1)[1].split("\n## ", 1)[0]
    assert "> Section 17" in block
    assert "Section 16" not in block
    assert "Section 18" not in block
    assert "## data/apiary.txt#lines=1-1\nby head[" in reads
    assert reads.index("report.pdf#page=17") < reads.index("data/apiary.txt")
    # Reading the tab is no evidence.
    tab_file(mnt, "TAB.md")
    again = tab_file(mnt, "reads.md")
    assert ".tab/" not in again
    assert again.count("\n## ") == 2, again
    sh("ls .tab > /dev/null", mnt)
    logged = swfs("log", mnt, "--json").stdout.splitlines()
    events = [json.loads(line) for line in logged]
    assert any(e.get("locator") == "report.pdf#page=17" for e in events)
    assert not [e for e in events if str(e.get("path", "")).startswith(".tab")]
    # Reachable by path, not listed at the root: a grep -r from there skips it.
    assert ".tab" not in os.listdir(mnt)
    shown = json.loads(swfs("tab", "show", mnt, "--json").stdout)
    locators = [r["locator"] for r in shown["reads"]]
    assert locators == ["report.pdf#page=17", "data/apiary.txt#lines=1-1"]
    # A resolved requirement's citations are checked against what was read.
    sh(
        "echo '- [x] North revenue -- report.pdf#page=17, report.pdf#page=2, "
        "data/apiary.txt, nowhere/x.pdf#page=1' >> .tab/requirements.md",
        mnt,
    )
    tab = tab_file(mnt, "TAB.md")
    assert "cited report.pdf#page=17: read in this tab" in tab
    assert "cited report.pdf#page=2: NOT read in this tab" in tab
    assert "cited data/apiary.txt: read in this tab" in tab
    assert "cited nowhere/x.pdf#page=1: no such file in the workspace" in tab


def test_unopened_ranked_by_open_requirements(fresh: Path) -> None:
    mnt = fresh
    sh("echo '- [ ] Q3 revenue of the North territory' >> .tab/requirements.md", mnt)
    sh("ls data > /dev/null && cat data/weather.txt > /dev/null", mnt)

    def ranked() -> list[str]:
        text = tab_file(mnt, "unopened.md")
        return [ln[2:].split("  ")[0] for ln in text.splitlines() if ln.startswith("- ")]

    wait_for(
        "territories.txt to rank first",
        lambda: ranked()[:1] == ["data/territories.txt"],
    )
    names = ranked()
    # Unrelated files come after it although their names sort first; the
    # opened file is not there.
    assert set(names) == {"data/territories.txt", "data/aardvark.txt", "data/apiary.txt"}
    text = tab_file(mnt, "unopened.md")
    assert "data/territories.txt#" in text
    assert "territory" in text.lower()
    assert "data/aardvark.txt  (matches no open requirement)" in text
    tab = tab_file(mnt, "TAB.md")
    assert "## [ ] Q3 revenue of the North territory" in tab
    assert "not opened yet:\n  - data/territories.txt#" in tab
    # What was read and matches is the requirement's evidence.
    assert "read:\n  - data/weather.txt#" in tab
    # Reads after a report are added to it (the mount goes on from the
    # last report's events while the workspace stays as it was).
    count = int(tab.split(" reads, ", 1)[0].rsplit(" ", 1)[1])
    sh("cat data/territories.txt > /dev/null", mnt)
    wait_for("territories.txt opened", lambda: "data/territories.txt" not in ranked())
    later = tab_file(mnt, "TAB.md")
    assert f" {count + 1} reads, " in later, later
    assert "data/territories.txt#" in later.split("read:\n", 1)[1]
    assert "not opened yet:\n  - data/territories.txt#" not in later


def test_check_fails_until_resolved_or_set_aside(fresh: Path) -> None:
    mnt = fresh
    reqs = mnt / ".tab" / "requirements.md"
    sh("echo '- [ ] Q3 revenue by region' >> .tab/requirements.md", mnt)
    sh("printf '%s\\n' '- [ ] headcount in 2024' >> .tab/requirements.md", mnt)
    failed = swfs("tab", "check", mnt, check=False)
    assert failed.returncode == 1
    assert "Q3 revenue by region" in failed.stdout
    assert "headcount in 2024" in failed.stdout
    # sed -i writes a temp file in .tab/ and renames it over requirements.md,
    # quietly (it said "preserving permissions ...: Read-only file system").
    edited = sh(
        "sed -i 's/^- \\[ \\] Q3 revenue by region$/- [x] Q3 revenue by region"
        " -- report.pdf#page=17/' .tab/requirements.md",
        mnt,
    )
    assert edited.stderr == ""
    still = swfs("tab", "check", mnt, check=False)
    assert still.returncode == 1
    assert "headcount in 2024" in still.stdout
    assert "Q3 revenue" not in still.stdout
    # An editor's save: a temp file beside it, then a rename.
    new = reqs.read_bytes().replace(
        b"- [ ] headcount in 2024", b"- [-] headcount in 2024 -- not in the workspace"
    )
    tmp = mnt / ".tab" / ".requirements.md.swp"
    with open(tmp, "wb") as f:
        f.write(new)
    os.replace(tmp, reqs)
    assert reqs.read_bytes() == new
    assert not tmp.exists()
    assert sorted(os.listdir(mnt / ".tab")) == [
        "@old",
        "TAB.md",
        "reads.md",
        "requirements.md",
        "unopened.md",
    ]
    ok = swfs("tab", "check", mnt, check=False)
    assert ok.returncode == 0, ok.stdout
    assert "1 resolved, 1 set aside" in ok.stdout
    assert new == (
        b"- [x] Q3 revenue by region -- report.pdf#page=17\n"
        b"- [-] headcount in 2024 -- not in the workspace\n"
    )
    shown = json.loads(swfs("tab", "show", mnt, "--json").stdout)
    assert [(r["state"], r["note"]) for r in shown["requirements"]] == [
        ("resolved", "report.pdf#page=17"),
        ("set aside", "not in the workspace"),
    ]
    assert shown["open"] == []


def test_vim_saves_requirements(fresh: Path) -> None:
    """vim keeps its swap files in .tab/ (scratch files) and saves in place."""
    if shutil.which("vim") is None:
        pytest.skip("vim is not installed")
    mnt = fresh
    sh("echo '- [ ] Q3 revenue by region' >> .tab/requirements.md", mnt)
    sh(
        "vim -u NONE -N -es "
        "-c '%s/^- \\[ \\]/- [x]/' -c 's/$/ -- report.pdf#page=17/' -c wq "
        ".tab/requirements.md",
        mnt,
    )
    assert tab_file(mnt, "requirements.md") == (
        "- [x] Q3 revenue by region -- report.pdf#page=17\n"
    )
    assert sorted(os.listdir(mnt / ".tab")) == [
        "@old",
        "TAB.md",
        "reads.md",
        "requirements.md",
        "unopened.md",
    ]
    assert swfs("tab", "check", mnt).returncode == 0


def test_backup_rename_save(fresh: Path) -> None:
    """An editor that renames the file to a backup, writes a new one and
    removes the backup (vim's backupcopy=no, emacs)."""
    tab = fresh / ".tab"
    (tab / "requirements.md").write_text("- [ ] one\n")
    os.rename(tab / "requirements.md", tab / "requirements.md~")
    assert (tab / "requirements.md~").read_text() == "- [ ] one\n"
    assert (tab / "requirements.md").read_text() == ""  # it always exists
    with open(tab / "requirements.md", "w") as f:
        f.write("- [-] one -- not needed\n")
    os.unlink(tab / "requirements.md~")
    assert not (tab / "requirements.md~").exists()
    assert (tab / "requirements.md").read_text() == "- [-] one -- not needed\n"
    assert swfs("tab", "check", fresh).returncode == 0


def test_only_requirements_is_writable(fresh: Path) -> None:
    mnt = fresh
    tab = mnt / ".tab"
    denied = (errno.EROFS, errno.EACCES)
    for name in ("reads.md", "TAB.md", "unopened.md"):
        assert errno_of(lambda name=name: (tab / name).write_text("x")) in denied, name
        assert errno_of(lambda name=name: os.unlink(tab / name)) in denied, name
    assert errno_of(lambda: (tab / "sub").mkdir()) in denied
    assert errno_of(lambda: (tab / "@old" / "x.md").write_text("x")) in denied
    assert errno_of(lambda: os.unlink(tab / "requirements.md")) in denied
    assert errno_of(lambda: os.rename(tab / "requirements.md", mnt / "moved.md")) == errno.EXDEV
    # `echo >` replaces, `>>` appends, truncate works.
    sh("echo '- [ ] one' > .tab/requirements.md", mnt)
    sh("echo '- [ ] two' >> .tab/requirements.md", mnt)
    assert tab_file(mnt, "requirements.md") == "- [ ] one\n- [ ] two\n"
    os.truncate(tab / "requirements.md", 10)
    assert tab_file(mnt, "requirements.md") == "- [ ] one\n"
    assert (tab / "requirements.md").stat().st_size == 10


def test_new_keeps_the_old_tab(fresh: Path) -> None:
    mnt = fresh
    swfs("tab", "new", mnt, "first-task")  # NAME names the tab it starts
    sh("echo '- [ ] first task item' >> .tab/requirements.md", mnt)
    sh("cat .parsed/report.pdf/page-0003.md > /dev/null", mnt)
    out = swfs("tab", "new", mnt, "second-task").stdout
    assert "started the tab second-task" in out
    assert ".tab/@old/first-task/" in out
    old = mnt / ".tab" / "@old" / "first-task"
    assert (old / "requirements.md").read_text() == "- [ ] first task item\n"
    assert "report.pdf#page=3" in (old / "reads.md").read_text()
    assert "first task item" in (old / "TAB.md").read_text()
    assert tab_file(mnt, "requirements.md") == ""
    assert "report.pdf#page=3" not in tab_file(mnt, "reads.md")
    assert swfs("tab", "check", mnt).returncode == 0
    for taken in ("first-task", "second-task"):  # an earlier tab's name, the current one's
        again = swfs("tab", "new", mnt, taken, check=False)
        assert again.returncode != 0
        assert taken in again.stderr
    shown = json.loads(swfs("tab", "show", mnt, "--json", "--old", "first-task").stdout)
    assert shown["open"] == ["first task item"]


def test_unprivileged_user_gets_eacces(mount: Mount) -> None:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")
    tab = mount.mnt / ".tab"
    assert run_as(ids, lambda: os.listdir(tab)) == errno.EACCES
    assert run_as(ids, lambda: (tab / "TAB.md").read_bytes()) == errno.EACCES
    assert run_as(ids, lambda: (tab / "reads.md").read_bytes()) == errno.EACCES

    def append() -> None:
        with open(tab / "requirements.md", "a") as f:
            f.write("- [ ] sneaked in\n")

    assert run_as(ids, append) == errno.EACCES
    assert "sneaked" not in tab_file(mount.mnt, "requirements.md")
    # The native tree stays open to them: the denial is the tab's.
    assert run_as(ids, lambda: (mount.mnt / "data" / "apiary.txt").read_bytes()) == 0


def test_shared_tab_never_shows_unreadable_excerpts() -> None:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")
    with workspace(["--share-tab"], populate=populate) as m:
        mnt = m.mnt
        sh("cat secret.txt data/apiary.txt > /dev/null", mnt)
        sh("echo '- [ ] salaries by territory' >> .tab/requirements.md", mnt)
        assert SECRET in tab_file(mnt, "reads.md")  # the owner may read it
        seen: dict[str, bytes] = {}
        for name in ("reads.md", "TAB.md", "unopened.md", "requirements.md"):
            proc = subprocess.run(
                ["cat", str(mnt / ".tab" / name)],
                capture_output=True,
                timeout=60,
                check=True,
                user=ids[0],
                group=ids[1],
                extra_groups=[],
            )
            seen[name] = proc.stdout
        assert b"## (withheld)\nby cat[" in seen["reads.md"]
        assert b"secret.txt" not in seen["reads.md"]
        assert b"Bee keeping" in seen["reads.md"]
        for name, data in seen.items():
            assert SECRET.encode() not in data, name

        def append() -> None:
            with open(mnt / ".tab" / "requirements.md", "a") as f:
                f.write("- [ ] sneaked in\n")

        assert run_as(ids, append) == errno.EACCES
