"""Linked pictures: LibreOffice must not follow a document's links.

An office document may show a picture that is only a link: a ``file://``
URL LibreOffice reads when it loads the document, or an ``http://`` URL it
fetches.  Unconfined, LibreOffice run by a root daemon would put a
root-only image into a page anyone who may read the document can see, and
would send requests from the machine on the document's behalf.

Each of odt, docx, rtf, pptx and xlsx (tests/linkdocs.py) links its
picture, a solid red PNG, to one of three targets:

* ``private``: a root-only PNG (0600 in a 0700 folder outside SRC) in a
  folder added to the sandbox's view (``SWFS_SANDBOX_BIND``), so the
  child sees the path and only its uid keeps it out;
* ``public``: a world-readable PNG outside SRC and outside the view, so
  only the view keeps it out;
* ``http``: ``http://127.0.0.1:PORT/`` served by a listener that answers
  with the red PNG.

A root daemon (sandbox on) parses every document (``.parsed``: LibreOffice
converts odt and rtf) and renders its first page or slide (``.render``:
LibreOffice to PDF, then MuPDF).  The listener must receive nothing and no
page may show red.  A probe parser (tests/evilparsers.py) confirms which
layer each file case meets: the private PNG is visible but refused, the
public one absent.

The control runs the same documents with ``SWFS_SANDBOX=off``: every
``file://`` case shows the picture (LibreOffice 7.4: 23-48% of the page is
red) and every ``http://`` case is fetched (an OPTIONS and a GET per
conversion: the odt twice, in ``.parsed`` and ``.render``), except one.
An RTF ``INCLUDEPICTURE`` of an ``http://`` URL was never fetched, even
unconfined (its ``file://`` twins were read), so ``http-rtf.rtf`` is only a
"nothing leaks" check.  (A Word ``INCLUDEPICTURE`` field in a docx was
followed for neither kind of URL, so it is not built.)
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from parsers import soffice
from swfs.views import sandbox
from tests import linkdocs
from tests.mountutil import cleanup_dir, daemon_env, needs_fuse, start, swfs, workdir

pytestmark = [
    pytest.mark.mount,
    pytest.mark.timeout(900),
    needs_fuse,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs a root daemon"),
    pytest.mark.skipif(soffice.program() is None, reason="LibreOffice (soffice) is not installed"),
]

FORMATS = (".odt", ".docx", ".rtf", ".pptx", ".xlsx")
TARGETS = ("private", "public", "http")
NOT_FOLLOWED = frozenset({"http-rtf.rtf"})  # even unconfined (see the docstring)
SHOWN = 0.05  # the control: a page showing the picture is at least this red
NONE = 0.001  # confined: a page is at most this red (no picture: 0)
PARSE_TIMEOUT = 300.0


@dataclass
class Scene:
    root: Path
    src: Path
    mnt: Path
    view: Path  # bound into the sandbox's view; holds the root-only folder
    private: Path
    public: Path
    listener: linkdocs.HttpListener
    names: list[str]


@pytest.fixture
def scene() -> Iterator[Scene]:
    root = workdir()
    src, mnt, view, public_dir = root / "src", root / "mnt", root / "view", root / "public"
    for d in (src, mnt, view, public_dir):
        d.mkdir()
        d.chmod(0o755)
    private = linkdocs.write_root_only_png(view / "private")
    public = public_dir / "red.png"
    public.write_bytes(linkdocs.red_png())
    public.chmod(0o644)
    listener = linkdocs.HttpListener(linkdocs.red_png())
    urls = {
        "private": private.as_uri(),
        "public": public.as_uri(),
    }
    names = []
    for ext in FORMATS:
        for target in TARGETS:
            name = f"{target}-{ext[1:]}{ext}"
            url = urls.get(target) or listener.url(f"{name}.png")
            (src / name).write_bytes(linkdocs.BUILDERS[ext](url))
            names.append(name)
    (src / "where.probe").write_text(json.dumps({"read": [str(private), str(public)]}))
    try:
        yield Scene(root, src, mnt, view, private, public, listener, names)
    finally:
        listener.close()
        cleanup_dir(root)


@dataclass
class Seen:
    red: dict[str, float]  # the share of red pixels of each first page rendered
    failed: dict[str, str]  # why a document has no parsed text or no first page
    requests: dict[str, int]  # requests the listener got for each document's URL
    other_requests: list[bytes]  # requests for any other path
    probe: dict[str, str]  # the probe's reads: path -> outcome

    def table(self) -> str:
        rows = [
            f"  {name:18} red {share:7.2%}  requests {self.requests.get(name, 0)}"
            for name, share in self.red.items()
        ]
        rows += [f"  {name:18} {why}" for name, why in self.failed.items()]
        return "\n".join(rows) + f"\n  other requests: {self.other_requests}"


def _first_image(mnt: Path, name: str) -> Path:
    folder = mnt / ".render" / name
    return folder / ("slide-001.png" if name.endswith(".pptx") else "page-0001.png")


def _render(mnt: Path, name: str) -> bytes | str:
    """The first page's PNG, or why there is none."""
    page = _first_image(mnt, name)
    try:
        data = page.read_bytes()
    except OSError as exc:
        error = page.parent / "error.md"
        why = error.read_text().splitlines()[1:] if error.exists() else ["no error.md"]
        return f"render: {exc.strerror}: {' '.join(why)}"
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return f"render: not a PNG: {data[:100]!r}"
    return data


def _parsed(mnt: Path, name: str) -> str:
    """Every unit of ``.parsed/<name>/``, read: odt and rtf go through
    LibreOffice here."""
    folder = mnt / ".parsed" / name
    return "".join(
        (folder / unit).read_text(errors="replace") for unit in sorted(os.listdir(folder))
    )


_REQUEST = re.compile(rb"^[A-Z]+ /([^ ?]*)")


def _visit(scene: Scene, env: dict[str, str]) -> Seen:
    """Mount SRC with a root daemon in ``env``, parse and render every
    document, and say what came out."""
    failed: dict[str, str] = {}
    m = start(scene.src, scene.mnt, env=env)
    try:
        swfs("sync", scene.mnt, timeout=PARSE_TIMEOUT)
        for name in scene.names:
            text = _parsed(scene.mnt, name)
            if "Linked picture below." not in text:
                failed[name] = f"parse: {' '.join(text.split())[:300]}"
        probe_text = _parsed(scene.mnt, "where.probe")
        # Two renders at a time: the daemon has two render workers.
        with ThreadPoolExecutor(2) as pool:
            images = pool.map(lambda n: _render(scene.mnt, n), scene.names)
            pages = dict(zip(scene.names, images, strict=True))
    finally:
        m.stop()
    probe = next(json.loads(line) for line in probe_text.splitlines() if line.startswith("{"))
    requests: dict[str, int] = {}
    other: list[bytes] = []
    for head in scene.listener.requests():
        match = _REQUEST.match(head)
        asked = match.group(1).decode(errors="replace").removesuffix(".png") if match else ""
        if asked in scene.names:
            requests[asked] = requests.get(asked, 0) + 1
        else:
            other.append(head[:200])
    red: dict[str, float] = {}
    for name, page in pages.items():
        if isinstance(page, bytes):
            red[name] = linkdocs.red_share(page)
        else:
            failed[name] = f"{failed[name]}; {page}" if name in failed else page
    return Seen(red, failed, requests, other, probe["reads"])


def _env(scene: Scene, **extra: str) -> dict[str, str]:
    env = daemon_env()
    env.pop(sandbox.ENV, None)
    return {**env, sandbox.BIND_ENV: str(scene.view), **extra}


def test_a_confined_libreoffice_follows_no_link(scene: Scene) -> None:
    seen = _visit(scene, _env(scene))
    report = "\n" + seen.table()
    # The file cases meet the layer they are meant to: the root-only PNG
    # is in the view but refused to nobody; the public one is not there.
    assert seen.probe[str(scene.private)] == "refused: Permission denied", seen.probe
    assert seen.probe[str(scene.public)] == "refused: No such file or directory", seen.probe
    assert scene.listener.requests() == [], report
    leaked = {name: share for name, share in seen.red.items() if share > NONE}
    assert leaked == {}, report
    # Every document parsed and rendered: "no red" means nothing of a page
    # that was never made.
    assert seen.failed == {}, report


def test_unconfined_libreoffice_follows_the_links(scene: Scene) -> None:
    """The control: with ``SWFS_SANDBOX=off`` the same documents show the
    red picture and fetch their URLs, so the test above can fail."""
    seen = _visit(scene, _env(scene, **{sandbox.ENV: "off"}))
    report = "\n" + seen.table()
    assert seen.failed == {}, report
    assert seen.probe[str(scene.private)].startswith("read: "), seen.probe
    for name in scene.names:
        if name in NOT_FOLLOWED:
            continue
        if name.startswith("http-"):
            assert seen.requests.get(name, 0) > 0, f"{name}: not fetched{report}"
        else:
            assert seen.red[name] >= SHOWN, f"{name}: no picture{report}"
    assert seen.other_requests == [], report


def test_the_documents_link_and_embed_nothing() -> None:
    """Each built document refers to its URL and carries no picture of its
    own, so red on a page can only come through the link."""
    url = "file:///nowhere/red.png"
    for ext, build in linkdocs.BUILDERS.items():
        data = build(url)
        if ext == ".rtf":
            assert url.encode() in data, ext
            assert b"\\pict" not in data, ext
            continue
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = z.namelist()
            text = b"".join(z.read(n) for n in names if n.endswith((".xml", ".rels")))
        assert url.encode() in text, ext
        assert not [n for n in names if "/media/" in n or n.lower().endswith(".png")], (ext, names)
