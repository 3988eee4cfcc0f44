"""Kernel FUSE passthrough for native files (mountd.fastpath), through a real mount.

With ``--passthrough=on`` and a pyfuse3 built against libfuse 3.17 (what
``make install`` builds when it can), the kernel reads read-only opens of
native files itself.  Whether it is on is read from the daemon's log (it
says so at the first open, or says why not); either way the same bytes,
versions and ``.parsed`` views must come out.  ``--passthrough=off`` is the
path of a machine without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mountd.fastpath import FastPath, passthrough_unavailable
from mountd.options import MountOptions
from swfs.store.fsutil import hash_file
from tests.mounted.test_walk_requests import _counts, _delta
from tests.mountutil import Mount, needs_fuse, swfs, workspace

pytestmark = [pytest.mark.mount, needs_fuse, pytest.mark.timeout(180)]

BIG = os.urandom(3 * 1024 * 1024 + 4099)


@contextlib.contextmanager
def mounted(*extra: str) -> Iterator[Mount]:
    """``mountutil.workspace`` with the daemon logging at INFO (``swfs -v``)
    and every change versioned at once."""
    with workspace(["--version-interval", "0", *extra], populate=populate, verbose=True) as m:
        yield m


def poll(cond: Callable[[], object], what: str, bound: float = 60.0) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {bound} s: {what}")
        time.sleep(0.05)


def populate(src: Path) -> None:
    (src / "notes").mkdir()
    (src / "notes" / "readme.md").write_text("# Readme\nthe first line\n")
    (src / "big.bin").write_bytes(BIG)


def versions(m: Mount, rel: str) -> list[str]:
    return sorted(os.listdir(m.mnt / ".versions" / rel))


def passthrough_state(m: Mount) -> str:
    """'on', or the reason the daemon logged for 'off' (after one open)."""
    (m.mnt / "notes" / "readme.md").read_bytes()
    state: list[str] = []

    def said() -> bool:
        for line in m.log().splitlines():
            if "kernel passthrough on" in line:
                state.append("on")
                return True
            if "kernel passthrough off:" in line:
                state.append(line.partition("kernel passthrough off:")[2].strip())
                return True
        return False

    poll(said, "the daemon logs whether kernel passthrough is on")
    return state[0]


def check_reads_writes_versions(m: Mount) -> None:
    readme = m.mnt / "notes" / "readme.md"
    unit = m.mnt / ".parsed" / "notes" / "readme.md" / "content.txt"
    # Reads: whole, and at offsets, of a file larger than one read request.
    assert (m.mnt / "big.bin").read_bytes() == BIG
    with open(m.mnt / "big.bin", "rb") as f:
        f.seek(2 * 1024 * 1024 + 5)
        assert f.read(70000) == BIG[2 * 1024 * 1024 + 5 : 2 * 1024 * 1024 + 70005]
    assert len(versions(m, "notes/readme.md")) == 1

    # A write while a reader holds the file open (a file this small is read
    # through the page cache; a large one passes through, its writer too:
    # tests/mounted/test_grep_requests.py).
    with open(readme, "rb") as reader:
        assert reader.read() == b"# Readme\nthe first line\n"
        with open(readme, "ab") as w:
            w.write(b"appended while read\n")
        reader.seek(0)
        assert reader.read() == b"# Readme\nthe first line\nappended while read\n"
    assert (m.src / "notes" / "readme.md").read_bytes().endswith(b"appended while read\n")
    new = hash_file(m.src / "notes" / "readme.md")
    poll(lambda: len(versions(m, "notes/readme.md")) == 2, "a second version after close")
    assert versions(m, "notes/readme.md")[-1].startswith(f"0002-{new[:16]}")
    # The first version kept its bytes (kept before the kernel wrote).
    first = m.mnt / ".versions" / "notes" / "readme.md" / versions(m, "notes/readme.md")[0]
    assert first.read_bytes() == b"# Readme\nthe first line\n"

    # The .parsed view follows.
    swfs("sync", m.mnt)
    text = unit.read_text()
    assert f'current="b3:{new[:16]}"' in text.partition("\n")[0]
    assert 'freshness="current"' in text.partition("\n")[0]
    assert text.endswith("appended while read\n")
    assert "the first line\n" in text

    # A plain rewrite, nobody reading: recorded as before.
    readme.write_bytes(b"# Readme\nrewritten\n")
    poll(lambda: len(versions(m, "notes/readme.md")) == 3, "a third version")
    swfs("sync", m.mnt)
    assert unit.read_text().endswith("rewritten\n")
    assert "appended while read" not in unit.read_text()

    # A reader that closes without writing records nothing.
    for _ in range(3):
        assert readme.read_bytes() == b"# Readme\nrewritten\n"
    swfs("sync", m.mnt)
    assert len(versions(m, "notes/readme.md")) == 3

    # Changed behind the mount, same size: the next read sees the new bytes.
    changed = bytearray(BIG)
    changed[100:104] = b"ABCD"
    (m.src / "big.bin").write_bytes(bytes(changed))
    poll(
        lambda: (m.mnt / "big.bin").read_bytes() == bytes(changed),
        "the mount serves bytes changed behind it",
    )
    out = swfs("check", m.mnt)
    assert "ok" in out.stdout


def test_passthrough_on_reads_writes_and_records() -> None:
    with mounted("--passthrough", "on") as m:
        state = passthrough_state(m)
        if state != "on":
            # The reasons the daemon may give; anything else is a defect.
            assert any(
                why in state
                for why in ("pyfuse3", "libfuse", "root", "kernel did not offer", "backing file")
            ), state
        check_reads_writes_versions(m)
        assert "Traceback" not in m.log()
        assert m.alive()


def test_auto_passes_through_binary_files_only_while_the_journal_records() -> None:
    # 'auto' keeps a text file's reads, for the journal's line ranges.
    assert FastPath("auto", journal=True).binary_only
    assert FastPath("auto", journal=True).why_not == passthrough_unavailable()
    assert not FastPath("auto", journal=False).binary_only
    assert not FastPath("on", journal=True).binary_only
    assert FastPath("auto", journal=False).why_not == passthrough_unavailable()
    assert FastPath("off", journal=False).why_not == "--passthrough=off"
    with pytest.raises(ValueError, match="passthrough"):
        MountOptions(passthrough="sometimes")  # type: ignore[arg-type]


def test_passthrough_off_behaves_as_before() -> None:
    with mounted("--passthrough", "off") as m:
        assert passthrough_state(m) == "--passthrough=off"
        check_reads_writes_versions(m)
        assert "Traceback" not in m.log()
        assert m.alive()


def test_auto_reads_a_big_binary_file_in_the_kernel_and_a_big_text_file_here() -> None:
    """The default mount (``auto``, the journal on): the kernel reads a big
    binary file itself, no READ reaches the daemon; a big text file's reads
    do, and its read event gets its lines.  Both are journaled as reads."""
    why = passthrough_unavailable()
    if why is not None:
        pytest.skip(f"kernel passthrough unavailable: {why}")
    with mounted() as m:
        text = b"".join(b"line %d of the big text file\n" % i for i in range(20000))
        (m.mnt / "big.txt").write_bytes(text)
        swfs("sync", m.mnt)
        if passthrough_state(m) != "on":
            pytest.skip("the kernel did not offer FUSE passthrough")
        assert "binary native files" in m.log()
        before = _counts(m)
        assert (m.mnt / "big.bin").read_bytes() == BIG
        assert _delta(before, _counts(m)).get("read", 0) == 0
        before = _counts(m)
        with open(m.mnt / "big.txt", "rb") as f:
            assert f.read(4096) == text[:4096]
        assert _delta(before, _counts(m)).get("read", 0) >= 1

        def events() -> dict[str, dict[str, object]]:
            out = swfs("log", m.mnt, "--json", "--kind", "read").stdout
            got = [json.loads(line) for line in out.splitlines()]
            return {e["path"]: e for e in got if e["path"] in ("big.bin", "big.txt")}

        poll(lambda: len(events()) == 2 and "lines" in str(events()["big.txt"]), "both reads")
        assert "lines" not in str(events()["big.bin"])
        assert m.alive()
