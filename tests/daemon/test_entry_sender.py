"""mountd.invalidator.EntrySender: an entry invalidation the kernel holds
(its parent directory locked by an unanswered request) holds back only the
names of that parent, never other directories' (pyfuse3 stubbed: no mount)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from mountd import invalidator
from mountd.invalidator import EntrySender

HELD = 7  # the parent whose lock "the kernel" holds until the test releases it


def senders() -> int:
    return sum(t.name == "swfs-inval-entry" for t in threading.enumerate())


def poll(cond: Callable[[], bool], what: str, bound: float = 60.0) -> None:
    deadline = time.monotonic() + bound
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound} s: {what}")
        time.sleep(0.01)


class Kernel:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bytes]] = []
        self.release = threading.Event()
        self.entered = threading.Event()  # a thread waits for the held parent
        self.lock = threading.Lock()

    def invalidate_entry(self, parent: int, name: bytes, deleted: int = 0) -> None:
        if parent == HELD:
            self.entered.set()
            assert self.release.wait(60)
        with self.lock:
            self.sent.append((parent, name))

    def names(self, parent: int) -> list[bytes]:
        with self.lock:
            return [n for p, n in self.sent if p == parent]


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Kernel]:
    k = Kernel()
    monkeypatch.setattr(invalidator.pyfuse3, "invalidate_entry", k.invalidate_entry, raising=False)
    yield k
    k.release.set()


def test_a_held_parent_holds_back_only_its_own_names(kernel: Kernel) -> None:
    sender = EntrySender(lambda: True)
    sender.send([(HELD, b"pending.md")])
    sender.send([(2, b"gone.txt"), (HELD, b"content.txt"), (3, b"moved.txt")])
    poll(lambda: kernel.names(2) == [b"gone.txt"], "the other parents' names are sent")
    poll(lambda: kernel.names(3) == [b"moved.txt"], "the other parents' names are sent")
    sender.send([(2, b"again.txt")])
    poll(lambda: kernel.names(2) == [b"gone.txt", b"again.txt"], "later names too")
    assert kernel.names(HELD) == []
    kernel.release.set()
    poll(
        lambda: kernel.names(HELD) == [b"pending.md", b"content.txt"],
        "the held parent's names, in order, once it is released",
    )
    sender.close()


def test_names_of_one_parent_are_sent_once_and_threads_are_bounded(kernel: Kernel) -> None:
    sender = EntrySender(lambda: True, workers=2)
    sender.send([(HELD, b"a")])
    assert kernel.entered.wait(60), "a thread sends for the held parent"
    # Queued behind the held one: the same name twice is sent once.
    sender.send([(HELD, b"b"), (HELD, b"b")])
    sender.send([(p, b"x") for p in range(100, 140)])
    poll(lambda: len(kernel.sent) == 40, "the others, through the one free thread")
    assert senders() <= 2
    kernel.release.set()
    poll(lambda: kernel.names(HELD) == [b"a", b"b"], "the held parent's names, each once")
    poll(lambda: senders() == 0, "the threads end when the work is done")


def test_nothing_is_sent_after_close_or_unmount(kernel: Kernel) -> None:
    mounted = [True]
    sender = EntrySender(lambda: mounted[0])
    mounted[0] = False
    sender.send([(1, b"a")])
    poll(lambda: senders() == 0, "the thread ends")
    sender.close()
    sender.send([(1, b"b")])
    assert kernel.sent == []
