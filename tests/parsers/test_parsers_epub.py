"""EPUB 2 packages: the standard NCX DOCTYPE is read; entity tricks are still refused.

The fixtures are written as EPUB 2 tools (Calibre, Sigil, InDesign) write them:
``mimetype`` stored first, an OPF 2.0 package with ``toc="ncx"`` and a
``toc.ncx`` that starts with ``<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx
2005-1//EN" ...>``.
"""

from __future__ import annotations

import pathlib
import zipfile

import pytest

from parsers import registry
from parsers._base import ParseFailed, ParseOptions, Unit

NCX_DOCTYPE = (
    '<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" '
    '"http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">'
)
OPF_DOCTYPE = (
    '<!DOCTYPE package PUBLIC "+//ISBN 0-9673008-1-9//DTD OEB 1.2 Package//EN" '
    '"http://openebook.org/dtds/oeb-1.2/oebpkg12.dtd">'
)
XHTML_DOCTYPE = (
    '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" '
    '"http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">'
)
LAUGHS = (
    '<!DOCTYPE ncx [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;">'
    '<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
)


def epub2(
    directory: pathlib.Path,
    *,
    ncx_doctype: str = NCX_DOCTYPE,
    opf_doctype: str = "",
    chapter_doctype: str = XHTML_DOCTYPE,
    ncx_title: str = "Field Notes",
    name: str = "notes.epub",
) -> pathlib.Path:
    container = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<container version="1.0" '
        'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        "</rootfiles></container>"
    )
    opf = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{opf_doctype}'
        '<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="uid">'
        '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
        '<dc:title>Field Notes</dc:title><dc:identifier id="uid">urn:uuid:1234</dc:identifier>'
        "<dc:language>en</dc:language></metadata>"
        '<manifest><item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
        '<item id="c1" href="chapter1.xhtml" media-type="application/xhtml+xml"/>'
        '<item id="c2" href="chapter2.xhtml" media-type="application/xhtml+xml"/></manifest>'
        '<spine toc="ncx"><itemref idref="c1"/><itemref idref="c2"/></spine></package>'
    )
    ncx = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{ncx_doctype}\n'
        '<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
        '<head><meta name="dtb:uid" content="urn:uuid:1234"/></head>'
        f"<docTitle><text>{ncx_title}</text></docTitle><navMap>"
        '<navPoint id="n1" playOrder="1"><navLabel><text>Owls</text></navLabel>'
        '<content src="chapter1.xhtml"/></navPoint></navMap></ncx>'
    )

    def chapter(title: str, body: str) -> str:
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n{chapter_doctype}\n'
            '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>'
            f"{title}</title></head><body><h1>{title}</h1><p>{body}</p></body></html>"
        )

    path = directory / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        z.writestr("META-INF/container.xml", container, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/content.opf", opf, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("OEBPS/toc.ncx", ncx, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr(
            "OEBPS/chapter1.xhtml",
            chapter("Owls", "Barn owls hunt at dusk over open fields."),
            compress_type=zipfile.ZIP_DEFLATED,
        )
        z.writestr(
            "OEBPS/chapter2.xhtml",
            chapter("Herons", "Grey herons wait motionless in shallow water."),
            compress_type=zipfile.ZIP_DEFLATED,
        )
    return path


def parse(path: pathlib.Path) -> tuple[str, list[Unit]]:
    info = registry.file_info(str(path), path.name)
    parser, units = registry.parse(str(path), info, ParseOptions())
    return parser.id, units


def test_epub2_with_ncx_doctype_is_read(tmp_path: pathlib.Path) -> None:
    kind, units = parse(epub2(tmp_path, opf_doctype=OPF_DOCTYPE))
    assert kind == "epub"
    assert [(u.name, u.locator) for u in units] == [("document.md", "document")]
    text = units[0].text
    # must include: both chapters, in spine order
    assert "Barn owls hunt at dusk over open fields." in text
    assert "Grey herons wait motionless in shallow water." in text
    assert text.index("Barn owls") < text.index("Grey herons")
    # must not include: a refusal, markup
    assert "DOCTYPE" not in text
    assert "<p>" not in text


@pytest.mark.parametrize(
    ("where", "doctype", "reason"),
    [
        ("ncx", LAUGHS, "internal subset"),
        ("opf", LAUGHS.replace("ncx", "package"), "internal subset"),
        ("chapter", '<!DOCTYPE html [<!ENTITY boom "boom">]>', "internal subset"),
        (
            "ncx",
            '<!DOCTYPE ncx [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>',
            "internal subset",
        ),
        ("ncx", '<!DOCTYPE ncx SYSTEM "file:///etc/passwd">', "local DTD"),
        ("opf", '<!DOCTYPE package SYSTEM "../../secrets.dtd">', "local DTD"),
    ],
    ids=["laughs-ncx", "laughs-opf", "entity-chapter", "xxe-ncx", "file-dtd", "relative-dtd"],
)
def test_entity_tricks_still_refused(
    tmp_path: pathlib.Path, where: str, doctype: str, reason: str
) -> None:
    kwargs = {f"{where}_doctype": doctype}
    path = epub2(tmp_path, ncx_title="&lol3;" if "lol3" in doctype else "Field Notes", **kwargs)
    with pytest.raises(ParseFailed, match=reason) as caught:
        parse(path)
    message = str(caught.value)
    assert "\n" not in message
    assert "root:" not in message  # nothing of /etc/passwd
    assert "lollol" not in message


def test_ooxml_parts_still_refuse_a_public_doctype(tmp_path: pathlib.Path) -> None:
    """Only EPUB packages may carry a public DOCTYPE: OOXML never needs one."""
    from tests import docgen

    path = docgen.simple_xlsx(tmp_path, [["a", 1]])
    with zipfile.ZipFile(path) as z:
        workbook = z.read("xl/workbook.xml")
    doctype = b'<!DOCTYPE workbook PUBLIC "-//X//Y//EN" "http://example.com/x.dtd">'
    docgen._replace_member(path, "xl/workbook.xml", doctype + workbook)
    with pytest.raises(ParseFailed, match="DOCTYPE"):
        parse(path)
