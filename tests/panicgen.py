"""A real file that makes python-calamine panic (a Rust panic through pyo3).

XlsxWriter writes a workbook, LibreOffice saves it as .xls (BIFF8), and the
sheet's stream offset in its BOUNDSHEET record is then pointed far past
the end of the Workbook stream, as a fuzzer did to the .xls of issue 41:
calamine slices the stream at that offset without a check and panics
('range start index ... out of range').  Only that one field is changed;
olefile rewrites the stream in place.
"""

from __future__ import annotations

import pathlib
import struct

import pytest

from tests import sheetgen

_BOUNDSHEET = 0x0085
FAR_OFFSET = 0xFC0004D6


def fuzzed_xls(folder: pathlib.Path) -> pathlib.Path:
    if sheetgen.SOFFICE is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    import olefile
    import xlsxwriter

    folder.mkdir(parents=True, exist_ok=True)
    book = folder / "fuzzed.xlsx"
    wb = xlsxwriter.Workbook(str(book))
    wb.add_worksheet("Data").write("A1", "never read")
    wb.close()
    path = sheetgen.soffice_convert(book, "xls", folder / "lo")
    with olefile.OleFileIO(str(path), write_mode=True) as ole:
        data = bytearray(ole.openstream("Workbook").read())
        offset = 0
        while offset + 8 <= len(data):
            kind, length = struct.unpack_from("<HH", data, offset)
            if kind == _BOUNDSHEET:
                struct.pack_into("<I", data, offset + 4, FAR_OFFSET)
                break
            offset += 4 + length
        else:
            raise AssertionError("LibreOffice wrote no BOUNDSHEET record")
        ole.write_stream("Workbook", bytes(data))
    return path


def panics_calamine(path: pathlib.Path) -> bool:
    """Whether python-calamine panics on ``path`` (else the tests using
    the file would prove nothing about panics)."""
    import python_calamine

    try:
        python_calamine.CalamineWorkbook.from_path(str(path))
    except Exception:
        return False
    except BaseException as exc:
        return type(exc).__name__ == "PanicException"
    return False
