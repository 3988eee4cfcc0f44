"""LibreOffice kept warm (parsers.soffice): one instance per process, reused
over UNO, giving the text the one-shot path gives, and replaced after a
kill, a timeout or its number of documents.

The fixtures are made by LibreOffice itself (``documents``, from
test_legacy_office).  Every instance a test starts is ended by it.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from parsers import legacy_office, registry, soffice
from parsers._base import FileInfo, ParseFailed, ParseOptions, Unit
from swfs.api import Freshness, RelPath
from swfs.engine import Engine
from swfs.views.parsework import WorkerLimits
from swfs.workspace import Config
from tests.parsers.test_legacy_office import FACT, documents  # noqa: F401

needs_warm = pytest.mark.skipif(
    shutil.which("soffice") is None or soffice._uno_python() is None,
    reason="LibreOffice or a Python with its uno module (python3-uno) is not installed",
)


def _uno_importable() -> bool:
    python = soffice._uno_python()
    if python is None:
        return False
    import subprocess

    done = subprocess.run([python, "-I", "-c", "import uno"], capture_output=True, check=False)
    return done.returncode == 0


pytestmark = [
    needs_warm,
    pytest.mark.skipif(not _uno_importable(), reason="no Python here imports uno"),
]


@pytest.fixture(autouse=True)
def _own_instance(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts from no warm instance and ends the one it made."""
    monkeypatch.delenv(soffice.WARM_ENV, raising=False)
    monkeypatch.delenv(soffice.PROGRAM_ENV, raising=False)
    soffice.stop_warm()
    soffice._warm_broken = None
    yield
    soffice.stop_warm()


def parse(path: Path) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    return registry.parse(str(path), info, ParseOptions())[1]


def _texts(units: list[Unit]) -> list[tuple[str, str, str]]:
    return [(u.name, u.locator, u.text) for u in units]


def _office_pid() -> int:
    warm = soffice._warm
    assert warm is not None
    assert warm.office is not None
    assert warm.running()
    return warm.office.pid


def _wait_gone(pid: int, limit: float = 30.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(") ")[-1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(600)
def test_one_instance_serves_every_format_with_the_one_shot_text(
    documents: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(soffice.WARM_ENV, "off")
    before = soffice.starts
    one_shot = {fmt: _texts(parse(path)) for fmt, path in documents.items()}
    assert soffice.starts == before  # no warm instance when it is off
    monkeypatch.delenv(soffice.WARM_ENV)
    instances = soffice.instances
    warm = {fmt: _texts(parse(path)) for fmt, path in documents.items()}
    again = {fmt: _texts(parse(path)) for fmt, path in documents.items()}
    assert warm == one_shot
    assert again == one_shot
    assert FACT in warm["doc"][0][2]
    # Ten conversions, one instance (two starts at most: a fresh profile's
    # first start asks to be run again).
    assert soffice.instances == instances + 1
    assert soffice.starts - before <= 2


@pytest.mark.timeout(300)
def test_restarted_after_a_kill(documents: dict[str, Path]) -> None:  # noqa: F811
    first = _texts(parse(documents["doc"]))
    pid = _office_pid()
    instances = soffice.instances
    os.kill(pid, signal.SIGKILL)
    assert _wait_gone(pid)
    # The next conversion starts a new instance, or, when the client only
    # learns of the death mid-conversion, is converted once by a one-shot
    # run; the one after it starts a new instance either way.
    assert _texts(parse(documents["doc"])) == first
    assert _texts(parse(documents["doc"])) == first
    assert soffice.instances == instances + 1
    assert _office_pid() != pid


@pytest.mark.timeout(300)
def test_a_kill_during_a_conversion_falls_back_to_one_shot(
    documents: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The instance dies mid-conversion: the file gets a one-shot conversion."""
    first = _texts(parse(documents["odt"]))
    warm = soffice._warm
    assert warm is not None
    real = warm.convert

    def dying(*args: object, **kw: object) -> dict[str, object]:
        assert warm.office is not None
        os.kill(warm.office.pid, signal.SIGKILL)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(warm, "convert", dying)
    assert _texts(parse(documents["odt"])) == first
    monkeypatch.undo()
    assert not warm.running()


@pytest.mark.timeout(300)
def test_restarted_after_a_timeout(
    documents: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = _texts(parse(documents["ppt"]))
    pid = _office_pid()
    instances = soffice.instances
    monkeypatch.setenv(soffice.TIMEOUT_ENV, "0.000001")
    with pytest.raises(ParseFailed, match="timed out"):
        parse(documents["ppt"])
    assert _wait_gone(pid)  # the overrunning instance is killed
    monkeypatch.delenv(soffice.TIMEOUT_ENV)
    assert _texts(parse(documents["ppt"])) == first
    assert soffice.instances == instances + 1


@pytest.mark.timeout(300)
def test_restarted_after_its_number_of_documents(
    documents: dict[str, Path],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(soffice.MAX_DOCS_ENV, "2")
    instances = soffice.instances
    parse(documents["rtf"])
    pid = _office_pid()
    parse(documents["rtf"])  # the second document: the instance retires after it
    assert _wait_gone(pid)
    assert soffice._warm is None or not soffice._warm.running()
    assert FACT in parse(documents["rtf"])[0].text
    assert soffice.instances == instances + 2


@pytest.mark.timeout(300)
def test_a_file_libreoffice_would_read_as_plain_text_still_fails(tmp_path: Path) -> None:
    """Where the forced filter refuses the file, LibreOffice may pick its own
    filter, but never a plain-text one (a damaged binary as characters)."""
    src = tmp_path / "notes.doc"
    src.write_bytes(b"not a word document at all, just words\n" * 20)
    exe = soffice.program()
    assert exe is not None
    with (
        pytest.raises(ParseFailed, match="could not read"),
        soffice.converted(
            str(src),
            extension=".doc",
            infilter="MS Word 97",
            target="docx:MS Word 2007 XML",
            kind="Word document",
            detect=legacy_office.WORD_FILTERS,
        ),
    ):
        pass
    # The same file with "Text" allowed is converted: the second load ran.
    with soffice.converted(
        str(src),
        extension=".doc",
        infilter="MS Word 97",
        target="docx:MS Word 2007 XML",
        kind="Word document",
        detect={"Text"},
    ) as out:
        assert zipfile.is_zipfile(out)


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_own_conversion_is_held_to_the_whole_package_expansion(tmp_path: Path) -> None:
    """A member compressing 1000x (a WMF image) is fine in a package we
    made from a file of about its size; a package expanding far beyond the
    file it came from is not."""
    image = b"\0" * (4 * 1024 * 1024)
    out = _zip(tmp_path / "made.docx", {"word/media/image1.wmf": image})
    assert len(image) / out.stat().st_size > 200  # the old per-member limit's verdict
    route = legacy_office.ROUTES[".doc"]
    options = ParseOptions()
    source = FileInfo(name="a.doc", extension=".doc", size=len(image) + 4096, head=b"")
    relaxed = legacy_office._own_conversion(str(out), source, options, route)
    assert relaxed.max_zip_ratio > options.max_zip_ratio
    assert relaxed.max_unzipped_bytes == options.max_unzipped_bytes
    tiny = FileInfo(name="a.doc", extension=".doc", size=1000, head=b"")
    with pytest.raises(ParseFailed, match="zip bomb: LibreOffice's conversion"):
        legacy_office._own_conversion(str(out), tiny, options, route)


def _office_processes_under(root: int) -> set[tuple[int, int]]:
    """Warm LibreOffice processes descending from ``root``: (pid, parent)."""
    found: set[tuple[int, int]] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if not any(a.startswith(b"--accept=pipe,name=swfs-") for a in args):
            continue
        pid = int(entry)
        parent = 0
        while pid > 1:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    pid = int(f.read().rsplit(") ", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                break
            parent = parent or pid
            if pid == root:
                found.add((int(entry), parent))
                break
    return found


@pytest.mark.timeout(600)
def test_sandboxed_workers_keep_one_instance_warm(
    documents: dict[str, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Through the engine's confined children: the files are parsed, and
    fewer instances run than files were converted."""
    src = tmp_path / "ws"
    src.mkdir()
    names = []
    for copy in range(3):
        for fmt, path in documents.items():
            name = f"{path.stem}-{copy}.{fmt}"
            data = path.read_bytes()
            if fmt == "rtf":  # distinct content, distinct hashes
                data = data.rstrip().removesuffix(b"}") + b" copy %d}\n" % copy
            (src / name).write_bytes(data)
            names.append(name)
    seen: set[tuple[int, int]] = set()
    limits = WorkerLimits(timeout=240, memory_mb=2048, workers=1)
    with Engine.open(src, config=Config(limits=limits, rescan_interval=0)) as eng:

        async def drain_watching() -> None:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    while True:
                        seen.update(_office_processes_under(os.getpid()))
                        await trio.sleep(0.05)

                nursery.start_soon(watch)
                await eng.drain()
                nursery.cancel_scope.cancel()

        trio.run(drain_watching)
        for name in names:
            view = eng.views.parsed_view(RelPath(name))
            assert view is not None
            assert view.freshness == Freshness.CURRENT, (name, view.error)
    assert seen, "no warm instance ran in the workers"
    # Started by a child, not forked by LibreOffice itself.  One worker's
    # child converts every file, with one instance (two starts: a fresh
    # profile's first start asks to be run again); a child may be replaced
    # on the way (once seen on a machine under heavy load), with its
    # instance, but one-shot would have started one per file.
    offices = {pid for pid, _ in seen}
    started = {pid for pid, parent in seen if parent not in offices}
    assert 1 <= len(started) <= len(names) // 3, seen
