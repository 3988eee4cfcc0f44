"""Search probes by an unprivileged attacker (the test user, through
allow_other): what `.search/` tells them must not change when a file they
cannot read holds the words they guess.  Scores, hit counts, order and
snippets are compared byte for byte before and after root writes a private
file holding every probed word; root, meanwhile, finds it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, swfs, unprivileged_ids, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(240), needs_fuse]

GUESS = "hunter2"
PROBES = ("zebra", "payroll", "zebra payroll", f"zebra {GUESS}", GUESS, '"payroll office"')


def _as(ids: tuple[int, int], mnt: Path, query: str) -> str:
    proc = subprocess.run(
        ["cat", f".search/{query}"],
        cwd=mnt,
        capture_output=True,
        timeout=60,
        check=False,
        user=ids[0],
        group=ids[1],
        extra_groups=[],
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode("utf-8")


def _root(mnt: Path, query: str) -> str:
    return (mnt / ".search" / query).read_text(encoding="utf-8")


def _settled(mnt: Path, query: str, rel: str, present: bool, timeout: float = 90) -> None:
    """Until root's answer to ``query`` has (or lacks) ``rel`` and the index
    has caught up with every parse."""
    deadline = time.monotonic() + timeout
    while True:
        text = _root(mnt, query)
        if (f".parsed/{rel}/" in text) == present and "catching up" not in text:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{query!r}: {rel} never {'in' if present else 'out of'} {text}")
        time.sleep(0.2)


@pytest.fixture
def mount() -> Iterator[tuple[Mount, tuple[int, int]]]:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")

    def populate(src: Path) -> None:
        (src / "mine.txt").write_text("The zebra crossing near the payroll office.\n")
        os.chown(src / "mine.txt", ids[0], ids[1])
        (src / "notes.txt").write_text("Payroll runs monthly; the office is closed on Fridays.\n")
        (src / "zoo.txt").write_text("A zebra, a lion and a zebra foal.\n" * 4)
        (src / "filler.txt").write_text("Words about the weather and nothing else.\n")

    with workspace(populate=populate) as m:
        yield m, ids


def test_an_attackers_search_does_not_change_with_a_private_file(
    mount: tuple[Mount, tuple[int, int]],
) -> None:
    m, ids = mount
    mnt = m.mnt
    _settled(mnt, "zebra payroll", "mine.txt", True)
    before = {q: _as(ids, mnt, q) for q in PROBES}
    assert ".parsed/mine.txt/content.txt" in before["zebra payroll"]
    assert before[GUESS].endswith(": no hits\n")

    # Root writes a short private file holding every probed word, the guess
    # too: in statistics over the whole index it would lower each word's
    # weight, the average length, and move the attacker's scores.
    secret = m.src / "secret.txt"
    secret.write_text(f"zebra payroll office {GUESS} zebra payroll {GUESS}\n")
    os.chmod(secret, 0o600)
    swfs("sync", mnt)
    _settled(mnt, GUESS, "secret.txt", True)
    _settled(mnt, "zebra payroll", "secret.txt", True)
    # The owner (root) still finds it: the probe could fail.
    assert "**hunter2**" in _root(mnt, GUESS)

    after = {q: _as(ids, mnt, q) for q in PROBES}
    for q in PROBES:
        assert after[q] == before[q], q
        assert "secret.txt" not in after[q]
        assert GUESS not in after[q].split("\n", 1)[1]  # the header repeats the query

    # And gone again: still the same answer.
    secret.unlink()
    swfs("sync", mnt)
    _settled(mnt, GUESS, "secret.txt", False)
    assert {q: _as(ids, mnt, q) for q in PROBES} == before
