"""bench/bigws.py: the sandboxes workload's workspace.  Every file differs
(its own hash), and every replicated document carries its tag in its text."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest

from bench import bigws


@pytest.mark.timeout(600)
def test_every_file_differs_and_documents_carry_their_tag(tmp_path: Path) -> None:
    base = bigws.build(tmp_path, 150, corpus=None)
    files = [Path(d) / n for d, _, names in os.walk(base) for n in names]
    assert len(files) == 150
    digests = {hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    assert len(digests) == len(files)
    for p in files:
        tag = bigws.tag_of(int(p.stem.rsplit("-", 1)[1]))
        if p.suffix in (".docx", ".xlsx", ".pptx", ".odt", ".ods"):
            with zipfile.ZipFile(io.BytesIO(p.read_bytes())) as z:
                assert any(tag.encode() in z.read(n) for n in z.namelist()), p
        elif p.suffix in (".md", ".txt", ".py", ".csv", ".html", ".ipynb"):
            assert tag in p.read_text(), p
    # Built once: a second call reuses it.
    assert bigws.build(tmp_path, 150, corpus=None) == base


def test_vary_zip_puts_the_tag_in_the_text() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("word/document.xml", "<w:t>hello</w:t><w:t>world</w:t>")
    varied = bigws.vary_zip(buf.getvalue(), "swfsbench000007")
    with zipfile.ZipFile(io.BytesIO(varied)) as z:
        assert z.read("word/document.xml") == b"<w:t>hello swfsbench000007</w:t><w:t>world</w:t>"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("other.bin", b"\x00")
    with zipfile.ZipFile(io.BytesIO(bigws.vary_zip(buf.getvalue(), "t1"))) as z:
        assert z.comment == b"t1"
