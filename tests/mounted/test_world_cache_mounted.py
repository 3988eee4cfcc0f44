"""What reading a world costs the daemon: a world never changes, so the
kernel keeps what it was told of a file (attributes, and with the daemon
serving the bytes, its pages) across opens.  Counted from libfuse's debug
log (``--debug``), which names every request the daemon receives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, start_mount, swfs, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(600), needs_fuse]

FILES = {
    f"d{d}/f{i}.txt": f"file {d}/{i} as of the snapshot\n" * 30 for d in range(3) for i in range(8)
}


def populate(src: Path) -> None:
    for rel, text in FILES.items():
        (src / rel).parent.mkdir(exist_ok=True)
        (src / rel).write_text(text)


def requests(w: Mount, opcode: str) -> int:
    """How many ``opcode`` requests the world's daemon has received so far
    (the live mount beside it logs no requests: no --debug)."""
    return w.log().count(f"opcode: {opcode} ")


def read_all(root: Path) -> None:
    for rel, text in FILES.items():
        p = root / rel
        os.stat(p)
        assert p.read_text() == text, rel


@pytest.mark.parametrize("passthrough", ["off", "auto"])
def test_reading_a_world_file_again_asks_the_daemon_only_to_open_it(passthrough: str) -> None:
    with workspace(populate=populate) as m:
        swfs("sync", m.mnt)
        swfs("snapshot", m.mnt, "then")
        for rel in FILES:  # the live tree moves on; the world does not
            (m.mnt / rel).write_text("changed after the snapshot\n")
        wmnt = m.root / "w"
        wmnt.mkdir()
        wmnt.chmod(0o755)
        w = start_mount(m.src, wmnt, "--at", "then", "--debug", f"--passthrough={passthrough}")
        try:
            read_all(wmnt)  # the first reads: lookups, opens, reads
            assert requests(w, "OPEN") >= len(FILES)
            before = {op: requests(w, op) for op in ("OPEN", "READ", "GETATTR", "LOOKUP")}
            for _ in range(2):
                read_all(wmnt)
            after = {op: requests(w, op) for op in before}
            # Each open still reaches the daemon; nothing else does: the
            # kernel's attributes were not dropped at open (nor by reading:
            # the mount is read-only, no atime), and its pages were kept.
            assert after["OPEN"] - before["OPEN"] == 2 * len(FILES)
            assert after["GETATTR"] == before["GETATTR"], (before, after)
            assert after["LOOKUP"] == before["LOOKUP"], (before, after)
            assert after["READ"] == before["READ"], (before, after)
            if passthrough == "off":
                assert before["READ"] >= len(FILES)  # served by the daemon the first time
            # The live tree did move on; the world stays read-only.
            assert (m.mnt / "d0/f0.txt").read_text() == "changed after the snapshot\n"
            with pytest.raises(OSError, match="Read-only file system"):
                (wmnt / "d0/f0.txt").write_text("x")
        finally:
            w.stop()
