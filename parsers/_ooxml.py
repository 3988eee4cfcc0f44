"""Reading parts of an OOXML package (OPC): XML parts and their relationships.

Used after ``zipguard.check_container``, which has refused any XML part with a
DOCTYPE, so the standard library's (C) ElementTree parser is safe here.
"""

from __future__ import annotations

import posixpath
import zipfile
from collections.abc import Callable, Iterable
from typing import TypeVar
from xml.etree import ElementTree
from xml.etree.ElementTree import Element

from parsers import zipguard
from parsers._base import FileInfo, ParseFailed, ParseOptions
from parsers._common import describe

T = TypeVar("T")

PKG_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}"
REL_NS = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"


def read_package(
    path: str,
    info: FileInfo,
    options: ParseOptions,
    kind: str,
    read: Callable[[zipfile.ZipFile], T],
) -> T:
    """Guard the container, open it and ``read`` it; any failure becomes one
    ParseFailed naming ``kind`` ("Word document", "presentation")."""
    zipguard.check_container(path, info, options)
    try:
        with zipfile.ZipFile(path) as archive:
            return read(archive)
    except ParseFailed:
        raise
    except RecursionError as exc:
        raise ParseFailed(f"{kind} too deeply nested") from exc
    except Exception as exc:  # zipfile, expat and malformed-structure errors
        raise ParseFailed(f"unreadable {kind}: {describe(exc)}") from exc


def read_xml(archive: zipfile.ZipFile, member: str) -> Element | None:
    """The parsed part, or None when the package has no such part."""
    try:
        data = archive.read(member)
    except KeyError:
        return None
    return ElementTree.fromstring(data)


def rels_member(part: str) -> str:
    """``ppt/slides/slide1.xml`` -> ``ppt/slides/_rels/slide1.xml.rels``."""
    folder, name = posixpath.split(part)
    return posixpath.join(folder, "_rels", name + ".rels")


_OXML = "application/vnd.openxmlformats-officedocument."
# The content types of each format's main part (transitional and strict
# packages use the same ones).
WORD_MAIN = (
    _OXML + "wordprocessingml.document.main+xml",
    _OXML + "wordprocessingml.template.main+xml",
    "application/vnd.ms-word.document.macroEnabled.main+xml",
    "application/vnd.ms-word.template.macroEnabledTemplate.main+xml",
)
PRESENTATION_MAIN = (
    _OXML + "presentationml.presentation.main+xml",
    _OXML + "presentationml.slideshow.main+xml",
    _OXML + "presentationml.template.main+xml",
    "application/vnd.ms-powerpoint.presentation.macroEnabled.main+xml",
    "application/vnd.ms-powerpoint.slideshow.macroEnabled.main+xml",
    "application/vnd.ms-powerpoint.template.macroEnabled.main+xml",
)
WORKBOOK_MAIN = (
    _OXML + "spreadsheetml.sheet.main+xml",
    _OXML + "spreadsheetml.template.main+xml",
    "application/vnd.ms-excel.sheet.macroEnabled.main+xml",
    "application/vnd.ms-excel.template.macroEnabled.main+xml",
)
PACKAGE_RELS = "_rels/.rels"
CONTENT_TYPES = "[Content_Types].xml"
_CT = "{http://schemas.openxmlformats.org/package/2006/content-types}"


def relationships(archive: zipfile.ZipFile, part: str) -> dict[str, tuple[str, str]]:
    """rId -> (type, package member) for the internal relationships of ``part``.

    ``part`` is '' for the package's own relationships (``_rels/.rels``),
    which are {} when that part is broken (``main_part`` finds the main
    part without them).
    """
    if part:
        root = read_xml(archive, rels_member(part))
    else:
        try:
            root = read_xml(archive, PACKAGE_RELS)
        except ElementTree.ParseError:
            root = None
    if root is None:
        return {}
    base = posixpath.dirname(part)
    found = {}
    for rel in root.iter(PKG_REL + "Relationship"):
        if rel.get("TargetMode") == "External":
            continue
        target = rel.get("Target", "")
        if target.startswith("/"):
            member = target.lstrip("/")
        else:
            member = posixpath.normpath(posixpath.join(base, target))
        found[rel.get("Id", "")] = (rel.get("Type", ""), member)
    return found


def target_of_type(archive: zipfile.ZipFile, part: str, suffix: str) -> str | None:
    """The first relationship target of ``part`` whose type ends with ``suffix``."""
    for kind, member in relationships(archive, part).values():
        if kind.endswith(suffix):
            return member
    return None


def main_part(archive: zipfile.ZipFile, content_types: Iterable[str]) -> str | None:
    """The package's main part: the target of its officeDocument relationship,
    or, when ``_rels/.rels`` is missing, broken or names a part that is not
    there (openpyxl reads such files), the part that ``[Content_Types].xml``
    gives one of ``content_types`` (the main part's, by format)."""
    names = set(archive.namelist())
    main = target_of_type(archive, "", "/officeDocument")
    if main is not None and main in names:
        return main
    wanted = set(content_types)
    try:
        types = read_xml(archive, CONTENT_TYPES)
    except ElementTree.ParseError:
        types = None
    for override in types.iter(_CT + "Override") if types is not None else ():
        member = override.get("PartName", "").lstrip("/")
        if override.get("ContentType") in wanted and member in names:
            return member
    return main


def markdown_table(rows: Iterable[list[str]]) -> str:
    """A Markdown table of the cell texts (rows without cells are left out,
    short rows padded); '' when there is no cell at all."""
    table = [[_cell(text) for text in row] for row in rows]
    table = [r for r in table if r]
    if not table:
        return ""
    width = max(len(r) for r in table)
    table = [r + [""] * (width - len(r)) for r in table]
    lines = ["| " + " | ".join(table[0]) + " |", "|" + " --- |" * width]
    lines += ["| " + " | ".join(r) + " |" for r in table[1:]]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
