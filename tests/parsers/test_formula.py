"""Formula values computed by ``parsers.formula``, against what Excel and
LibreOffice cache.

Each case is a formula over the data sheet ``D`` (written by XlsxWriter)
and the value a spreadsheet shows, or ``None`` where the formula must be
refused.  Where LibreOffice is installed, every case is also recalculated by
it (headless, with a profile that recalculates on load) and each value we
compute must equal the one it cached: refusing is allowed, differing is not.
"""

from __future__ import annotations

import datetime
import math
import pathlib
import shutil
import subprocess
import zipfile

import pytest

from parsers import cells, formula, registry, xlsx_recalc
from parsers._base import ParseOptions, Unit

SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")
needs_soffice = pytest.mark.skipif(SOFFICE is None, reason="LibreOffice (soffice) is not installed")

# (formula on sheet F, in the row the case is written to, or None: refused)
CASES: list[tuple[str, str | None]] = [
    # arithmetic and operators
    ("=1+2*3", "7"),
    ("=(1+2)*3", "9"),
    ("=-2^2", "4"),
    ("=2^3^2", "64"),
    ("=10/4", "2.5"),
    ("=1/0", "#DIV/0!"),
    ("=50%", "0.5"),
    ("=D!A1+D!A2", "3"),
    ("=D!A1*D!B1", "#VALUE!"),
    ('="3"+1', "4"),
    ('=""+1', "#VALUE!"),
    ('="abc"+1', "#VALUE!"),
    ('="$5"+1', None),  # a currency: read by the locale
    ('="1,000"+1', None),
    ("=D!A99+1", "1"),  # an empty cell
    ("=D!A99", "0"),
    ("=0.1+0.2", "0.3"),
    ("=0.1+0.2-0.3", "0"),  # both programs snap the last difference
    ("=1*(0.5-0.4-0.1)", None),  # LibreOffice snaps, Excel does not
    ("=0^0", None),
    ("=(-8)^(1/3)", None),  # Excel #NUM!, LibreOffice -2
    ("=#N/A+1", "#N/A"),
    ("=1/0+#N/A", None),  # two errors: Excel gives the left one, LibreOffice not always
    ("=#N/A+#N/A", "#N/A"),
    # comparison
    ("=1<2", "TRUE"),
    ('="a"="A"', "TRUE"),
    ('="a"<"B"', "TRUE"),
    ('="a-b"<"ab"', None),  # collation
    ('=1="1"', "FALSE"),
    ('=1<"1"', "TRUE"),  # text is greater than any number
    ("=D!B1>5", "TRUE"),
    ("=MOD(10.5,3)", "1.5"),
    ("=D!A99=0", "TRUE"),
    ('=D!A99=""', "TRUE"),
    ("=TRUE=1", None),
    # text
    ('="a"&"b"', "ab"),
    ('=1&"x"', "1x"),
    ('=1/3&""', None),  # rounding to 15 digits: the programs differ in the last
    ('=0.25&""', "0.25"),
    ('=1E+20&""', None),
    ('=TRUE&""', None),
    ('=D!A99&"x"', "x"),
    ('=CONCATENATE("a",1,"b")', "a1b"),
    ('=_xlfn.CONCAT(D!B1:B3,"!")', "appleBananacherry!"),
    ('=_xlfn.TEXTJOIN("-",TRUE,D!B1:B6)', "apple-Banana-cherry-apple pie-kiwi"),
    ('=LEFT("hello",2)', "he"),
    ('=LEFT("hello")', "h"),
    ('=RIGHT("hello",3)', "llo"),
    ('=MID("hello",2,3)', "ell"),
    ('=MID("hello",0,3)', "#VALUE!"),
    ('=LEN("hello")', "5"),
    ('=UPPER("abc")', "ABC"),
    ('=LOWER("ABC")', "abc"),
    ('=TRIM("  a   b  ")', "a b"),
    ('=SUBSTITUTE("a-b-c","-","+")', "a+b+c"),
    ('=SUBSTITUTE("a-b-c","-","+",2)', "a-b+c"),
    ('=REPT("ab",3)', "ababab"),
    ('=FIND("l","hello")', "3"),
    ('=FIND("L","hello")', "#VALUE!"),
    ('=SEARCH("L","hello")', "3"),
    ('=EXACT("a","A")', "FALSE"),
    ('=VALUE("12.5")', "12.5"),
    ('=TEXT(1234.567,"#,##0.00")', "1,234.57"),
    ('=TEXT(0.125,"0.0%")', "12.5%"),
    ('=TEXT(2.5,"0")', "3"),
    ('=TEXT(45356,"yyyy-mm-dd")', "2024-03-05"),
    ('=TEXT(D!F1,"dd/mm/yyyy")', "05/03/2024"),
    ('=TEXT(-1234.5,"$#,##0.00")', "-$1,234.50"),
    ('=TEXT(0.4,"#")', ""),
    ('=TEXT(45356,"mmm d")', None),  # month names: the locale's
    ('=TEXT(1.005,"0.00")', None),  # 1.00499999... in binary
    ("=CHAR(65)", "A"),
    ("=CHAR(0)", None),  # Excel #VALUE!, LibreOffice a NUL character
    ('=CODE("")', None),  # Excel #VALUE!, LibreOffice 0
    ('=_xlfn.TEXTJOIN("-",FALSE,D!B4:B6)', "apple pie-kiwi-"),
    ('=CODE("A")', "65"),
    # math
    ("=ROUND(2.675,2)", "2.68"),
    ("=ROUND(-2.5,0)", "-3"),
    ("=ROUND(1234,-2)", "1200"),
    ("=ROUNDUP(1.21,1)", "1.3"),
    ("=ROUNDDOWN(-1.29,1)", "-1.2"),
    ("=INT(-1.5)", "-2"),
    ("=TRUNC(-1.5)", "-1"),
    ("=ABS(-3)", "3"),
    ("=MOD(7,3)", "1"),
    ("=MOD(-7,3)", "2"),
    ("=MOD(7,0)", "#DIV/0!"),
    ("=POWER(2,10)", "1024"),
    ("=SQRT(16)", "4"),
    ("=SQRT(-1)", None),  # Excel #NUM!, LibreOffice #VALUE!
    ("=PI()", "3.14159265358979"),
    ("=SIN(PI()/2)", "1"),
    ("=LN(EXP(2))", "2"),
    ("=LOG10(1000)", "3"),
    ("=SIGN(-4)", "-1"),
    ("=CEILING(4.1,0.5)", "4.5"),
    ("=FLOOR(4.9,2)", "4"),
    ("=FACT(5)", "120"),
    # aggregates
    ("=SUM(D!A1:A6)", "25.5"),
    ("=SUM(D!A1:A6,10)", "35.5"),
    ("=SUM(D!C1:C6)", None),  # TRUE in the range
    ("=SUM(D!B1:B6)", "0"),
    ("=SUM(D!A:A)", "25.5"),
    ('=SUM(1,"2")', None),
    ("=AVERAGE(D!A1:A5)", "3"),
    ("=AVERAGE(D!B1:B3)", "#DIV/0!"),
    ("=MIN(D!A1:A6)", "1"),
    ("=MAX(D!A1:A6)", "10.5"),
    ("=MAX(D!B1:B3)", "0"),
    ("=COUNT(D!A1:A6)", "6"),
    ("=COUNT(D!B1:B6)", "0"),
    ("=COUNTA(D!B1:B6)", "5"),
    ("=COUNTBLANK(D!B1:B6)", "1"),
    ("=PRODUCT(D!A1:A4)", "24"),
    ("=MEDIAN(D!A1:A6)", "3.5"),
    ("=LARGE(D!A1:A6,2)", "5"),
    ("=SMALL(D!A1:A6,2)", "2"),
    ("=SUMPRODUCT(D!A1:A3,D!D1:D3)", "140"),
    ("=SUMPRODUCT((D!A1:A6>2)*D!A1:A6)", "22.5"),
    ("=SUMPRODUCT(D!A1:A3*2)", "12"),
    ("=SUMPRODUCT(D!A1:A3,D!D1:D4)", "#VALUE!"),
    ("=SUM(D!A1:A3*2)", None),  # array or intersection: the programs differ
    # conditions
    ('=COUNTIF(D!A1:A6,">2")', "4"),
    ("=COUNTIF(D!A1:A6,3)", "1"),
    ('=COUNTIF(D!B1:B6,"apple")', "1"),
    ('=COUNTIF(D!B1:B6,"APPLE*")', "2"),
    ('=COUNTIF(D!B1:B6,"?pple")', "1"),
    ('=COUNTIF(D!B1:B6,"<>apple")', None),  # an empty cell in the range
    ('=COUNTIF(D!B1:B4,"<>apple")', "3"),
    ('=SUMIF(D!A1:A6,">=3")', "22.5"),
    ('=SUMIF(D!B1:B6,"apple*",D!A1:A6)', "5"),
    ('=SUMIF(D!B1:B6,"apple*",D!A1)', "5"),  # the sum range takes the condition's shape
    ('=SUMIFS(D!A1:A6,D!A1:A6,">1",D!A1:A6,"<5")', "9"),
    ('=COUNTIFS(D!A1:A6,">1",D!B1:B6,"*e*")', "2"),
    ('=AVERAGEIF(D!A1:A6,">2")', "5.625"),
    ('=COUNTIF(D!A1:A6,"1/2/2024")', None),
    ("=COUNTIF(D!C4:C6,3)", None),  # the text "3": LibreOffice skips it
    ('=COUNTIF(D!C4:C6,">2")', None),  # compared as a number? not known
    ('=COUNTIF(D!B:B,"apple*")', "2"),  # a whole column
    ('=SUMIF(D!B:B,"apple*",D!A:A)', "5"),
    ('=COUNTIF(D!B:B,"<>apple")', None),  # the empty cells of the column count
    ("=COUNTIF(D!A1:A6,D!A1:A2)", None),  # a range as the condition
    # logic
    ('=IF(1>2,"yes","no")', "no"),
    ('=IF(1<2,"yes")', "yes"),
    ('=IF(1>2,"yes")', "FALSE"),
    ('=IF("TRUE",1,2)', "1"),
    ("=IF(D!A99,1,2)", "2"),
    ("=IF(TRUE,D!A99)", "0"),
    ('=IFERROR(1/0,"bad")', "bad"),
    ('=IFERROR(2,"bad")', "2"),
    ('=_xlfn.IFNA(#N/A,"none")', "none"),
    ('=IFNA(#N/A,"none")', None),  # without the prefix Excel writes
    ("=AND(TRUE,1>0)", "TRUE"),
    ("=OR(FALSE,0)", "FALSE"),
    ("=NOT(1)", "FALSE"),
    ("=AND(D!B1:B3)", "#VALUE!"),
    ("=ISNUMBER(D!A1)", "TRUE"),
    ("=ISTEXT(D!B1)", "TRUE"),
    ("=ISBLANK(D!A99)", "TRUE"),
    ("=ISERROR(1/0)", "TRUE"),
    ("=ISNA(#N/A)", "TRUE"),
    ("=ISERR(#N/A)", "FALSE"),
    ('=CHOOSE(2,"a","b","c")', "b"),
    ('=CHOOSE(4,"a","b","c")', "#VALUE!"),
    # lookup
    ("=VLOOKUP(30,D!D1:E5,2,FALSE)", "thirty"),
    ("=VLOOKUP(35,D!D1:E5,2,FALSE)", "#N/A"),
    ("=VLOOKUP(35,D!D1:E5,2,TRUE)", "thirty"),
    ("=VLOOKUP(35,D!D1:E5,2)", "thirty"),
    ("=VLOOKUP(5,D!D1:E5,2)", "#N/A"),
    ("=VLOOKUP(30,D!D1:E5,3,FALSE)", None),  # Excel #REF!, LibreOffice #VALUE!
    ("=VLOOKUP(30,D!D1:E5,0,FALSE)", "#VALUE!"),
    ("=VLOOKUP(30,Table,2,FALSE)", "thirty"),
    ('=VLOOKUP("BANANA",D!B1:B6,1,FALSE)', "Banana"),
    ("=VLOOKUP(40,D!D:E,2,FALSE)", "forty"),
    ("=HLOOKUP(2,D!H1:J2,2,FALSE)", "b"),
    ("=INDEX(D!D1:E5,2,2)", "twenty"),
    ("=INDEX(D!D1:D5,3)", "30"),
    ("=INDEX(D!D1:E5,9,1)", None),
    ("=SUM(INDEX(D!D1:E5,2,1))", "20"),
    ("=MATCH(30,D!D1:D5,0)", "3"),
    ("=MATCH(35,D!D1:D5)", "3"),
    ("=MATCH(5,D!D1:D5,1)", "#N/A"),
    ('=MATCH("cherry",D!B1:B6,0)', "3"),
    ("=INDEX(D!E1:E5,MATCH(40,D!D1:D5,0))", "forty"),
    # names
    ("=Rate*100", "20"),
    ("=SUM(Table)", "150"),  # text and numbers: SUM of the numbers
    ("=SUM(Nums)", "25.5"),
    ("=Nope+1", None),
    # dates (the data sheet's F1 is 2024-03-05)
    ("=YEAR(D!F1)", "2024"),
    ("=MONTH(D!F1)", "3"),
    ("=DAY(D!F1)", "5"),
    ("=DATE(2024,3,5)", "45356"),
    ("=DATE(2024,14,1)", "45689"),
    ("=DATE(24,1,1)", None),
    ("=WEEKDAY(D!F1)", "3"),
    ("=WEEKDAY(D!F1,2)", "2"),
    ("=EDATE(D!F1,1)", "45387"),
    ("=EOMONTH(D!F1,0)", "45382"),
    ("=D!F1+1", "45357"),
    # Excel 2016-2019 functions, as Excel writes them
    ('=_xlfn.IFS(D!A1>1,"a",D!A1=1,"b")', "b"),
    ('=_xlfn.SWITCH(D!A2,1,"one",2,"two","other")', "two"),
    ('=_xlfn.MAXIFS(D!A1:A6,D!B1:B6,"apple*")', "4"),
    ('=_xlfn.MINIFS(D!A1:A6,D!A1:A6,">2")', "3"),
    ("=_xlfn.XOR(TRUE,TRUE,TRUE)", "TRUE"),
    ("=STDEV(D!A1:A5)", "1.58113883008419"),
    ("=_xlfn.VAR.P(D!A1:A5)", "2"),
    ("=STDEV(D!A1)", None),  # Excel #DIV/0!, LibreOffice another error
    ("=_xlfn.DAYS(D!F1,DATE(2024,1,1))", "64"),
    ('=DATEDIF(DATE(2020,2,29),D!F1,"Y")', "4"),
    ('=DATEDIF(DATE(2024,1,31),DATE(2024,3,1),"M")', "1"),
    ('=DATEDIF(D!F1,DATE(2020,1,1),"D")', None),  # backwards
    ("=TIME(12,30,0)", "0.520833333333333"),
    ("=HOUR(0.75)", "18"),
    ("=MINUTE(TIME(1,2,3))", "2"),
    ("=SECOND(TIME(1,2,3))", "3"),
    # refused outright
    ("=TODAY()", None),
    ("=NOW()+1", None),
    ("=RAND()", None),
    ("=OFFSET(D!A1,1,0)", None),
    ('=INDIRECT("D!A1")', None),
    ("=FOOBAR(1)", None),
    ("=D!A1:A6 D!A2:B2", None),
    ("=SUM((D!A1,D!A2))", None),
]

# Cases whose value depends on the row they sit in (implicit intersection).
ROW_CASES: list[tuple[int, str, str | None]] = [
    (3, "=D!A1:A6", "3"),  # the same row of a column range
    (3, "=D!A1:A6*2", "6"),
    (9, "=D!A1:A6", "#VALUE!"),  # no such row in the range
    (3, "=D!A1:B6", None),  # two columns
    (3, "=ABS(D!A1:A6)", "3"),
]


# Array formulas ({=...}), in column C.
ARRAY_CASES: list[tuple[str, str | None]] = [
    ("{=SUM(D!A1:A3*D!D1:D3)}", "140"),
    ("{=MAX(D!A1:A6-D!D1:D6)}", "10.5"),
    ("{=COUNT(D!A1:A6/(D!A1:A6>2))}", "4"),
    ("{=AVERAGE(IF(D!A1:A6>2,D!A1:A6))}", None),
    ("{=D!A1:A3*2}", None),
]


def _data_sheet(wb: object) -> None:
    import xlsxwriter

    assert isinstance(wb, xlsxwriter.Workbook)
    d = wb.add_worksheet("D")
    for i, v in enumerate([1, 2, 3, 4, 5, 10.5]):
        d.write_number(i, 0, v)
    for i, t in enumerate(["apple", "Banana", "cherry", "apple pie", "kiwi"]):
        d.write_string(i, 1, t)
    d.write_number(0, 2, 1)
    d.write_string(1, 2, "x")
    d.write_boolean(2, 2, True)
    d.write_string(4, 2, "3")
    d.write_number(5, 2, -2)
    for i, (n, t) in enumerate(
        [(10, "ten"), (20, "twenty"), (30, "thirty"), (40, "forty"), (50, "fifty")]
    ):
        d.write_number(i, 3, n)
        d.write_string(i, 4, t)
    d.write_datetime(
        0, 5, datetime.datetime(2024, 3, 5), wb.add_format({"num_format": "yyyy-mm-dd"})
    )
    for j, (n, t) in enumerate([(1, "a"), (2, "b"), (3, "c")]):
        d.write_number(0, 7 + j, n)
        d.write_string(1, 7 + j, t)
    wb.define_name("Rate", "=0.2")
    wb.define_name("Table", "=D!$D$1:$E$5")
    wb.define_name("Nums", "=D!$A$1:$A$6")


def cases_workbook(path: pathlib.Path) -> dict[str, str | None]:
    """Every case on sheet F, column A, one a row; returns address -> expected."""
    import xlsxwriter

    wb = xlsxwriter.Workbook(str(path))
    f = wb.add_worksheet("F")
    _data_sheet(wb)
    expected: dict[str, str | None] = {}
    used = {row for row, _, _ in ROW_CASES}
    row = 1
    for text, want in CASES:
        while row in used:
            row += 1
        f.write_formula(f"A{row}", text)
        expected[f"A{row}"] = want
        row += 1
    for r, text, want in ROW_CASES:
        f.write_formula(f"B{r}", text)
        expected[f"B{r}"] = want
    for r, (text, want) in enumerate(ARRAY_CASES, start=1):
        f.write_array_formula(f"C{r}:C{r}", text)
        expected[f"C{r}"] = want
    wb.close()
    return expected


def parse(path: pathlib.Path) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    return registry.parse(str(path), info, ParseOptions())[1]


def shown(units: list[Unit], sheet: str = "F") -> dict[str, str]:
    """Address -> the text after ' -> ' of each formula cell of a sheet."""
    unit = next(u for u in units if cells.sheet_name(u.name, u.locator) == sheet)
    out = {}
    for addr, cell in cells.parse_cell_lines(unit.text).items():
        if cell.formula is not None and cell.value is not None:
            out[addr] = cell.value
    return out


def without_values(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    """The workbook with every cached formula value dropped (as openpyxl saves)."""
    import openpyxl

    wb = openpyxl.load_workbook(src)
    wb.save(dst)
    return dst


def computed(path: pathlib.Path, tmp: pathlib.Path) -> dict[str, str]:
    return shown(parse(without_values(path, tmp / f"nocache-{path.name}")))


@pytest.fixture(scope="module")
def book(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, dict[str, str | None]]:
    path = tmp_path_factory.mktemp("formula") / "cases.xlsx"
    return path, cases_workbook(path)


def test_values(book: tuple[pathlib.Path, dict[str, str | None]], tmp_path: pathlib.Path) -> None:
    path, expected = book
    got = computed(path, tmp_path)
    wrong = []
    for addr, want in expected.items():
        value = got[addr]
        if want is None:
            ok = value.startswith("? (not computed: ")
        else:
            ok = value == f"{want} {cells.COMPUTED}"
        if not ok:
            wrong.append(f"{addr}: {_formula_at(addr)!r} gave {value!r}, want {want!r}")
        assert "Traceback" not in value
        assert "Error" not in value
    assert not wrong, "\n".join(wrong)


def _formula_at(addr: str) -> str:
    col, row = addr[0], int(addr[1:])
    if col == "C":
        return ARRAY_CASES[row - 1][0]
    if col == "B":
        return next(t for r, t, _ in ROW_CASES if r == row)
    used = {r for r, _, _ in ROW_CASES}
    rows = [r for r in range(1, 1000) if r not in used]
    return CASES[rows.index(row)][0]


def test_reasons_are_short(
    book: tuple[pathlib.Path, dict[str, str | None]], tmp_path: pathlib.Path
) -> None:
    got = computed(book[0], tmp_path)
    reasons = {v for v in got.values() if v.startswith("?")}
    assert "? (not computed: TODAY changes with every calculation)" in reasons
    assert "? (not computed: FOOBAR unsupported)" in reasons
    assert "? (not computed: unknown name NOPE)" in reasons
    for reason in reasons:
        assert len(reason) < 100, reason
        assert "\n" not in reason
        assert "File " not in reason


def lo_recalculated(src: pathlib.Path, outdir: pathlib.Path) -> pathlib.Path:
    """``soffice --convert-to xlsx`` with a profile that recalculates every
    formula on load (by default it keeps the cached values of xlsx files)."""
    assert SOFFICE is not None
    profile = outdir / "profile"
    (profile / "user").mkdir(parents=True, exist_ok=True)
    (profile / "user" / "registrymodifications.xcu").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<oor:items xmlns:oor="http://openoffice.org/2001/registry"'
        ' xmlns:xs="http://www.w3.org/2001/XMLSchema"'
        ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        '<item oor:path="/org.openoffice.Office.Calc/Formula/Load">'
        '<prop oor:name="OOXMLRecalcMode" oor:op="fuse"><value>0</value></prop></item>\n'
        "</oor:items>\n"
    )
    out = outdir / "lo"
    subprocess.run(
        [
            SOFFICE,
            f"-env:UserInstallation={profile.as_uri()}",
            "--headless",
            "--norestore",
            "--convert-to",
            "xlsx",
            "--outdir",
            str(out),
            str(src),
        ],
        check=True,
        timeout=240,
        capture_output=True,
        env={"HOME": str(outdir), "PATH": "/usr/bin:/bin"},
    )
    result = out / src.name
    assert result.exists()
    return result


def cached(path: pathlib.Path) -> dict[str, str]:
    """Address -> each cached value of the first sheet, read from its XML
    and shown as General.  openpyxl is not used: it shows a value by the
    cell's format, and LibreOffice gives a formula cell the format of its
    result (a date, a time, a percentage); a time-formatted number outside
    openpyxl's dates even reads as an error there."""
    from xml.etree import ElementTree

    ns = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main"}
    with zipfile.ZipFile(path) as zf:
        shared = []
        if "xl/sharedStrings.xml" in zf.namelist():
            for si in ElementTree.fromstring(zf.read("xl/sharedStrings.xml")).iterfind("m:si", ns):
                shared.append("".join(t.text or "" for t in si.iter(f"{{{ns['m']}}}t")))
        sheet = ElementTree.fromstring(zf.read("xl/worksheets/sheet1.xml"))
    out = {}
    for c in sheet.iter(f"{{{ns['m']}}}c"):
        v = c.find("m:v", ns)
        if v is None or v.text is None:
            continue
        kind = c.get("t", "n")
        if kind == "s":
            value: object = shared[int(v.text)]
        elif kind == "b":
            value = v.text == "1"
        elif kind in ("str", "e", "inlineStr"):
            value = v.text
        else:
            value = float(v.text)
        out[c.get("r", "")] = cells.format_value(value)
    return out


def same(mine: str, cached: str | None) -> bool:
    """Equal as shown, or numbers apart by at most one unit of the 15th
    significant digit: LibreOffice rounds the values it caches to 15 digits
    by a rule of its own."""
    if cached is None:
        return mine == ""  # an empty text is cached as no value
    if mine == cached:
        return True
    try:
        x, y = float(mine), float(cached)
    except ValueError:
        return False
    if x == 0 or y == 0:
        return False
    return abs(x - y) <= 1.5 * 10 ** (math.floor(math.log10(abs(y))) - 14)


def compare(ours: dict[str, str], theirs: dict[str, str]) -> tuple[int, list[str], int]:
    """(equal, differences, refused) between computed values and cached ones."""
    equal, refused, different = 0, 0, []
    for addr, value in ours.items():
        if value.startswith("? (not computed"):
            refused += 1
            continue
        mine = value.removesuffix(f" {cells.COMPUTED}")
        if same(mine, theirs.get(addr)):
            equal += 1
        else:
            different.append(f"{addr}: ours {mine!r}, cached {theirs.get(addr)!r}")
    return equal, different, refused


@needs_soffice
def test_values_equal_libreoffice(
    book: tuple[pathlib.Path, dict[str, str | None]], tmp_path: pathlib.Path
) -> None:
    path, _ = book
    theirs = cached(lo_recalculated(path, tmp_path))
    ours = computed(path, tmp_path)
    equal, different, _ = compare(ours, theirs)
    assert not different, "\n".join(different)
    assert equal > 150


def random_workbook(path: pathlib.Path, seed: int, count: int) -> None:
    """Random formulas (sheet F, column A) over a data sheet that mixes what
    programs disagree on: numbers, text, numbers as text, TRUE/FALSE, errors,
    a formula's empty text, dates, accented text, a hidden row."""
    import random

    import xlsxwriter

    rng = random.Random(seed)
    words = ["apple", "Apple", "banana", "item7", "12", "3.5", "", "a b", "Ünïcode", "b-c"]
    numbers = [0, 1, 2, 3, -3, 0.1, 0.2, 2.675, 1.005, 10.5, 100, 1e6, -0.5, 45000, 2.5]
    conditions = ['">3"', '"<=2.5"', '"<>x"', '"apple"', '"a*"', '"?b*"', "3", '"<>"', '"*e*"']
    wb = xlsxwriter.Workbook(str(path))
    f = wb.add_worksheet("F")
    d = wb.add_worksheet("D")
    dates = wb.add_format({"num_format": "yyyy-mm-dd"})
    for i in range(20):
        d.write_number(i, 0, rng.choice(numbers))
        if word := rng.choice(words):
            d.write_string(i, 1, word)
        kind = rng.randrange(6)
        if kind == 0:
            d.write_number(i, 2, rng.choice(numbers))
        elif kind == 1:
            d.write_string(i, 2, rng.choice(words) or "q")
        elif kind == 2:
            d.write_boolean(i, 2, rng.random() < 0.5)
        elif kind == 3:
            d.write_formula(i, 2, "=1/0")
        elif kind == 4:
            d.write_formula(i, 2, '=""')
        d.write_number(i, 3, (i + 1) * 10)
        d.write_string(i, 4, f"v{i + 1}")
        day = datetime.datetime(2023, 1, 31) + datetime.timedelta(days=rng.randint(0, 800))
        d.write_datetime(i, 5, day, dates)
    d.set_row(rng.randint(0, 19), None, None, {"hidden": True})
    wb.define_name("Nums", "=D!$A$1:$A$20")

    def ref() -> str:
        return f"D!{rng.choice('ABCDEF')}{rng.randint(1, 22)}"

    def rng_ref(col: str | None = None) -> str:
        col = col or rng.choice("ABCDEF")
        top = rng.randint(1, 20)
        return f"D!{col}{top}:{col}{rng.randint(top, 22)}"

    templates = [
        lambda: f"{rng.choice(['SUM', 'AVERAGE', 'MIN', 'MAX', 'COUNT', 'COUNTA'])}({rng_ref()})",
        lambda: f"COUNTIF({rng_ref()},{rng.choice(conditions)})",
        lambda: f"SUMIF({rng_ref('B')},{rng.choice(conditions)},{rng_ref('A')})",
        lambda: f"{ref()}{rng.choice(['+', '-', '*', '/', '^', '&', '=', '<', '<>'])}{ref()}",
        lambda: f"{rng.choice(['LEFT', 'RIGHT'])}({ref()},{rng.randint(0, 4)})",
        lambda: f"{rng.choice(['LEN', 'UPPER', 'TRIM', 'ISNUMBER', 'ISTEXT', 'VALUE'])}({ref()})",
        lambda: f"ROUND({ref()}*{rng.choice(['1', '3', '0.1'])},{rng.randint(-1, 3)})",
        lambda: f"MOD({ref()},{rng.choice(['2', '-2', '0.5', '0'])})",
        lambda: f"VLOOKUP({ref()},D!D1:E20,2,{rng.choice(['FALSE', 'TRUE'])})",
        lambda: f"IF({ref()}>2,{ref()},{ref()})",
        lambda: f'IFERROR({ref()}/{ref()},"err")',
        lambda: f"{rng.choice(['YEAR', 'MONTH', 'WEEKDAY'])}(D!F{rng.randint(1, 22)})",
        lambda: f'TEXT({ref()},"{rng.choice(["0.00", "#,##0", "0%", "yyyy-mm-dd"])}")',
        lambda: f"SUMPRODUCT((D!A1:A9>{rng.randint(0, 5)})*D!D1:D9)",
        lambda: f"SUBTOTAL({rng.choice([1, 2, 3, 9, 109])},{rng_ref()})",
        lambda: f"{rng.choice(['SUM', 'MAX'])}(Nums)*2",
        lambda: f"INDEX(D!A1:E20,{rng.randint(1, 22)},{rng.randint(1, 5)})",
        lambda: f"D!A{rng.randint(1, 3)}:A{rng.randint(5, 30)}*2",
    ]
    for row in range(count):
        text = rng.choice(templates)()
        if rng.random() < 0.2:
            text += rng.choice(["+", "&", "*"]) + rng.choice(templates)()
        f.write_formula(row, 0, "=" + text)
    wb.close()


@needs_soffice
def test_random_formulas_equal_libreoffice(tmp_path: pathlib.Path) -> None:
    """400 random formulas over awkward data: every value we compute is the
    one LibreOffice caches (refusing is allowed, differing is not)."""
    path = tmp_path / "random.xlsx"
    random_workbook(path, seed=35, count=400)
    theirs = cached(lo_recalculated(path, tmp_path))
    ours = computed(path, tmp_path)
    equal, different, refused = compare(ours, theirs)
    assert not different, "\n".join(different)
    assert equal + refused == 400
    assert equal > 250


# -- the evaluator on its own


def small_book(
    formulas: dict[str, str], values: dict[str, formula.Scalar] | None = None
) -> formula.Book:
    from openpyxl.utils.cell import coordinate_to_tuple

    content: dict[tuple[int, int], formula.Scalar | formula.Formula] = {}
    for addr, v in (values or {}).items():
        content[coordinate_to_tuple(addr)] = v
    for addr, text in formulas.items():
        content[coordinate_to_tuple(addr)] = formula.Formula(text)
    sheet = formula.Sheet(
        "S", content, max_row=max(r for r, _ in content), max_col=max(c for _, c in content)
    )
    return formula.Book([sheet], names={}, local_names={})


def test_long_chain_is_computed_without_deep_recursion() -> None:
    n = 5000
    formulas = {f"A{r}": f"=A{r + 1}+1" for r in range(1, n)}  # from the far end
    book = small_book(formulas, {f"A{n}": 0.0})
    assert book.value("S", 1, 1) == float(n - 1)


def test_long_cycle_is_refused() -> None:
    n = 500
    formulas = {f"A{r}": f"=A{r % n + 1}+1" for r in range(1, n + 1)}
    book = small_book(formulas)
    with pytest.raises(formula.Refused, match="circular reference"):
        book.value("S", 1, 1)
    with pytest.raises(formula.Refused, match="circular reference"):
        book.value("S", 250, 1)


def test_names_that_name_each_other_are_refused() -> None:
    sheet = formula.Sheet("S", {(1, 1): formula.Formula("=Foo")}, max_row=1, max_col=1)
    book = formula.Book([sheet], names={"Foo": "Bar+1", "Bar": "Foo+1"}, local_names={})
    with pytest.raises(formula.Refused, match="defined names nested too deeply"):
        book.value("S", 1, 1)
    book = formula.Book([sheet], names={"Foo": "Foo"}, local_names={})
    with pytest.raises(formula.Refused, match="defined names nested too deeply"):
        book.value("S", 1, 1)


def test_local_names_come_first() -> None:
    sheet = formula.Sheet("S", {(1, 1): formula.Formula("=Rate*2")}, max_row=1, max_col=1)
    book = formula.Book([sheet], names={"Rate": "0.5"}, local_names={("S", "rate"): "0.25"})
    assert book.value("S", 1, 1) == 0.5


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(formula.Refused, match="nested too deeply"):
        formula.parse("=" + "(" * 500 + "1" + ")" * 500)
    with pytest.raises(formula.Refused):
        formula.parse("=" + "ABS(" * 200 + "1" + ")" * 200)


def test_budget_knobs_stay(tmp_path: pathlib.Path) -> None:
    """The knobs tests and bench/swfsloads.py monkeypatch."""
    for knob in ("MAX_FORMULAS", "MAX_WORKBOOK_CELLS", "TIME_BUDGET_S"):
        assert hasattr(xlsx_recalc, knob)
    path = tmp_path / "one.xlsx"
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    assert ws is not None
    ws["A1"] = "=1+1"
    wb.save(path)
    with open(path, "rb") as stream:
        out = xlsx_recalc.compute(
            stream,
            [xlsx_recalc.Pending("Sheet", "A1", cells.GENERAL)],
            total_cells=1,
            epoch=datetime.datetime(1899, 12, 30),
        )
    assert out == ["2 (computed)"]


def test_workbook_that_cannot_load(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "broken.xlsx"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("nothing", "x")
    with open(path, "rb") as stream:
        out = xlsx_recalc.compute(
            stream,
            [xlsx_recalc.Pending("Sheet", "A1", cells.GENERAL)],
            total_cells=1,
            epoch=datetime.datetime(1899, 12, 30),
        )
    assert out[0].startswith("? (not computed: formula engine: ")
    assert "Traceback" not in out[0]


def test_random_formulas_give_a_value_or_a_reason() -> None:
    """Formulas built at random from every function and odd operands
    (huge numbers, whole columns, errors, empty text) end in a value or a
    refusal: no other exception, no infinity, no NaN."""
    import random

    rng = random.Random(35)
    functions = sorted(formula.FUNCTIONS)
    atoms = [
        *("1", "0", "-1", "2.5", "1E+300", "1E-300", '"a"', '""', '"1"', '">1"', '"*"'),
        *("TRUE", "#N/A", "#DIV/0!", "A1", "A2", "A3", "B1", "B3", "B1:B3", "A1:B3", "A:A"),
        *("1:1", "S!A1", "'S'!A1:B2", "Name1", "{1,2;3,4}", "E5", "X9", "C1:C100000"),
    ]

    def expr(depth: int = 0) -> str:
        kind = rng.randrange(5 if depth < 4 else 1)
        if kind == 0:
            return rng.choice(atoms)
        if kind == 1:
            op = rng.choice(["+", "-", "*", "/", "^", "&", "=", "<>", "<", ">="])
            return expr(depth + 1) + op + expr(depth + 1)
        if kind == 2:
            return "-" + expr(depth + 1)
        if kind == 3:
            return "(" + expr(depth + 1) + ")" + rng.choice(["", "%"])
        args = [expr(depth + 1) if rng.random() < 0.9 else "" for _ in range(rng.randint(0, 4))]
        return rng.choice(functions) + "(" + ",".join(args) + ")"

    base: dict[tuple[int, int], formula.Scalar | formula.Formula] = {
        (1, 1): 1.0,
        (2, 1): "x",
        (3, 1): formula.DateSerial(45000),
        (1, 2): formula.Formula("=A1+1"),
        (2, 2): True,
        (3, 2): formula.NA,
    }
    outcomes = {"value": 0, "refused": 0}
    for _ in range(3000):
        content = {**base, (5, 5): formula.Formula("=" + expr())}
        sheet = formula.Sheet("S", content, max_row=5, max_col=5)
        book = formula.Book([sheet], names={"Name1": "S!$A$1:$B$3"}, local_names={})
        try:
            value = book.value("S", 5, 5)
        except formula.Refused:
            outcomes["refused"] += 1
            continue
        outcomes["value"] += 1
        if isinstance(value, float):
            assert math.isfinite(value)
    assert outcomes["value"] > 300


def test_1904_date_system(tmp_path: pathlib.Path) -> None:
    """A workbook in the 1904 date system (old Mac Excel) counts serials
    from 1904-01-01: dates read and made by formulas stay the same dates."""
    import openpyxl
    from openpyxl.utils.datetime import CALENDAR_MAC_1904

    wb = openpyxl.Workbook()
    wb.epoch = CALENDAR_MAC_1904
    ws = wb.active
    assert ws is not None
    ws.title = "S"
    ws["A1"] = datetime.date(2024, 3, 5)
    ws["B1"] = "=YEAR(A1)*100+MONTH(A1)"
    ws["B2"] = "=DATE(2024,3,5)"
    ws["B2"].number_format = "yyyy-mm-dd"
    ws["B3"] = "=DATE(2024,3,5)"
    ws["B4"] = "=A1+1"
    ws["B4"].number_format = "yyyy-mm-dd"
    path = tmp_path / "mac.xlsx"
    wb.save(path)
    got = shown(parse(path), "S")
    assert got["B1"] == "202403 (computed)"
    assert got["B2"] == "2024-03-05 (computed)"
    assert got["B3"] == f"{45356 - 1462} (computed)"
    assert got["B4"] == "2024-03-06 (computed)"


def test_references_parse() -> None:
    tree = formula.parse("=Übersicht!A1+'My ''Sheet'!B2:C3")
    assert tree == formula.Binary(
        "+", formula.Ref("Übersicht", 1, 1, 1, 1), formula.Ref("My 'Sheet", 2, 2, 3, 3)
    )
    assert formula.parse("=A:B") == formula.Ref(None, 1, 1, formula.MAX_ROW, 2)
    assert formula.parse("=$3:5") == formula.Ref(None, 3, 1, 5, formula.MAX_COL)
    for text in ("=[1]Sheet1!A1", "=Sheet1:Sheet3!A1", "=Table1[Col]", "=Sheet1!#REF!"):
        with pytest.raises(formula.Refused):
            formula.parse(text)


def test_cases_from_excel_saved_workbooks(tmp_path: pathlib.Path) -> None:
    """Cases where our value once differed from the one Excel cached in real
    workbooks (measured on public test workbooks saved by Excel), each
    rebuilt here: Excel's value, or a reason where LibreOffice may differ.
    Computed from the file as written: an openpyxl re-save would change
    the inputs (it drops cells of empty text, writes 16 digits of a number
    and a control character's escape as literal text)."""
    import xlsxwriter

    path = tmp_path / "excel-cases.xlsx"
    wb = xlsxwriter.Workbook(str(path))
    ws = wb.add_worksheet("S")
    date = wb.add_format({"num_format": "yyyy-mm-dd"})
    ws.write_string("A1", "ciao")
    ws.write_boolean("A2", True)
    ws.write_boolean("A3", False)
    ws.write_number("A4", 0)
    ws.write_string("A5", "\x01")  # in the file: _x0001_
    ws.write_formula("A6", "=1/0")
    ws.write_number("A7", 366)
    ws.write_number("A8", 60, date)  # Excel's 29 February 1900
    ws.write_number("A9", 61, date)
    cases: dict[str, tuple[str, str | None]] = {
        "B1": ("=+A1", "ciao"),
        "B2": ("=+A2", "TRUE"),
        "B3": ("=+A99", "0"),
        "B4": ('=AND(TRUE,"ciao",#REF!,"0")', "#REF!"),
        "B5": ('=OR("ciao",A6)', "#DIV/0!"),
        "B6": ('=AND(TRUE,"ciao")', "#VALUE!"),
        "B7": ("=SUMPRODUCT(A6:A7,A1:A3)", None),  # Excel: an error of the arrays
        "B8": ("=SUMPRODUCT(A4:A5,A1:A3)", "#VALUE!"),
        "B9": ("=VALUE(A2)", None),  # Excel #VALUE!, LibreOffice 1
        "B10": ("=EDATE(A7,A3)", None),  # Excel #VALUE!
        "B11": ("=EOMONTH(A7,TRUE)", None),
        "B12": ("=EDATE(A7,1)", "397"),
        "B13": ('=_xlfn.SWITCH(A3,A99,"m")', None),  # Excel #N/A, unlike A3=A99
        "B14": ('=_xlfn.SWITCH(A4,A99,"m")', "m"),  # an empty cell matches 0
        "B15": ('=_xlfn.SWITCH(A99,A4,"m")', "m"),
        "B16": ('=_xlfn.SWITCH(A99,"","m")', None),  # Excel #N/A
        "B17": ("=A8+1", None),  # openpyxl reads 60 as 59
        "B18": ("=A9+1", "62"),
        "B19": ("=CODE(A5)", "1"),
        "B20": ("=LEN(A5)", "1"),
    }
    for addr, (text, _) in cases.items():
        ws.write_formula(addr, text)
    wb.close()

    def values(book_path: pathlib.Path) -> dict[str, str]:
        with open(book_path, "rb") as stream:
            out = xlsx_recalc.compute(
                stream,
                [xlsx_recalc.Pending("S", addr, cells.GENERAL) for addr in cases],
                total_cells=100,
                epoch=datetime.datetime(1899, 12, 30),
            )
        return dict(zip(cases, out, strict=True))

    got = values(path)
    wrong = []
    for addr, (text, want) in cases.items():
        ok = (
            got[addr].startswith("? (not computed: ")
            if want is None
            else got[addr] == f"{want} {cells.COMPUTED}"
        )
        if not ok:
            wrong.append(f"{addr}: {text!r} gave {got[addr]!r}, want {want!r}")
    assert not wrong, "\n".join(wrong)

    # Text that reads "_x0001_" is spelled _x005F_x0001_, which openpyxl
    # reads as it reads the control character: the two are refused alike.
    path = tmp_path / "escapes.xlsx"
    wb = xlsxwriter.Workbook(str(path))
    ws = wb.add_worksheet("S")
    ws.write_string("A5", "\x01")
    ws.write_string("A6", "_x0001_")
    ws.write_string("A7", "plain")
    cases = {
        "B19": ("=CODE(A5)", None),
        "B20": ("=LEN(A6)", None),
        "B21": ("=LEN(A7)", "5"),
    }
    for addr, (text, _) in cases.items():
        ws.write_formula(addr, text)
    wb.close()
    with zipfile.ZipFile(path) as zf:
        assert b"_x005F_x0001_" in zf.read("xl/sharedStrings.xml")
    got = values(path)
    assert (
        got["B19"]
        == got["B20"]
        == "? (not computed: text with an _x..._ escape that reads two ways)"
    )
    assert got["B21"] == f"5 {cells.COMPUTED}"
