"""Formulas are data, never code: hostile workbooks run nothing and leak nothing.

Each payload sits in a workbook without cached values (the formulas must be
computed), written by openpyxl and by XlsxWriter with its cached values
stripped, as a file Excel never recalculated.  After the parse: no marker
file exists, the secret's text appears nowhere in the parsed text, every
payload cell is shown as not computed, and no reason holds a traceback.
"""

from __future__ import annotations

import ast
import pathlib
import re
import sys
import zipfile

import pytest

from parsers import cells, formula, registry
from parsers._base import ParseOptions, Unit

SECRET = "s3cr3t-swfs-formula-canary"


def payloads(secret: pathlib.Path, marker: pathlib.Path) -> list[str]:
    read = f"open('{secret}').read()"
    run = f"__import__('os').system('touch {marker}')"
    return [
        f'=EVAL("{read}")',
        f'=EVAL("{run}")',
        f'=EXEC("{run}")',
        f'=_xlfn.EVAL("{read}")',
        f'=GETATTR("{secret}","read")',
        '=GETATTR(A1,"__class__")',
        '=__import__("os")',
        '=__IMPORT__("os")',
        f'=open("{secret}")',
        f'=OPEN("{secret}")',
        f'=eval("{read}")',
        f'=exec("{run}")',
        f'=compile("{run}","x","exec")',
        "=globals()",
        "=locals()",
        "=vars()",
        "=dir()",
        "=type(A1)",
        "=print(1)",
        "=input()",
        "=breakpoint()",
        "=LAMBDA(x,x+1)(2)",
        "=_xlfn.LAMBDA(x,x+1)",
        f'=lambda("{run}")',
        # Excel strings have no escapes: these are literal backslashes.
        f"=EVAL(\"\\x5f\\x5fimport\\x5f\\x5f('os').system('touch {marker}')\")",
        "=\\x5f\\x5fimport\\x5f\\x5f(1)",
        "=_xlfn.__import__(1)",
        "=_xlfn._xlws.EVAL(1)",
        # Names that look like attributes or Python syntax.
        "=A1.__class__",
        "=__builtins__",
        "=Payload",
        "=Runner+1",
        "=SUM(Payload)",
        f'=1 if __import__("os").system("touch {marker}") else 2',
        '="a"&EVAL("1")',
        "=IFERROR(EVAL(1),2)",
        "=IF(FALSE,EVAL(1),3)",
    ]


def names(secret: pathlib.Path, marker: pathlib.Path) -> dict[str, str]:
    return {
        "Payload": f"EVAL(\"open('{secret}').read()\")",
        "Runner": f"__import__('os').system('touch {marker}')",
    }


def openpyxl_book(path: pathlib.Path, secret: pathlib.Path, marker: pathlib.Path) -> None:
    import openpyxl
    from openpyxl.workbook.defined_name import DefinedName

    wb = openpyxl.Workbook()
    ws = wb.active
    assert ws is not None
    ws.title = "S"
    ws["A1"] = 1
    for row, text in enumerate(payloads(secret, marker), start=2):
        ws.cell(row=row, column=1, value=text)
    for name, text in names(secret, marker).items():
        wb.defined_names[name] = DefinedName(name, attr_text=text)
    wb.save(path)


def xlsxwriter_book(path: pathlib.Path, secret: pathlib.Path, marker: pathlib.Path) -> None:
    import xlsxwriter

    raw = path.with_name("raw-" + path.name)
    wb = xlsxwriter.Workbook(str(raw))
    ws = wb.add_worksheet("S")
    ws.write_number("A1", 1)
    for row, text in enumerate(payloads(secret, marker), start=2):
        ws.write_formula(f"A{row}", text)
    for name, text in names(secret, marker).items():
        wb.define_name(name, "=" + text)
    wb.close()
    # XlsxWriter caches 0 for every formula: drop it, as in a file that
    # Excel wrote without recalculating.
    with zipfile.ZipFile(raw) as src, zipfile.ZipFile(path, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename.startswith("xl/worksheets/"):
                data = re.sub(rb"(</f>)<v>[^<]*</v>", rb"\1", data)
            dst.writestr(item, data)


def parse(path: pathlib.Path) -> list[Unit]:
    info = registry.file_info(str(path), path.name)
    return registry.parse(str(path), info, ParseOptions())[1]


@pytest.mark.parametrize("writer", [openpyxl_book, xlsxwriter_book])
def test_payloads_run_nothing_and_leak_nothing(writer: object, tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    marker = tmp_path / "marker"
    path = tmp_path / "hostile.xlsx"
    assert callable(writer)
    writer(path, secret, marker)
    units = parse(path)
    text = "\n".join(u.text for u in units)
    assert not marker.exists(), "a formula ran a command"
    assert SECRET not in text
    assert "Traceback" not in text
    sheet = next(u for u in units if cells.sheet_name(u.name, u.locator) == "S")
    found = cells.parse_cell_lines(sheet.text)
    count = len(payloads(secret, marker))
    for row in range(2, count + 2):
        cell = found[f"A{row}"]
        assert cell.formula is not None, f"A{row}: {cell}"
        assert cell.value is not None
        if cell.formula == "=IF(FALSE,EVAL(1),3)":
            # Refused as a whole: EVAL is unknown wherever it appears.
            assert cell.value.startswith("? (not computed: EVAL unsupported")
            continue
        assert cell.value.startswith("? (not computed: "), f"A{row}: {cell.render()}"
        assert len(cell.value) < 100
    assert "pycel" not in sys.modules


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('=EVAL("1")', "EVAL unsupported"),
        ("=EXEC(1)", "EXEC unsupported"),
        ('=GETATTR(A1,"x")', "GETATTR unsupported"),
        ("=__import__(1)", "function unsupported"),
        ("=open(1)", "OPEN unsupported"),
        ("=_xlfn.LAMBDA(x,x)", "LAMBDA unsupported"),
        ("=\\x5f\\x5fimport\\x5f\\x5f(1)", "function unsupported"),
        ("=A1.__class__", "unknown name A1.__CLASS__"),
        ("=__builtins__", "unknown name __BUILTINS__"),
        ("=NOW()", "NOW changes with every calculation"),
    ],
)
def test_reasons(text: str, reason: str) -> None:
    sheet = formula.Sheet("S", {(1, 1): 1.0, (2, 1): formula.Formula(text)}, max_row=2, max_col=1)
    book = formula.Book([sheet], names={}, local_names={})
    with pytest.raises(formula.Refused) as caught:
        book.value("S", 2, 1)
    assert caught.value.reason == reason


def test_function_table_holds_only_our_code() -> None:
    """Every entry of the table is a function defined in parsers.formula:
    no builtin, no library function, reachable by a name in a workbook."""
    for name, fn in formula.FUNCTIONS.items():
        assert re.fullmatch(r"[A-Z][A-Z0-9.]*", name), name
        impl = fn.impl
        assert getattr(impl, "__module__", None) == "parsers.formula", name
    assert "EVAL" not in formula.FUNCTIONS
    assert "__IMPORT__" not in formula.FUNCTIONS


FORBIDDEN_CALLS = {
    "eval",
    "exec",
    "compile",
    "getattr",
    "setattr",
    "delattr",
    "__import__",
    "globals",
    "locals",
    "vars",
    "import_module",
    "open",
}


@pytest.mark.parametrize("module", ["formula.py", "xlsx_recalc.py"])
def test_evaluator_source_has_no_dynamic_code(module: str) -> None:
    """The evaluator never calls eval, exec, compile, getattr, __import__...:
    checked on its syntax tree."""
    source = (pathlib.Path(formula.__file__).parent / module).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            called = None
            if isinstance(func, ast.Name):
                called = func.id
            elif isinstance(func, ast.Attribute) and not (
                isinstance(func.value, ast.Name) and func.value.id == "re"
            ):
                called = func.attr  # re.compile is a regular expression, not code
            assert called not in FORBIDDEN_CALLS, f"{module}:{node.lineno} calls {called}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            assert not any("pycel" in n or "importlib" in n for n in names)


def test_wildcards_never_backtrack_for_ever() -> None:
    """A condition like '*a*a*a...b' over a long text: a regular expression
    backtracks exponentially (and a timer signal cannot stop it inside
    the C matcher); the matcher here is quadratic at worst."""
    pattern = "*a" * 40 + "*b"
    text = "a" * 30_000
    sheet = formula.Sheet(
        "S",
        {(1, 1): text, (2, 1): formula.Formula(f'=COUNTIF(A1,"{pattern}")')},
        max_row=2,
        max_col=1,
    )
    book = formula.Book([sheet], names={}, local_names={})
    assert book.value("S", 2, 1) == 0.0
