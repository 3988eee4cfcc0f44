"""`.search/` through a real mount: a paraphrase finds the planted fact's
page first, results follow a re-parse (stale until it lands), an
unprivileged user's queries never show what that user cannot read, and an
embedding model makes the ranking hybrid."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests import docgen
from tests.embedgen import write_model
from tests.mountutil import Mount, needs_fuse, swfs, unprivileged_ids, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]

FACT = "Revenue in the North territory reached 4.2 million in the third quarter."
SECRET = "PAYROLL-MARKER-9d2e"
HIDDEN = "CLOSED-DIR-MARKER-61af"


def hits(text: str) -> list[list[str]]:
    """The hit lines of a .search file: [path, score, freshness, snippet]."""
    return [line.split("\t") for line in text.splitlines() if not line.startswith("#")]


def read(mnt: Path, query: str) -> str:
    return (mnt / ".search" / query).read_text(encoding="utf-8")


def wait_for(what: str, fn: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[Mount, tuple[int, int]]]:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")

    def populate(src: Path) -> None:
        (src / "report.pdf").write_bytes(docgen.pdf_bytes(6, fact_page=4, fact=FACT))
        (src / "weather.txt").write_text("A north wind blew all week over the harbour.\n")
        (src / "south.txt").write_text("Regional sales summary for the south.\n")
        (src / "costs.txt").write_text("Costs were flat; revenue is reported elsewhere.\n")
        (src / "zebra.txt").write_text("zebra crossing payroll desk\n")
        (src / "secret.txt").write_text(f"zebra payroll {SECRET}\n")
        os.chmod(src / "secret.txt", 0o600)
        (src / "team.txt").write_text("zebra team payroll plan\n")
        os.chown(src / "team.txt", 0, ids[1])
        os.chmod(src / "team.txt", 0o640)
        (src / "private").mkdir()
        (src / "private" / "inner.txt").write_text(f"zebra payroll {HIDDEN}\n")
        os.chmod(src / "private", 0o700)

    with workspace(populate=populate) as m:
        # The parses are done (the sync); the index catches up with them in
        # the background, and a query meanwhile says so: wait for it.
        wait_for(
            "the search index to catch up with the parses",
            lambda: "still catching up" not in read(m.mnt, "regional revenue north"),
            timeout=120,
        )
        yield m, ids


def as_user(ids: tuple[int, int], *cmd: str, cwd: Path) -> str:
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        capture_output=True,
        timeout=60,
        check=False,
        user=ids[0],
        group=ids[1],
        extra_groups=[],
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode("utf-8")


def test_a_paraphrase_finds_the_fact_page_first(shared: tuple[Mount, tuple[int, int]]) -> None:
    mnt = shared[0].mnt
    text = read(mnt, "regional revenue north")
    found = hits(text)
    assert found[0][0] == ".parsed/report.pdf/page-0004.md"
    assert found[0][2] == "current"
    assert "**Revenue**" in found[0][3]
    assert "**North**" in found[0][3]
    # Each other file shares one word: ranked below, none of them first.
    assert {h[0] for h in found[1:]} >= {
        ".parsed/weather.txt/content.txt",
        ".parsed/south.txt/content.txt",
        ".parsed/costs.txt/content.txt",
    }
    assert float(found[0][1]) > float(found[1][1])
    # The path opens as it is, from the mount's root.
    page = (mnt / found[0][0]).read_text()
    assert "4.2 million" in page
    assert "4.2 million" not in (mnt / ".parsed/report.pdf/page-0003.md").read_text()
    # What stat says is what a read gives.
    p = mnt / ".search" / "regional revenue north"
    assert os.stat(p).st_size == len(p.read_bytes())
    # The command line reads the daemon's index and says the same.
    doc = json.loads(swfs("search", mnt, "regional revenue north", "--json").stdout)
    assert [h["path"] for h in doc["hits"]] == [h[0] for h in found]
    assert doc["behind"] is False


def test_listing_syntax_and_the_root(shared: tuple[Mount, tuple[int, int]]) -> None:
    mnt = shared[0].mnt
    read(mnt, "harbour wind")
    assert "harbour wind" in os.listdir(mnt / ".search")
    assert ".search" not in os.listdir(mnt)  # a grep -r from the root runs no queries
    bad = read(mnt, '"unclosed')
    assert bad.startswith("# swfs search: a quote is not closed\n")
    assert "path:finance" in bad
    assert '"unclosed' not in os.listdir(mnt / ".search")
    only = read(mnt, "path:reports")
    assert only.startswith("# swfs search: the query has no word to look for")
    assert os.getxattr(mnt / ".search" / "harbour wind", "user.sw.query") == b"harbour wind"
    scoped = hits(read(mnt, "revenue path:nowhere"))
    assert scoped == []
    with pytest.raises(OSError, match="Read-only|Permission"):
        (mnt / ".search" / "new query").write_text("x")


def test_an_unprivileged_user_sees_only_what_they_may_read(
    shared: tuple[Mount, tuple[int, int]],
) -> None:
    m, ids = shared
    mnt = m.mnt
    everything = {
        ".parsed/zebra.txt/content.txt",
        ".parsed/secret.txt/content.txt",
        ".parsed/team.txt/content.txt",
        ".parsed/private/inner.txt/content.txt",
    }
    # Root first (the larger answer is what the kernel caches), then the user.
    assert {h[0] for h in hits(read(mnt, "zebra payroll"))} == everything
    out = as_user(ids, "cat", ".search/zebra payroll", cwd=mnt)
    lines = out.splitlines()
    assert lines[0] == '# swfs search "zebra payroll": 2 hits, ' + lines[0].split(", ", 1)[1]
    assert {h[0] for h in hits(out)} == {
        ".parsed/zebra.txt/content.txt",
        ".parsed/team.txt/content.txt",  # by its group
    }
    assert SECRET not in out
    assert HIDDEN not in out
    # The user first, then root: root's answer is not cut to the user's size.
    out = as_user(ids, "cat", ".search/payroll zebra", cwd=mnt)
    assert len(hits(out)) == 2
    assert {h[0] for h in hits(read(mnt, "payroll zebra"))} == everything
    # Files they cannot read are not even counted.
    nothing = as_user(ids, "cat", f".search/{SECRET}", cwd=mnt)
    assert nothing == f'# swfs search "{SECRET}": no hits\n'
    assert len(hits(read(mnt, SECRET))) == 1
    # Their listing is their own queries, not root's.
    listed = as_user(ids, "ls", "-1", ".search", cwd=mnt).splitlines()
    assert "payroll zebra" in listed
    assert "regional revenue north" not in listed
    assert "harbour wind" not in listed


def test_results_follow_a_reparse_and_are_stale_until_it_lands() -> None:
    def populate(src: Path) -> None:
        (src / "notes.gated").write_text("alpha quarterly margin report\n")
        (src / "notes.gated.go").write_text("")

    with workspace(populate=populate) as m:
        mnt = m.mnt
        unit = ".parsed/notes.gated/content.txt"

        def freshness(query: str) -> str | None:
            return next((h[2] for h in hits(read(mnt, query)) if h[0] == unit), None)

        # The index takes the first parse when its worker gets to it (later on a busy machine).
        wait_for("the first parse's hit", lambda: freshness("quarterly margin") == "current")
        assert freshness("harvest yield") is None
        os.unlink(mnt / "notes.gated.go")  # the next parse of notes.gated waits for it
        (mnt / "notes.gated").write_text("beta harvest yield report\n")
        wait_for("the old hit to be marked stale", lambda: freshness("quarterly margin") == "stale")
        assert freshness("harvest yield") is None
        (mnt / "notes.gated.go").write_text("")
        wait_for("the re-parse's hit", lambda: freshness("harvest yield") == "current")
        assert freshness("quarterly margin") is None


def test_an_embedding_model_makes_the_ranking_hybrid(tmp_path: Path) -> None:
    model = write_model(tmp_path / "model")

    def populate(src: Path) -> None:
        (src / "q3.txt").write_text("Turnover in the arctic office doubled.\n")
        (src / "weather.txt").write_text("Rain and wind all week.\n")

    with workspace(["--embed-model", str(model)], populate=populate) as m:
        text = read(m.mnt, "income")
        assert ", hybrid" in text.splitlines()[0]
        assert [h[0] for h in hits(text)] == [".parsed/q3.txt/content.txt"]
