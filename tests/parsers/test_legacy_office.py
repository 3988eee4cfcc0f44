"""Legacy Office, RTF and OpenDocument files through LibreOffice.

The fixtures are written the way users get them: python-docx and python-pptx
write a document and a deck, LibreOffice (``soffice --convert-to``) saves
them as ``.odt``/``.odp`` and from those as ``.doc``/``.rtf``/``.ppt``.  Each
is then parsed by swfs, in-process and through the engine's sandboxed worker
processes.  Without LibreOffice these formats must be ``unsupported`` with
that reason; a damaged file must fail with a reason; a hung conversion must
be killed, with every process it started.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import struct
import subprocess
import tempfile
import textwrap
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from parsers import registry, soffice
from parsers._base import EncryptedDocument, ParseFailed, ParseOptions, ToolMissing, Unit
from swfs.api import Freshness, RelPath
from swfs.engine import Engine
from swfs.views.parsework import WorkerLimits
from swfs.workspace import Config
from tests import docgen, mountutil
from tests.mountutil import needs_fuse

SOFFICE = shutil.which("soffice")
needs_soffice = pytest.mark.skipif(
    SOFFICE is None, reason="LibreOffice (soffice) is not installed; make install adds it"
)

HEADING = "Quarterly Review"
FACT = "The termination fee is 4.2 million euros."
DELETED = "This paragraph was removed before saving."
SLIDES = [
    ("Alpha plan", "Budget is 1200 units", "speaker note about the alpha budget"),
    ("Beta results", "Churn fell to 3 percent", "beta note"),
    ("Gamma next", "Hire two analysts", ""),
]
# Markup that must never reach a unit: RTF control words, font tables, XML.
NEVER = ["\\rtf", "\\par", "fonttbl", "<w:", "<text:", "Click to add"]


def _soffice(src: Path, fmt: str, outdir: Path) -> Path:
    """Convert with a profile of its own and a time limit, as a user would."""
    profile = outdir / f"profile-{src.stem}-{fmt}"
    subprocess.run(
        [
            str(SOFFICE),
            f"-env:UserInstallation={profile.as_uri()}",
            "--headless",
            "--convert-to",
            fmt,
            "--outdir",
            str(outdir),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    out = outdir / f"{src.stem}.{fmt}"
    assert out.is_file(), f"soffice wrote no {out.name}"
    return out


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """report.{odt,doc,rtf} and deck.{odp,ppt}, written by LibreOffice."""
    if SOFFICE is None:
        pytest.skip("LibreOffice (soffice) is not installed; make install adds it")
    import docx
    import pptx

    root = tmp_path_factory.mktemp("legacy")
    made = root / "made"
    made.mkdir()

    document = docx.Document()
    document.add_heading(HEADING, 1)
    document.add_paragraph(FACT)
    removed = document.add_paragraph(DELETED)
    removed._element.getparent().remove(removed._element)
    table = document.add_table(rows=2, cols=2)
    for cell, text in zip(table._cells, ["Region", "Revenue", "North", "1200"], strict=True):
        cell.text = text
    document.save(str(made / "report.docx"))

    deck = pptx.Presentation()
    for title, body, note in SLIDES:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if note:
            slide.notes_slide.notes_text_frame.text = note
    deck.save(str(made / "deck.pptx"))

    # LibreOffice saves .doc tables written by python-docx only via its own
    # format, which is also how most real .doc files reach a folder today.
    out: dict[str, Path] = {}
    out["odt"] = _soffice(made / "report.docx", "odt", root)
    out["doc"] = _soffice(out["odt"], "doc", root)
    out["rtf"] = _soffice(out["odt"], "rtf", root)
    out["odp"] = _soffice(made / "deck.pptx", "odp", root)
    out["ppt"] = _soffice(out["odp"], "ppt", root)
    return out


def parse(path: Path, rel: str | None = None) -> tuple[str, list[Unit]]:
    info = registry.file_info(str(path), rel or path.name)
    parser, units = registry.parse(str(path), info, ParseOptions())
    return parser.id, units


def no_markup(units: list[Unit]) -> None:
    for unit in units:
        for needle in NEVER:
            assert needle not in unit.text, (unit.name, needle)


# -- text documents --------------------------------------------------------------------------


@needs_soffice
@pytest.mark.parametrize(
    ("fmt", "parser_id"), [("doc", "ole-office"), ("rtf", "soffice"), ("odt", "soffice")]
)
def test_document_vectors(documents: dict[str, Path], fmt: str, parser_id: str) -> None:
    used, units = parse(documents[fmt])
    assert used == parser_id
    # The converted document is read by the docx parser: one section per heading.
    assert [(u.name, u.locator) for u in units] == [("section-001.md", f"h={HEADING}")]
    text = units[0].text
    assert f"# {HEADING}" in text
    assert FACT in text
    assert "| Region | Revenue |" in text
    assert "| North | 1200 |" in text
    assert text.index(HEADING) < text.index(FACT) < text.index("North")
    assert DELETED not in text
    no_markup(units)


@needs_soffice
def test_rtf_named_doc_is_read_as_rtf(documents: dict[str, Path], tmp_path: Path) -> None:
    """Word and many exporters save RTF under a .doc name."""
    renamed = tmp_path / "exported.doc"
    shutil.copy(documents["rtf"], renamed)
    used, units = parse(renamed)
    assert used == "soffice"
    assert FACT in units[0].text
    no_markup(units)


# -- presentations ---------------------------------------------------------------------------


@needs_soffice
@pytest.mark.parametrize("fmt", ["ppt", "odp"])
def test_slide_vectors(documents: dict[str, Path], fmt: str) -> None:
    _, units = parse(documents[fmt])
    assert [(u.name, u.locator) for u in units] == [
        ("slide-001.md", "slide=1"),
        ("slide-002.md", "slide=2"),
        ("slide-003.md", "slide=3"),
    ]
    for number, (title, body, note) in enumerate(SLIDES):
        text = units[number].text
        assert f"# {title}" in text
        assert body in text
        if note:
            assert note in text
        for other, (other_title, other_body, _) in enumerate(SLIDES):
            if other != number:
                assert other_title not in text, (fmt, number + 1, other_title)
                assert other_body not in text, (fmt, number + 1, other_body)
    assert "Notes" not in units[2].text  # the third slide has no notes
    no_markup(units)


# -- damaged, encrypted, hung ----------------------------------------------------------------


@needs_soffice
@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("zeros.doc", lambda d: docgen.ole_named(d, "zeros.doc")),
        ("empty.ppt", lambda d: docgen.ole_file(d, "empty.ppt", {"PowerPoint Document": b"x"})),
    ],
)
def test_damaged_legacy_files_fail_with_a_reason(tmp_path: Path, name: str, make: object) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(ParseFailed) as caught:
        parse(path)
    message = str(caught.value)
    assert "LibreOffice could not read this" in message
    assert "\n" not in message


@needs_soffice
def test_truncated_doc_fails(documents: dict[str, Path], tmp_path: Path) -> None:
    data = documents["doc"].read_bytes()
    cut = tmp_path / "cut.doc"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(ParseFailed, match="LibreOffice could not read this Word"):
        parse(cut)


@needs_soffice
def test_encrypted_opendocument(documents: dict[str, Path], tmp_path: Path) -> None:
    """A password-protected package: its manifest carries encryption data
    (written here as raw zip parts: no Python writer encrypts ODF)."""
    locked = tmp_path / "locked.odt"
    with zipfile.ZipFile(documents["odt"]) as src, zipfile.ZipFile(locked, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "META-INF/manifest.xml":
                data = data.replace(
                    b'manifest:full-path="content.xml"',
                    b'manifest:full-path="content.xml"><manifest:encryption-data '
                    b'manifest:checksum-type="SHA1/1K" manifest:checksum="AAAA"/'
                    b"></manifest:file-entry><manifest:file-entry "
                    b'manifest:media-type="" manifest:full-path="dummy"',
                    1,
                )
                assert b"encryption-data" in data
            dst.writestr(item, data)
    with pytest.raises(EncryptedDocument, match="OpenDocument text"):
        parse(locked)


def test_encrypted_doc_stays_encrypted_without_soffice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(soffice.PROGRAM_ENV, "none")
    path = docgen.ole_file(
        tmp_path, "locked.doc", {"WordDocument": docgen.word_fib(encrypted=True)}
    )
    with pytest.raises(EncryptedDocument):
        parse(path)


@pytest.fixture
def fake_soffice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A 'LibreOffice' that never finishes and leaves a grandchild: both
    must be killed.  Yields (program, the token its processes carry).

    In the parse sandbox the program cannot write anywhere the test can
    read, so its processes are found by the token in their command lines."""
    token = f"1000.{random.randrange(10**6):06d}"
    # Laid out like an install outside /usr (office/program/soffice), which
    # the sandbox shows its children whole.
    bindir = tmp_path / "office" / "program"
    bindir.mkdir(parents=True)
    program = bindir / "hung-office"
    program.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            sleep {token} &
            exec sleep {token}
            """
        )
    )
    program.chmod(0o755)
    for folder in (bindir, bindir.parent):
        folder.chmod(0o755)  # the sandbox runs it as nobody
    yield program, token
    for pid in _pids(token):  # never leave one behind, even when a test failed
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def _pids(token: str) -> list[int]:
    """The live processes whose command line holds ``token``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if token.encode() in args and not _gone(int(entry)):
            out.append(int(entry))
    return sorted(out)


@contextlib.contextmanager
def _watching(token: str, seen: list[int]) -> Iterator[None]:
    """Collect into ``seen`` every process carrying ``token`` while the body runs."""
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.extend(p for p in _pids(token) if p not in seen)
            done.wait(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _alive(pid: int) -> bool:
    return not _gone(pid)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].startswith("Z")  # killed, not yet reaped by init
    except FileNotFoundError:
        return True


def _wait_gone(pids: list[int], limit: float = 30.0) -> list[int]:
    deadline = time.monotonic() + limit
    alive = [p for p in pids if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if not _gone(p)]
    return alive


def test_hung_conversion_is_killed_with_its_children(
    tmp_path: Path, fake_soffice: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    program, pids = fake_soffice
    monkeypatch.setenv(soffice.PROGRAM_ENV, str(program))
    monkeypatch.setenv(soffice.TIMEOUT_ENV, "2")
    monkeypatch.setenv(soffice.WARM_ENV, "off")  # the one-shot path (test_soffice_warm: warm)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    soffice._process_dir.cache_clear()
    path = docgen.ole_file(tmp_path, "slow.doc", {"WordDocument": docgen.word_fib(encrypted=False)})
    started: list[int] = []
    with pytest.raises(ParseFailed, match="timed out after 2 s"), _watching(pids, started):
        parse(path)
    assert len(started) == 2
    assert _wait_gone(started) == []
    soffice._process_dir.cache_clear()
    left = [p.relative_to(scratch) for p in scratch.rglob("*")]
    assert not [p for p in left if "convert-" in str(p)], left


# -- without LibreOffice ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "make"),
    [
        (
            "plain.doc",
            lambda d: docgen.ole_file(
                d, "plain.doc", {"WordDocument": docgen.word_fib(encrypted=False)}
            ),
        ),
        ("plain.ppt", lambda d: docgen.ole_file(d, "plain.ppt", {"PowerPoint Document": b"x"})),
        ("notes.rtf", lambda d: _write(d / "notes.rtf", b"{\\rtf1\\ansi Plain words}")),
        ("notes.odt", lambda d: _odf(d / "notes.odt", "text")),
        ("deck.odp", lambda d: _odf(d / "deck.odp", "presentation")),
    ],
)
def test_without_soffice_unsupported_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, make: object
) -> None:
    monkeypatch.setenv(soffice.PROGRAM_ENV, "none")
    path = make(tmp_path)  # type: ignore[operator]
    info = registry.file_info(str(path), name)
    parser = registry.select(info)
    assert parser is not None
    assert parser.cache_key(info).endswith("+no-soffice")
    with pytest.raises(ToolMissing, match=r"needs LibreOffice \(soffice\), which is not installed"):
        registry.parse(str(path), info, ParseOptions())


def test_cache_key_names_the_reader_of_the_conversion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installing LibreOffice (or a better docx reader) re-parses these files."""
    program = tmp_path / "soffice"
    program.write_text("#!/bin/sh\nexit 1\n")
    program.chmod(0o755)
    path = _write(tmp_path / "a.rtf", b"{\\rtf1\\ansi x}")
    info = registry.file_info(str(path), "a.rtf")
    parser = registry.select(info)
    assert parser is not None
    monkeypatch.setenv(soffice.PROGRAM_ENV, str(program))
    with_it = parser.cache_key(info)
    monkeypatch.setenv(soffice.PROGRAM_ENV, "none")
    without = parser.cache_key(info)
    assert with_it != without
    assert with_it.startswith("soffice@")
    assert "+docx@" in with_it


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _odf(path: Path, kind: str) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(zipfile.ZipInfo("mimetype"), f"application/vnd.oasis.opendocument.{kind}")
        z.writestr("content.xml", "<office:document-content/>")
    return path


# -- through the engine's workers ------------------------------------------------------------


@pytest.mark.timeout(600)
@needs_soffice
def test_engine_parses_legacy_files_in_its_workers(
    documents: dict[str, Path], tmp_path: Path
) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    for fmt, path in documents.items():
        shutil.copy(path, src / f"{path.stem}-{fmt}.{fmt}")
    docgen.ole_named(src, "damaged.doc")
    limits = WorkerLimits(timeout=240, memory_mb=2048, workers=2)
    with Engine.open(src, config=Config(limits=limits, rescan_interval=0)) as eng:
        trio.run(eng.drain)
        for fmt in ("doc", "rtf", "odt"):
            view = eng.views.parsed_view(RelPath(f"report-{fmt}.{fmt}"))
            assert view is not None
            assert view.freshness == Freshness.CURRENT, (fmt, view.error)
            assert FACT in view.units[0].content.decode()
        for fmt in ("ppt", "odp"):
            view = eng.views.parsed_view(RelPath(f"deck-{fmt}.{fmt}"))
            assert view is not None
            assert view.freshness == Freshness.CURRENT, (fmt, view.error)
            assert [u.name for u in view.units] == ["slide-001.md", "slide-002.md", "slide-003.md"]
            assert "Churn fell" in view.units[1].content.decode()
        damaged = eng.views.parsed_view(RelPath("damaged.doc"))
        assert damaged is not None
        assert damaged.freshness == Freshness.FAILED
        assert damaged.error
        assert "LibreOffice could not read" in damaged.error


@pytest.mark.timeout(300)
def test_engine_without_soffice_marks_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers inherit the setting; nothing is failed, the reason is stored."""
    monkeypatch.setenv(soffice.PROGRAM_ENV, "none")
    src = tmp_path / "ws"
    src.mkdir()
    docgen.ole_file(src, "plain.doc", {"WordDocument": docgen.word_fib(encrypted=False)})
    _write(src / "notes.rtf", b"{\\rtf1\\ansi Plain words}")
    limits = WorkerLimits(timeout=60, memory_mb=2048, workers=1)
    with Engine.open(src, config=Config(limits=limits, rescan_interval=0)) as eng:
        trio.run(eng.drain)
        for name in ("plain.doc", "notes.rtf"):
            state = eng.workspace.file_state(RelPath(name))
            assert state is not None
            assert state.freshness == Freshness.UNSUPPORTED, name
            assert eng.views.parsed_view(RelPath(name)) is None
            rec = eng.workspace.store.get_file(name)
            assert rec is not None
            assert rec.parser is not None
            record = eng.workspace.store.get_parse(rec.hash, rec.parser)
            assert record is not None
            assert "needs LibreOffice" in (record.error or "")


@pytest.mark.timeout(300)
def test_worker_killed_by_the_pool_takes_soffice_with_it(
    tmp_path: Path, fake_soffice: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's own timeout kills the worker; the kernel then kills soffice."""
    program, pids = fake_soffice
    monkeypatch.setenv(soffice.PROGRAM_ENV, str(program))
    monkeypatch.setenv(soffice.TIMEOUT_ENV, "500")  # longer than the pool's limit
    src = tmp_path / "ws"
    src.mkdir()
    docgen.ole_file(src, "slow.doc", {"WordDocument": docgen.word_fib(encrypted=False)})
    limits = WorkerLimits(timeout=5, memory_mb=2048, workers=1)
    seen: list[int] = []
    with Engine.open(src, config=Config(limits=limits, rescan_interval=0)) as eng:
        with _watching(pids, seen):
            trio.run(eng.drain)
        view = eng.views.parsed_view(RelPath("slow.doc"))
        assert view is not None
        assert view.freshness == Freshness.FAILED
        assert view.error
        assert "timed out" in view.error
    started = seen
    assert started
    # The program and what it started die with the confined child.
    assert _wait_gone(started) == []
    # What the killed worker left is swept by the next one to convert.
    soffice.sweep_stale()
    base = Path(soffice._base_dir())
    assert not [p for p in base.iterdir() if p.name.isdigit() and not _alive(int(p.name))]


@pytest.mark.parametrize("name", ["bomb.odt", "bomb.odp"])
def test_opendocument_bomb_never_reaches_libreoffice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    ran = tmp_path / "ran"
    program = tmp_path / "recording-office"
    program.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
    program.chmod(0o755)
    monkeypatch.setenv(soffice.PROGRAM_ENV, str(program))
    with pytest.raises(ParseFailed, match="zip bomb"):
        parse(docgen.ratio_bomb(tmp_path, name=name))
    assert not ran.exists()


@pytest.mark.parametrize(
    ("name", "streams", "infilter"),
    [
        ("word97.doc", {"WordDocument": docgen.word_fib(encrypted=False)}, "MS Word 97"),
        ("word95.doc", {"WordDocument": struct.pack("<HH", 0xA5DC, 104)}, "MS Word 95"),
        ("word6.doc", {"WordDocument": struct.pack("<HH", 0xA5DC, 101)}, "MS WinWord 6.0"),
        ("deck.ppt", {"PowerPoint Document": b"x"}, "MS PowerPoint 97"),
        ("show.pps", {"PowerPoint Document": b"x"}, "MS PowerPoint 97 AutoPlay"),
    ],
)
def test_import_filter_is_chosen_from_the_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    streams: dict[str, bytes],
    infilter: str,
) -> None:
    """LibreOffice is told the format, so it never guesses (and never falls
    back to importing a damaged binary as plain text)."""
    args = tmp_path / "args"
    program = tmp_path / "recording-office"
    program.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a" >> {args}; done\nexit 1\n')
    program.chmod(0o755)
    monkeypatch.setenv(soffice.PROGRAM_ENV, str(program))
    with pytest.raises(ParseFailed, match="exit status 1"):
        parse(docgen.ole_file(tmp_path, name, streams))
    argv = args.read_text().splitlines()
    assert f"--infilter={infilter}" in argv
    assert "--headless" in argv
    assert any(a.startswith("-env:UserInstallation=file://") for a in argv)
    assert argv[-1].endswith("source" + Path(name).suffix)


def test_soffice_absent_from_path_is_unsupported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(soffice.PROGRAM_ENV, raising=False)
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    path = docgen.ole_file(tmp_path, "plain.ppt", {"PowerPoint Document": b"x"})
    with pytest.raises(ToolMissing, match="PowerPoint 97-2003 presentation"):
        parse(path)


def test_plain_xls_key_names_the_reader_it_is_declined_to(tmp_path: Path) -> None:
    path = docgen.ole_file(tmp_path, "plain.xls", {"Workbook": docgen.biff_stream(encrypted=False)})
    info = registry.file_info(str(path), "plain.xls")
    chain = registry.candidates(info)
    assert chain[0].id == "ole-office"
    reader = chain[1].cache_key(info) if len(chain) > 1 else "none"
    assert chain[0].cache_key(info) == f"ole-office@2.xls+{reader}"


@pytest.mark.mount
@pytest.mark.timeout(300)
@needs_fuse
@needs_soffice
def test_grep_through_the_mount_finds_legacy_text_with_its_locator(
    documents: dict[str, Path],
) -> None:
    def populate(src: Path) -> None:
        shutil.copy(documents["doc"], src / "report.doc")
        shutil.copy(documents["ppt"], src / "deck.ppt")

    with mountutil.workspace(populate=populate) as m:
        found = subprocess.run(
            ["grep", "-rn", "Churn fell", str(m.mnt / ".parsed")],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.splitlines()
        assert len(found) == 1
        assert found[0].startswith(f"{m.mnt}/.parsed/deck.ppt/slide-002.md:")
        unit = m.mnt / ".parsed" / "deck.ppt" / "slide-002.md"
        assert os.getxattr(unit, "user.sw.locator") == b"deck.ppt#slide=2"
        document = (m.mnt / ".parsed" / "report.doc" / "section-001.md").read_text()
        header, _, body = document.partition("\n")
        assert f'locator="report.doc#h={HEADING}"' in header
        assert 'freshness="current"' in header
        assert FACT in body
        assert "Churn fell" not in body


def test_word2_file_is_read_by_libreoffice_with_its_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Word for Windows 2.0 files are no OLE files: their own magic, and
    LibreOffice's WinWord 1/2/5 filter (they were 'unsupported')."""
    args = tmp_path / "args"
    program = tmp_path / "recording-office"
    program.write_text(f'#!/bin/sh\nfor a in "$@"; do echo "$a" >> {args}; done\nexit 1\n')
    program.chmod(0o755)
    monkeypatch.setenv(soffice.PROGRAM_ENV, str(program))
    monkeypatch.setenv(soffice.WARM_ENV, "off")
    path = _write(tmp_path / "old.doc", b"\xdb\xa5" + bytes(510))
    info = registry.file_info(str(path), "old.doc")
    parser = registry.select(info)
    assert parser is not None
    assert parser.id == "soffice"
    with pytest.raises(ParseFailed, match="exit status 1"):
        parse(path)
    assert "--infilter=MS WinWord 5" in args.read_text().splitlines()
