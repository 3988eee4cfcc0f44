"""Values for formulas the file holds no cached value for (openpyxl saves none).

They are computed in the parse worker by ``parsers.formula``: our own
evaluator over a fixed table of Excel functions, which never turns formula
text into code.  What it cannot compute exactly as Excel and LibreOffice
would (an unknown or volatile function, a case where the two programs
differ, a circular reference) is shown as not computed, with the reason.
Bounded in cells, formulas and time.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import re
import signal
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NamedTuple

from openpyxl.utils.datetime import CALENDAR_MAC_1904, from_excel, to_excel
from openpyxl.worksheet.formula import ArrayFormula

from parsers import cells, formula
from parsers._common import describe, quiet

log = logging.getLogger(__name__)

# Beyond these the work is not started (the workbook is loaded whole):
# such cells are shown as not computed, with the reason.
MAX_WORKBOOK_CELLS = 200_000
MAX_FORMULAS = 5_000
TIME_BUDGET_S = 20.0


class Pending(NamedTuple):  # a tuple: one is made per formula without a value, cheaply
    ref: str  # the sheet as a cell address spells it
    coord: str
    fmt: cells.NumberFormat


def compute(
    stream: IO[bytes], pending: Sequence[Pending], *, total_cells: int, epoch: datetime.datetime
) -> list[str]:
    """The text shown after `` -> `` for each pending cell: a marked computed
    value, or a marked reason it was not computed."""
    if total_cells > MAX_WORKBOOK_CELLS:
        reason = f"workbook over {MAX_WORKBOOK_CELLS} cells"
        return [cells.not_computed(reason)] * len(pending)
    out: list[str] = []
    late = cells.not_computed(f"time limit of {TIME_BUDGET_S:g} s reached")
    try:
        with _deadline(TIME_BUDGET_S) as expired:
            try:
                with quiet():
                    book, sheets = _book(stream)
            except _Expired:
                raise
            except Exception as exc:  # openpyxl on a workbook it cannot load
                log.debug("recalc: cannot load the workbook", exc_info=True)
                return [cells.not_computed(f"formula engine: {describe(exc)}")] * len(pending)
            for i, cell in enumerate(pending):
                if i >= MAX_FORMULAS:
                    out.append(cells.not_computed(f"more than {MAX_FORMULAS} formulas to compute"))
                elif expired():
                    out.append(late)
                else:
                    out.append(_one(book, sheets, cell, epoch))
    except _Expired:  # one evaluation (or the load) ran past the budget
        pass
    return out + [late] * (len(pending) - len(out))


class _Expired(BaseException):
    """Raised from a timer signal: a BaseException, so that openpyxl's and
    our ``except Exception`` handlers let it through."""


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[Callable[[], bool]]:
    """A deadline checked between evaluations and, where this runs on the
    main thread (a parse worker), enforced inside one by SIGALRM: a single
    formula over a huge range must not use up the worker's whole timeout,
    which would fail the file instead of leaving one value uncomputed."""
    end = time.monotonic() + seconds
    # Never on top of someone else's timer (a test runner's timeout, say).
    armed = (
        threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, signal.SIG_IGN, None)
    )
    previous: Any = None
    if armed:

        def expire(_signum: int, _frame: Any) -> None:
            raise _Expired

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield lambda: time.monotonic() > end
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _book(stream: IO[bytes]) -> tuple[formula.Book, dict[str, str]]:
    """The workbook's cells and defined names, and each sheet's name by the
    way a cell address spells it."""
    import openpyxl

    wb = openpyxl.load_workbook(stream, keep_links=False)
    unescape = _Unescape(_spells_underscore(stream))
    sheets: list[formula.Sheet] = []
    local: dict[tuple[str, str], str] = {}
    for ws in wb.worksheets:
        content: dict[tuple[int, int], formula.Scalar | formula.Formula] = {}
        # The cells the file holds (iter_rows would create every empty one).
        for key, cell in ws._cells.items():
            value = _content(cell.value, cell.data_type, wb.epoch, unescape)
            if value is not None:
                content[key] = value
        hidden = frozenset(r for r, dim in ws.row_dimensions.items() if dim.hidden)
        sheets.append(
            formula.Sheet(
                ws.title,
                content,
                max_row=max((r for r, _ in content), default=0),
                max_col=max((c for _, c in content), default=0),
                hidden_rows=hidden,
            )
        )
        for name, defined in ws.defined_names.items():
            if defined.value:
                local[(ws.title, name)] = defined.value
    names = {
        name: defined.value
        for name, defined in wb.defined_names.items()
        if defined.value and not name.startswith("_xlnm.")
    }
    book = formula.Book(
        sheets,
        names=names,
        local_names=local,
        date1904=wb.epoch == CALENDAR_MAC_1904,
    )
    return book, {cells.sheet_ref(s.name): s.name for s in sheets}


def _content(
    value: object,
    data_type: str,
    epoch: datetime.datetime,
    unescape: Callable[[str], str | formula.Formula] | None = None,
) -> formula.Scalar | formula.Formula | None:
    """A cell as the evaluator takes it: dates as their serial numbers."""
    if value is None:
        return None
    if data_type == "f":
        if isinstance(value, str):
            return formula.Formula(value)
        if isinstance(value, ArrayFormula) and value.text:
            return formula.Formula(value.text, array=True)
        return formula.Formula("", refused="data-table formula")
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        number = float(value)
        if math.isinf(number) or math.isnan(number):  # only a hostile file holds one
            return formula.Formula("", refused="a cell holds a number that is not finite")
        return number
    if isinstance(value, datetime.datetime | datetime.date | datetime.time | datetime.timedelta):
        if (
            epoch != CALENDAR_MAC_1904
            and isinstance(value, datetime.date)
            and (value.year, value.month, value.day) == (1900, 2, 28)
        ):
            # openpyxl reads Excel's 29 February 1900 (60) as the 28th (59).
            reason = "a date of 28 or 29 February 1900 (Excel's leap day)"
            return formula.Formula("", refused=reason)
        return formula.DateSerial(to_excel(value, epoch))
    if data_type == "e":
        return formula.ERRORS.get(str(value), formula.XlError(str(value)))
    return str(value) if unescape is None else unescape(str(value))


# The file spells a control character as _x0001_, and text that reads
# "_x0001_" as _x005F_x0001_; openpyxl leaves the first as it is and turns
# the second into the first.
_ESCAPE = re.compile(r"_x([0-9A-Fa-f]{4})_")


class _Unescape:
    """Text as Excel reads it: an escape is the character it names, unless
    the file also spells "_x" literally, which openpyxl reads alike."""

    def __init__(self, ambiguous: bool) -> None:
        self.ambiguous = ambiguous

    def __call__(self, text: str) -> str | formula.Formula:
        if "_x" not in text or not _ESCAPE.search(text):
            return text
        if self.ambiguous:
            return formula.Formula("", refused="text with an _x..._ escape that reads two ways")
        return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def _spells_underscore(stream: IO[bytes]) -> bool:
    """Whether a part that holds cell text spells "_x" as _x005F_x (each
    part read whole, as openpyxl has just done: their sizes were checked
    when the file was opened, and the workbook's cells are bounded)."""
    stream.seek(0)
    with zipfile.ZipFile(stream) as zf:
        return any(
            b"_x005F_" in zf.read(info)
            for info in zf.infolist()
            if info.filename == "xl/sharedStrings.xml"
            or info.filename.startswith("xl/worksheets/sheet")
        )


def _one(
    book: formula.Book, sheets: dict[str, str], cell: Pending, epoch: datetime.datetime
) -> str:
    from openpyxl.utils.cell import coordinate_to_tuple

    name = sheets.get(cell.ref)
    if name is None:
        return cells.not_computed("sheet not found")
    row, col = coordinate_to_tuple(cell.coord)
    try:
        value = book.value(name, row, col)
    except formula.Refused as exc:
        return cells.not_computed(exc.reason)
    except RecursionError:
        return cells.not_computed("formula nested too deeply")
    except Exception:  # a bug of ours: the cell is left, never the file
        log.warning("recalc: %s!%s failed", cell.ref, cell.coord, exc_info=True)
        return cells.not_computed("formula engine error")
    return cells.computed(_shown(value, cell.fmt, epoch))


def _shown(value: formula.Scalar, fmt: cells.NumberFormat, epoch: datetime.datetime) -> str:
    if isinstance(value, formula.XlError):
        return value.code
    if isinstance(value, str):
        return cells.format_value(value)
    if isinstance(value, bool):
        return cells.format_value(value)
    number = value if isinstance(value, float) else 0.0  # an empty cell reads 0
    if fmt.has_date or fmt.has_time:
        with contextlib.suppress(OverflowError, ValueError):
            return cells.format_value(from_excel(number, epoch), fmt)
    return cells.format_value(float(number), fmt)
