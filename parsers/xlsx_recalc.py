"""Values for formulas the file holds no cached value for (openpyxl saves none).

pycel evaluates them in the parse worker: it compiles each formula it needs
(and only those: the cells a pending formula depends on) to Python, knows
some 200 Excel functions, and raises ``UnknownFunction`` for the rest, so a
formula it cannot evaluate is reported as such instead of guessed.

Measured on one 4,000-formula workbook saved by openpyxl, on a busy 2-core
machine: pycel 24 s; the ``formulas`` package 43 s; LibreOffice headless
(``--convert-to xlsx``) 5.8 s for the whole workbook but at least a second
of start-up per file, a profile directory per worker and a process outside
the worker's own memory accounting.  Workbooks an agent edits are small, so
pycel, bounded in cells, formulas and time, is the better fit here.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, NamedTuple

from parsers import cells
from parsers._common import describe, quiet

log = logging.getLogger(__name__)

# Beyond these the work is not started (the workbook is loaded whole, every
# formula compiled): such cells are shown as not computed, with the reason.
MAX_WORKBOOK_CELLS = 200_000
MAX_FORMULAS = 5_000
TIME_BUDGET_S = 20.0

_VOLATILE = re.compile(r"\b(TODAY|NOW|RAND|RANDBETWEEN|RANDARRAY)\s*\(", re.IGNORECASE)
_UNKNOWN = re.compile(r"Function (\w[\w.]*) is not implemented")


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
    pycel_log = logging.getLogger("pycel")
    level, pycel_log.disabled = pycel_log.disabled, True
    try:
        # Imported before the timer is armed: an import cut short by it could
        # leave a half-initialised module behind for the next parse.
        import pycel  # noqa: F401
        import pycel.excelformula  # noqa: F401

        with _deadline(TIME_BUDGET_S) as expired:
            try:
                with quiet():
                    compiler = _compiler(stream)
            except _Expired:
                raise
            except Exception as exc:  # pycel or openpyxl on a workbook they cannot load
                log.debug("recalc: cannot load the workbook", exc_info=True)
                return [cells.not_computed(f"formula engine: {describe(exc)}")] * len(pending)
            for i, cell in enumerate(pending):
                if i >= MAX_FORMULAS:
                    out.append(cells.not_computed(f"more than {MAX_FORMULAS} formulas to compute"))
                elif expired():
                    out.append(late)
                else:
                    out.append(_one(compiler, cell, epoch))
    except _Expired:  # one evaluation (or the load) ran past the budget
        pass
    finally:
        pycel_log.disabled = level
    return out + [late] * (len(pending) - len(out))


class _Expired(BaseException):
    """Raised from a timer signal: a BaseException, so that the engine's and
    pycel's ``except Exception`` handlers let it through."""


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


def _compiler(stream: IO[bytes]) -> Any:
    import openpyxl
    from pycel import ExcelCompiler

    wb = openpyxl.load_workbook(stream, keep_links=False)
    compiler = ExcelCompiler(excel=wb)
    # Tracing each value's precedents for volatile functions is only needed
    # when the workbook has one at all.
    compiler.swfs_has_volatile = any(
        isinstance(c.value, str) and _VOLATILE.search(c.value)
        for ws in wb.worksheets
        for row in ws.iter_rows()
        for c in row
        if c.data_type == "f"
    )
    return compiler


def _one(compiler: Any, cell: Pending, epoch: datetime.datetime) -> str:
    from pycel.excelformula import UnknownFunction

    address = f"{cell.ref}!{cell.coord}"
    try:
        with quiet():
            value = compiler.evaluate(address)
    except UnknownFunction as exc:
        m = _UNKNOWN.search(str(exc))
        return cells.not_computed(f"{m[1]} unsupported" if m else "unsupported function")
    except RecursionError:
        return cells.not_computed("circular reference")
    except Exception as exc:  # pycel's own errors: parse failures, unsupported forms
        text = str(exc)
        m = _UNKNOWN.search(text)
        if m:
            return cells.not_computed(f"{m[1]} unsupported")
        return cells.not_computed(describe(exc).split(" Traceback", 1)[0])
    volatile = _volatile(compiler, address)
    if volatile:
        # The value depends on when it is computed; a parse is kept for as
        # long as the file's bytes stay the same, so it would soon be wrong.
        return cells.not_computed(f"{volatile} changes with every calculation")
    return cells.computed(_shown(value, cell.fmt, epoch))


def _volatile(compiler: Any, address: str) -> str | None:
    """The first volatile function (TODAY, NOW, RAND...) the cell's value
    depends on, through any chain of cells; None when there is none."""
    import networkx

    node = compiler.cell_map.get(address)
    if node is None or not getattr(compiler, "swfs_has_volatile", True):
        return None
    for cell in (node, *networkx.ancestors(compiler.dep_graph, node)):
        formula = getattr(getattr(cell, "formula", None), "base_formula", None)
        if formula:
            m = _VOLATILE.search(formula)
            if m:
                return m[1].upper()
    return None


def _shown(value: Any, fmt: cells.NumberFormat, epoch: datetime.datetime) -> str:
    if isinstance(value, tuple):  # a range or array result: Excel shows its first item
        while isinstance(value, tuple) and value:
            value = value[0]
    if value is None:
        value = 0  # a reference to an empty cell reads 0
    if (
        (fmt.has_date or fmt.has_time)
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    ):
        from openpyxl.utils.datetime import from_excel

        with contextlib.suppress(OverflowError, ValueError):
            value = from_excel(value, epoch)
    return cells.format_value(value, fmt)
