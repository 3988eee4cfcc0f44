"""Excel formulas evaluated without ever running code.

A formula is split into tokens by openpyxl's ``Tokenizer``, parsed into a
tree of frozen dataclasses and evaluated by walking that tree.  Function
names are keys of one fixed table (``FUNCTIONS``); a name that is not a key
is refused.  No text from a workbook (formula, defined name, cell value)
ever becomes Python source, reaches ``eval``/``exec``/``compile``, or names
an attribute: the only thing text selects is an entry of a dict we wrote.

Every value computed here must be the one Excel and LibreOffice would
cache.  Where they differ, or where Excel's exact rule is not known here
(text to number conversions that depend on the locale, the collation of
text, a snap of a near-zero difference that LibreOffice makes and Excel
does not, TRUE counted as 1 by LibreOffice only...), the formula is
refused with a short reason (``Refused``), never guessed.
"""

from __future__ import annotations

import datetime
import math
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_UP, ROUND_UP, Context, Decimal
from typing import TypeAlias

from openpyxl.formula.tokenizer import Token, Tokenizer, TokenizerError

MAX_ROW = 1_048_576
MAX_COL = 16_384
MAX_FORMULA_CHARS = 8_192  # Excel's own limit
MAX_NESTING = 64  # Excel's limit on nested functions
MAX_ARRAY_CELLS = 100_000  # elements of one array operation (SUMPRODUCT)
MAX_CELL_READS = 20_000_000  # per workbook: a bound on the work, beside the time
MAX_TEXT = 32_767  # Excel's longest text
MAX_SERIAL = 2_958_465  # 9999-12-31, Excel's last date


class Refused(Exception):
    """The formula is not computed; ``reason`` says why in a few words.

    Refusals are kept per cell and per formula text as new instances
    without a traceback, and raised anew each time: one instance raised
    again and again would keep every frame it went through."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- values


@dataclass(frozen=True, slots=True)
class XlError:
    code: str  # '#DIV/0!'

    def __str__(self) -> str:
        return self.code


class _Blank:
    """An empty cell: 0 to arithmetic, "" to text."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BLANK"


BLANK = _Blank()


class DateSerial(float):
    """A cell that holds a date or time (a number shown as one).  LibreOffice
    averages and multiplies such cells by rules of its own."""

    __slots__ = ()


DIV0 = XlError("#DIV/0!")
NA = XlError("#N/A")
NUM = XlError("#NUM!")
REF = XlError("#REF!")
VALUE = XlError("#VALUE!")
ERRORS = {e.code: e for e in (DIV0, NA, NUM, REF, VALUE, XlError("#NAME?"), XlError("#NULL!"))}

Scalar: TypeAlias = float | str | bool | XlError | _Blank


@dataclass(frozen=True, slots=True)
class Area:
    """A rectangle of cells on one sheet (1-based, inclusive)."""

    sheet: str  # the sheet's name, exactly
    r1: int
    c1: int
    r2: int
    c2: int

    @property
    def rows(self) -> int:
        return self.r2 - self.r1 + 1

    @property
    def cols(self) -> int:
        return self.c2 - self.c1 + 1


Grid: TypeAlias = list[list[Scalar]]

# -- the tree


@dataclass(frozen=True, slots=True)
class Const:
    value: Scalar


@dataclass(frozen=True, slots=True)
class Ref:
    sheet: str | None  # None: the formula's own sheet
    r1: int
    c1: int
    r2: int
    c2: int


@dataclass(frozen=True, slots=True)
class Name:
    name: str  # upper case
    sheet: str | None  # 'Sheet1!Total'


@dataclass(frozen=True, slots=True)
class Call:
    name: str  # a key of FUNCTIONS
    args: tuple[Node | None, ...]  # None: an argument left out, as in IF(A1,,2)


@dataclass(frozen=True, slots=True)
class Unary:
    op: str  # '-', '+' or '%'
    operand: Node


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class ArrayConst:
    rows: tuple[tuple[Scalar, ...], ...]


Node: TypeAlias = Const | Ref | Name | Call | Unary | Binary | ArrayConst

# -- parsing

_INFIX = {
    "^": (5, True),  # right: Excel evaluates 2^3^2 left to right, handled below
    "*": (4, False),
    "/": (4, False),
    "+": (3, False),
    "-": (3, False),
    "&": (2, False),
    "=": (1, False),
    "<>": (1, False),
    "<": (1, False),
    ">": (1, False),
    "<=": (1, False),
    ">=": (1, False),
}
_PREFIX_POWER = 6  # -2^2 is 4 in Excel: negation binds tighter than ^
_CELL = re.compile(r"\$?([A-Za-z]{1,3})\$?([0-9]{1,7})")
_COLS = re.compile(r"\$?([A-Za-z]{1,3}):\$?([A-Za-z]{1,3})")
_ROWS = re.compile(r"\$?([0-9]{1,7}):\$?([0-9]{1,7})")
_NAME = re.compile(r"[A-Za-z_\\][A-Za-z0-9_.\\]*")
_UNQUOTED_SHEET = re.compile(r"[\w.]+")


def _col_number(letters: str) -> int:
    n = 0
    for ch in letters.upper():
        n = n * 26 + (ord(ch) - 64)
    return n


def _cell(text: str) -> tuple[int, int] | None:
    m = _CELL.fullmatch(text)
    if not m:
        return None
    col, row = _col_number(m[1]), int(m[2])
    if not (1 <= col <= MAX_COL and 1 <= row <= MAX_ROW):
        return None
    return row, col


def _reference(text: str) -> Ref | Name:
    """An operand token of subtype RANGE: a cell, a range or a defined name."""
    sheet: str | None = None
    if "!" in text:
        if text.startswith("'"):
            end = text.rfind("'!")
            if end <= 0:
                raise Refused("unreadable reference")
            sheet = text[1:end].replace("''", "'")
            rest = text[end + 2 :]
        else:
            sheet, rest = text.split("!", 1)
            if not _UNQUOTED_SHEET.fullmatch(sheet):
                # '[1]Sheet1' (another file), 'Sheet1:Sheet3' (3-D)...
                raise Refused("reference to another file or to several sheets")
    else:
        rest = text
    if "[" in rest or "#" in rest:
        raise Refused("table or broken reference")
    parts = rest.split(":")
    if len(parts) == 1:
        cell = _cell(rest)
        if cell:
            return Ref(sheet, cell[0], cell[1], cell[0], cell[1])
        if _NAME.fullmatch(rest) and not re.fullmatch(r"[Rr][0-9]*[Cc][0-9]*", rest):
            return Name(rest.upper(), sheet)
        raise Refused("unreadable reference")
    if len(parts) == 2:
        a, b = _cell(parts[0]), _cell(parts[1])
        if a and b:
            return Ref(sheet, min(a[0], b[0]), min(a[1], b[1]), max(a[0], b[0]), max(a[1], b[1]))
        m = _COLS.fullmatch(rest)
        if m:
            c1, c2 = sorted((_col_number(m[1]), _col_number(m[2])))
            if c2 <= MAX_COL:
                return Ref(sheet, 1, c1, MAX_ROW, c2)
        m = _ROWS.fullmatch(rest)
        if m:
            r1, r2 = sorted((int(m[1]), int(m[2])))
            if r1 >= 1 and r2 <= MAX_ROW:
                return Ref(sheet, r1, 1, r2, MAX_COL)
    raise Refused("unreadable reference")


def _operand(token: Token) -> Node:
    value, sub = token.value, token.subtype
    if sub == Token.NUMBER:
        try:
            number = float(value)
        except ValueError:
            raise Refused("unreadable number") from None
        if math.isinf(number) or math.isnan(number):
            raise Refused("number too large")
        return Const(number)
    if sub == Token.TEXT:
        return Const(value[1:-1].replace('""', '"'))
    if sub == Token.LOGICAL:
        return Const(value.upper() == "TRUE")
    if sub == Token.ERROR:
        error = ERRORS.get(value.upper())
        if error is None:
            raise Refused("unknown error value")
        return Const(error)
    return _reference(value)


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.at = 0
        self.depth = 0

    def peek(self) -> Token | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            raise Refused("incomplete formula")
        self.at += 1
        return token

    def expression(self, min_power: int = 0) -> Node:
        self.depth += 1
        if self.depth > MAX_NESTING + 36:
            raise Refused("formula nested too deeply")
        left = self.prefix()
        while True:
            token = self.peek()
            if token is None:
                break
            if token.type == Token.OP_POST:
                if token.value != "%":
                    raise Refused(f"operator {token.value} unsupported")
                self.take()
                left = Unary("%", left)
                continue
            if token.type != Token.OP_IN:
                break
            op = token.value
            if op not in _INFIX:
                # ':' between a reference and a function, ',' as union...
                raise Refused(f"operator {op.strip() or 'intersection'} unsupported")
            power, _ = _INFIX[op]
            if power < min_power:
                break
            self.take()
            # Every Excel binary operator is left-associative (2^3^2 = 64).
            right = self.expression(power + 1)
            left = Binary(op, left, right)
        self.depth -= 1
        return left

    def prefix(self) -> Node:
        token = self.take()
        if token.type == Token.OP_PRE:
            operand = self.expression(_PREFIX_POWER)
            if token.value == "-":
                return Unary("-", operand)
            if token.value == "+":
                return Unary("+", operand)
            raise Refused(f"operator {token.value} unsupported")
        if token.type == Token.OPERAND:
            return _operand(token)
        if token.type == Token.PAREN and token.subtype == Token.OPEN:
            inner = self.expression()
            close = self.take()
            if close.type != Token.PAREN or close.subtype != Token.CLOSE:
                raise Refused("union of ranges unsupported")
            return inner
        if token.type == Token.FUNC and token.subtype == Token.OPEN:
            return self.call(token.value[:-1])
        if token.type == Token.ARRAY and token.subtype == Token.OPEN:
            return self.array()
        raise Refused("unreadable formula")

    def call(self, raw: str) -> Node:
        name = raw.upper()
        prefixed = False
        for prefix in ("_XLFN._XLWS.", "_XLFN.", "_XLWS."):
            if name.startswith(prefix):
                name = name[len(prefix) :]
                prefixed = True
                break
        if name in _FUTURE and not prefixed:
            # Excel writes functions newer than 2010 as _xlfn.NAME; without
            # the prefix LibreOffice does not know them.
            raise Refused(f"{name} without its _xlfn. prefix")
        if name in _VOLATILE:
            if name in ("NOW", "TODAY") or name.startswith("RAND"):
                raise Refused(f"{name} changes with every calculation")
            raise Refused(f"{name} unsupported (volatile)")
        if name not in FUNCTIONS:
            shown = name if re.fullmatch(r"[A-Z][A-Z0-9._]{0,63}", name) else "function"
            raise Refused(f"{shown} unsupported")
        self.depth += 1
        if self.depth > MAX_NESTING + 36:
            raise Refused("formula nested too deeply")
        args: list[Node | None] = []
        token = self.peek()
        if token is not None and token.type == Token.FUNC and token.subtype == Token.CLOSE:
            self.take()
        else:
            while True:
                token = self.peek()
                if token is not None and (
                    (token.type == Token.SEP and token.subtype == Token.ARG)
                    or (token.type == Token.FUNC and token.subtype == Token.CLOSE)
                ):
                    args.append(None)
                else:
                    args.append(self.expression())
                token = self.take()
                if token.type == Token.SEP and token.subtype == Token.ARG:
                    continue
                if token.type == Token.FUNC and token.subtype == Token.CLOSE:
                    break
                raise Refused("unreadable formula")
        self.depth -= 1
        spec = FUNCTIONS[name]
        if not spec.min_args <= len(args) <= spec.max_args:
            raise Refused(f"{name} with {len(args)} arguments")
        return Call(name, tuple(args))

    def array(self) -> Node:
        rows: list[tuple[Scalar, ...]] = []
        row: list[Scalar] = []
        while True:
            token = self.take()
            sign = 1.0
            if token.type == Token.OP_PRE and token.value in "-+":
                sign = -1.0 if token.value == "-" else 1.0
                token = self.take()
            if token.type != Token.OPERAND or token.subtype == Token.RANGE:
                raise Refused("unreadable array constant")
            node = _operand(token)
            assert isinstance(node, Const)
            value = node.value
            if sign < 0:
                if not isinstance(value, float):
                    raise Refused("unreadable array constant")
                value = -value
            row.append(value)
            token = self.take()
            if token.type == Token.SEP and token.subtype == Token.ARG:
                continue
            rows.append(tuple(row))
            row = []
            if token.type == Token.SEP and token.subtype == Token.ROW:
                continue
            if token.type == Token.ARRAY and token.subtype == Token.CLOSE:
                break
            raise Refused("unreadable array constant")
        if len({len(r) for r in rows}) != 1:
            raise Refused("unreadable array constant")
        return ArrayConst(tuple(rows))


def parse(formula: str) -> Node:
    """The tree of a formula (with or without its leading '='); raises Refused."""
    if len(formula) > MAX_FORMULA_CHARS:
        raise Refused("formula too long")
    text = formula if formula.startswith("=") else "=" + formula
    try:
        raw = Tokenizer(text).items
    except (TokenizerError, ValueError, IndexError):
        raise Refused("unreadable formula") from None
    tokens: list[Token] = []
    for i, token in enumerate(raw):
        if token.type == Token.WSPACE:
            before = raw[i - 1] if i else None
            after = raw[i + 1] if i + 1 < len(raw) else None
            if (
                before is not None
                and after is not None
                and (before.type == Token.OPERAND or before.subtype == Token.CLOSE)
                and (after.type in (Token.OPERAND, Token.FUNC) and after.subtype != Token.CLOSE)
            ):
                raise Refused("intersection operator unsupported")
            continue
        tokens.append(token)
    if not tokens:
        raise Refused("empty formula")
    parser = _Parser(tokens)
    node = parser.expression()
    if parser.peek() is not None:
        raise Refused("unreadable formula")
    return node


# -- the workbook as the evaluator sees it


@dataclass(frozen=True, slots=True)
class Formula:
    text: str
    refused: str | None = None  # a data-table formula, say
    array: bool = False  # entered as an array formula ({=SUM(A1:A3*B1:B3)})


@dataclass
class Sheet:
    name: str
    cells: dict[tuple[int, int], Scalar | Formula]
    max_row: int = 0
    max_col: int = 0
    hidden_rows: frozenset[int] = frozenset()


class Book:
    """Cells, defined names and the date system; results are kept per cell."""

    def __init__(
        self,
        sheets: Sequence[Sheet],
        *,
        names: dict[str, str],
        local_names: dict[tuple[str, str], str],
        date1904: bool = False,
    ) -> None:
        self.sheets = {s.name: s for s in sheets}
        self.folded = {s.name.lower(): s for s in sheets}
        self.names = {k.upper(): v for k, v in names.items()}
        self.local_names = {(s, k.upper()): v for (s, k), v in local_names.items()}
        self.date1904 = date1904
        self.results: dict[tuple[str, int, int], Scalar | Refused] = {}
        self.trees: dict[str, Node | Refused] = {}
        self.name_trees: dict[str, Node | Refused] = {}
        self.busy: set[tuple[str, int, int]] = set()
        self.steps = 0

    def sheet(self, name: str) -> Sheet:
        found = self.sheets.get(name) or self.folded.get(name.lower())
        if found is None:
            raise Refused("reference to a missing sheet")
        return found

    def tree(self, text: str) -> Node:
        tree = self.trees.get(text)
        if tree is None:
            try:
                tree = parse(text)
            except Refused as exc:
                tree = Refused(exc.reason)
            self.trees[text] = tree
        if isinstance(tree, Refused):
            raise Refused(tree.reason)
        return tree

    def value(self, sheet: str, row: int, col: int) -> Scalar:
        """A cell's value, its formula computed first; raises Refused."""
        key = (sheet, row, col)
        done = self.results.get(key)
        if done is not None:
            if isinstance(done, Refused):
                raise Refused(done.reason)
            return done
        # Cells are computed depth first; a long chain (A2=A1+1, A3=A2+1...)
        # is computed from its far end: a cell found too deep is computed on
        # its own first, then the one that needed it is tried again.
        waiting: list[tuple[str, int, int]] = [key]
        while waiting:
            top = waiting[-1]
            if top in self.results:  # computed on the way to another cell
                waiting.pop()
                continue
            try:
                result: Scalar | Refused = self._compute(top, depth=0)
            except _TooDeep as deep:
                if deep.key in waiting:
                    result = Refused("circular reference")
                    for k in waiting:
                        self.results[k] = result
                    break
                waiting.append(deep.key)
                continue
            except Refused as exc:
                result = Refused(exc.reason)  # without the frames it was raised through
            self.results[top] = result
            waiting.pop()
        done = self.results[key]
        if isinstance(done, Refused):
            raise Refused(done.reason)
        return done

    def _cell_value(self, key: tuple[str, int, int], depth: int) -> Scalar:
        done = self.results.get(key)
        if done is not None:
            if isinstance(done, Refused):
                raise Refused(done.reason)
            return done
        if depth > _MAX_CELL_DEPTH:
            raise _TooDeep(key)
        try:
            result: Scalar | Refused = self._compute(key, depth)
        except Refused as exc:
            result = Refused(exc.reason)  # without the frames it was raised through
        self.results[key] = result
        if isinstance(result, Refused):
            raise Refused(result.reason)
        return result

    def _compute(self, key: tuple[str, int, int], depth: int) -> Scalar:
        sheet, row, col = key
        content = self.sheets[sheet].cells.get((row, col), BLANK)
        if not isinstance(content, Formula):
            return content
        if content.refused is not None:
            raise Refused(content.refused)
        if key in self.busy:
            raise Refused("circular reference")
        self.busy.add(key)
        try:
            ctx = _Context(self, sheet, row, col, depth)
            tree = self.tree(content.text)
            return ctx.top_array(tree) if content.array else ctx.top(tree)
        finally:
            self.busy.discard(key)


_MAX_CELL_DEPTH = 24


class _TooDeep(Exception):
    def __init__(self, key: tuple[str, int, int]) -> None:
        super().__init__()
        self.key = key


# -- conversions


# No two ways to split a run of digits: a long one must not backtrack.
_PLAIN = re.compile(r"\s*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*")


_DATE_WORDS = re.compile(
    r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|am|pm|[ape]"
)
_NUMBER_LIKE = re.compile(r"[0-9\s\-/.:,%$\u20ac\u00a3\u00a5()+]*")


def might_be_number(text: str) -> bool:
    """Whether Excel or LibreOffice could read the text as a number, a
    date, a time, a currency or a percentage (by the locale's rules)."""
    if not any(ch.isdigit() for ch in text):
        return False
    return _NUMBER_LIKE.fullmatch(_DATE_WORDS.sub("", text.lower())) is not None


def text_to_number(text: str) -> float | XlError:
    """Text used as a number: plain decimal numbers only.  Excel and
    LibreOffice also read dates, currencies, percentages and thousands
    separators, by the locale: refused rather than guessed."""
    if _PLAIN.fullmatch(text):
        value = float(text)
        if math.isinf(value):
            return VALUE
        return value
    if might_be_number(text):
        raise Refused("text read as a number depends on the locale")
    return VALUE


def to_number(v: Scalar) -> float | XlError:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, float):
        return v
    if isinstance(v, _Blank):
        return 0.0
    if isinstance(v, XlError):
        return v
    return text_to_number(v)


def number_to_text(x: float) -> str:
    """A number as Excel turns it into text (15 significant digits).
    Very large or very small numbers are written differently by Excel
    (1E+15) and LibreOffice (1000000000000000): refused."""
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    if 1e-4 <= abs(x) < 1e15:
        # Only numbers whose shortest form has at most 15 digits: rounding
        # to 15 digits is where Excel and LibreOffice part ways.
        text = repr(x)
        digits = text.replace("-", "").replace(".", "").lstrip("0")
        if "e" not in text and len(digits) <= 15:
            return text
    raise Refused("number as text: Excel and LibreOffice write it differently")


def to_text(v: Scalar) -> str | XlError:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        raise Refused("TRUE/FALSE as text: Excel and LibreOffice differ")
    if isinstance(v, float):
        return number_to_text(v)
    if isinstance(v, _Blank):
        return ""
    return v


def to_bool(v: Scalar) -> bool | XlError:
    if isinstance(v, bool):
        return v
    if isinstance(v, float):
        return v != 0
    if isinstance(v, _Blank):
        return False
    if isinstance(v, XlError):
        return v
    upper = v.upper()
    if upper == "TRUE":
        return True
    if upper == "FALSE":
        return False
    if might_be_number(v):
        raise Refused("text read as TRUE/FALSE: LibreOffice reads the number in it")
    return VALUE


def _too_long() -> str:
    # Excel: #VALUE!; LibreOffice allows longer texts.
    raise Refused("text longer than Excel allows")


def _finite(x: float) -> float | XlError:
    if math.isnan(x) or math.isinf(x):
        return NUM
    return x


def _approx_zero(total: float, a: float, b: float) -> bool:
    """LibreOffice's approxAdd: a sum that cancels to within 2**-48 of
    its operands reads 0."""
    return total != 0 and abs(total) < max(abs(a), abs(b)) * 2.0**-48


def _ascii_word(text: str) -> bool:
    return all(ch.isascii() and (ch.isalnum() or ch == " ") for ch in text)


def _text_equal(a: str, b: str) -> bool:
    if a.lower() == b.lower():
        return True
    if a.isascii() and b.isascii():
        return False
    na = unicodedata.normalize("NFKD", a).casefold()
    nb = unicodedata.normalize("NFKD", b).casefold()
    if na == nb or _strip_marks(na) == _strip_marks(nb):
        raise Refused("comparison of accented text")
    return False


def _strip_marks(text: str) -> str:
    return "".join(ch for ch in text if not unicodedata.combining(ch))


def _rank(v: Scalar) -> int:
    # Excel orders numbers < text < logical values.
    if isinstance(v, float):
        return 0
    if isinstance(v, str):
        return 1
    return 2


def compare(op: str, a: Scalar, b: Scalar) -> bool | XlError:
    if isinstance(a, XlError):
        return a
    if isinstance(b, XlError):
        return b
    if isinstance(a, _Blank):
        a = _blank_like(b)
    if isinstance(b, _Blank):
        b = _blank_like(a)
    if (isinstance(a, bool) or isinstance(b, bool)) and type(a) is not type(b):
        # LibreOffice keeps TRUE as the number 1, Excel as a type of its own.
        raise Refused("TRUE/FALSE compared with a number or text")
    if _rank(a) != _rank(b):
        # A number never equals a text, and is less than any.
        return _ordered(op, -1 if _rank(a) < _rank(b) else 1)
    if isinstance(a, str):
        assert isinstance(b, str)
        if op in ("=", "<>"):
            eq = _text_equal(a, b)
            return eq if op == "=" else not eq
        if not (_ascii_word(a) and _ascii_word(b)):
            raise Refused("text order depends on the collation")
        la, lb = a.lower(), b.lower()
        return _ordered(op, (la > lb) - (la < lb))
    if not (isinstance(a, float | bool) and isinstance(b, float | bool)):
        raise Refused("values that cannot be compared")
    x, y = float(a), float(b)
    if x == y or (x != y and abs(x - y) < max(abs(x), abs(y)) * 2.0**-48):
        if x != y:
            raise Refused("numbers equal only to the last bits")
        return _ordered(op, 0)
    return _ordered(op, 1 if x > y else -1)


def _blank_like(other: Scalar) -> Scalar:
    if isinstance(other, str):
        return ""
    if isinstance(other, bool):
        return False
    return 0.0


def _ordered(op: str, sign: int) -> bool:
    if op == "=":
        return sign == 0
    if op == "<>":
        return sign != 0
    if op == "<":
        return sign < 0
    if op == ">":
        return sign > 0
    if op == "<=":
        return sign <= 0
    return sign >= 0


def arithmetic(op: str, a: Scalar, b: Scalar, *, final: bool = False) -> Scalar:
    if isinstance(a, XlError) and isinstance(b, XlError) and a != b:
        # Excel answers the left one; LibreOffice at times the right one.
        raise Refused("two different errors in one operation")
    if op == "&":
        ta = to_text(a)
        if isinstance(ta, XlError):
            return ta
        tb = to_text(b)
        if isinstance(tb, XlError):
            return tb
        if len(ta) + len(tb) > MAX_TEXT:
            _too_long()
        return ta + tb
    if op in ("=", "<>", "<", ">", "<=", ">="):
        return compare(op, a, b)
    x = to_number(a)
    y = to_number(b)
    if isinstance(x, XlError):
        if isinstance(b, XlError) and not isinstance(a, XlError) and b != x:
            # "a"+#N/A: Excel's answer is not known here; LibreOffice's is #N/A.
            raise Refused("text and an error in one operation")
        return x
    if isinstance(y, XlError):
        return y
    if op == "+" or op == "-":
        total = x + y if op == "+" else x - y
        if _approx_zero(total, x, y):
            # LibreOffice snaps every such sum to 0, Excel only the formula's last.
            if not final:
                raise Refused("difference of nearly equal numbers")
            return 0.0
        return _finite(total)
    if op == "*":
        return _finite(x * y)
    if op == "/":
        if y == 0:
            return DIV0
        return _finite(x / y)
    if op == "^":
        if x == 0 and y == 0:
            raise Refused("0^0: Excel and LibreOffice differ")
        if x == 0 and y < 0:
            raise Refused("0 to a negative power: Excel #DIV/0!, LibreOffice #NUM!")
        if x < 0 and not y.is_integer():
            # Excel: #NUM!; LibreOffice takes odd roots ((-8)^(1/3) = -2).
            raise Refused("fractional power of a negative number")
        try:
            power = math.pow(x, y)
        except (OverflowError, ValueError):
            return NUM
        if power == 0 and x != 0:
            raise Refused("power too small for a number: the programs differ")
        return _finite(power)
    raise Refused(f"operator {op} unsupported")


# -- evaluation


class _Context:
    """One formula being computed: its cell, and how deep it is."""

    __slots__ = ("array_arg", "book", "col", "depth", "names", "row", "sheet")

    def __init__(self, book: Book, sheet: str, row: int, col: int, depth: int) -> None:
        self.book = book
        self.sheet = sheet
        self.row = row
        self.col = col
        self.depth = depth
        # Inside an argument that takes a range (SUM's), an expression over
        # a range is an array operation in one program and an implicit
        # intersection in the other: refused there.
        self.array_arg = False
        self.names = 0  # defined names being expanded, one inside another

    def top(self, node: Node) -> Scalar:
        if isinstance(node, Binary) and node.op in ("+", "-"):
            return arithmetic(node.op, self.scalar(node.left), self.scalar(node.right), final=True)
        return self.scalar(node)

    def top_array(self, node: Node) -> Scalar:
        """An array formula: one aggregate over element-wise operations
        ({=SUM(A1:A3*B1:B3)}), or one that needs no array at all."""
        if not (isinstance(node, Call) and node.name in _ARRAY_AGGREGATES):
            # Without a range where one value is expected, an array formula
            # has the value of the plain one (XlsxWriter writes SWITCH so).
            return self.single(node)
        numbers: list[float] = []
        for arg in node.args:
            for row in _array(self, _present(arg)):
                for v in row:
                    if isinstance(v, XlError):
                        if node.name == "COUNT":
                            continue  # COUNT skips errors
                        # Excel answers the error; LibreOffice at times skips it.
                        raise Refused("an error inside an array operation")
                    if isinstance(v, bool):
                        raise Refused("TRUE/FALSE summed: Excel and LibreOffice differ")
                    if isinstance(v, DateSerial) and node.name in ("AVERAGE", "PRODUCT"):
                        raise Refused("dates averaged or multiplied: LibreOffice differs")
                    if isinstance(v, float):
                        numbers.append(v)
        return _ARRAY_AGGREGATES[node.name](numbers)

    def cell(self, sheet: str, row: int, col: int) -> Scalar:
        self.book.steps += 1
        if self.book.steps > MAX_CELL_READS:
            raise Refused("too many cells read")
        value = self.book._cell_value((sheet, row, col), self.depth + 1)
        if isinstance(value, _Blank) and isinstance(
            self.book.sheets[sheet].cells.get((row, col)), Formula
        ):
            # A formula showing an empty cell (=A99) reads 0 to Excel and
            # "" to LibreOffice in text.
            raise Refused("reference to a formula whose value is an empty cell")
        return value

    def area(self, ref: Ref) -> Area:
        sheet = self.book.sheet(ref.sheet).name if ref.sheet is not None else self.sheet
        return Area(sheet, ref.r1, ref.c1, ref.r2, ref.c2)

    def resolve(self, node: Node) -> Node:
        """A defined name's tree, followed through names that name names."""
        for _ in range(16):
            if not isinstance(node, Name):
                return node
            node = self.name_tree(node)
        raise Refused("defined names nested too deeply")

    def name_tree(self, name: Name) -> Node:
        book = self.book
        scope = book.sheet(name.sheet).name if name.sheet is not None else self.sheet
        text = book.local_names.get((scope, name.name))
        if text is None and name.sheet is None:
            text = book.names.get(name.name)
        if text is None:
            raise Refused(f"unknown name {name.name[:40]}")
        tree = book.name_trees.get(text)
        if tree is None:
            try:
                tree = parse(text)
                if _has_relative_parts(text):
                    raise Refused("defined name relative to the cell")
            except Refused as exc:
                tree = Refused(exc.reason)
            book.name_trees[text] = tree
        if isinstance(tree, Refused):
            raise Refused(tree.reason)
        return tree

    # values

    def operand(self, node: Node | None) -> Area | Scalar | Grid:
        """An argument that may be a range: an Area for references, a grid
        for array constants, else a scalar."""
        if node is None:
            raise Refused("missing argument")
        node = self.resolve(node)
        if isinstance(node, Ref):
            return self.area(node)
        if isinstance(node, ArrayConst):
            return [list(r) for r in node.rows]
        if isinstance(node, Call) and node.name in _REFERENCE_FUNCTIONS:
            return _REFERENCE_FUNCTIONS[node.name](self, node.args)
        saved = self.array_arg
        self.array_arg = True
        try:
            return self.scalar(node)
        finally:
            self.array_arg = saved

    def scalar(self, node: Node | None) -> Scalar:
        if node is None:
            raise Refused("missing argument")
        if isinstance(node, Const):
            return node.value
        if isinstance(node, Binary):
            left = self.scalar(node.left)
            right = self.scalar(node.right)
            return arithmetic(node.op, left, right)
        if isinstance(node, Unary):
            v = self.scalar(node.operand)
            if node.op == "+":
                # '+' changes nothing: =+A1 shows A1's text or TRUE/FALSE
                # as they are (Excel); an empty cell shows 0.
                return 0.0 if isinstance(v, _Blank) else v
            x = to_number(v)
            if isinstance(x, XlError):
                return x
            if node.op == "-":
                return -x
            return x / 100
        if isinstance(node, Call):
            return FUNCTIONS[node.name].impl(self, node.args)
        if isinstance(node, Name):
            self.names += 1
            if self.names > 16:
                raise Refused("defined names nested too deeply")
            try:
                return self.scalar(self.resolve(node))
            finally:
                self.names -= 1
        if isinstance(node, Ref):
            return self.intersect(self.area(node))
        raise Refused("array constant where one value is expected")

    def single(self, node: Node | None) -> Scalar:
        """One value, where a range is refused rather than intersected (a
        condition, a lookup value: Excel may treat a range there as an array)."""
        saved = self.array_arg
        self.array_arg = True
        try:
            return self.scalar(node)
        finally:
            self.array_arg = saved

    def intersect(self, area: Area) -> Scalar:
        """A range where one value is expected: the cell in the formula's
        row (a column range) or column (a row range), Excel's implicit
        intersection."""
        if area.rows == 1 and area.cols == 1:
            return self.cell(area.sheet, area.r1, area.c1)
        if self.array_arg:
            raise Refused("a range where one value is expected")
        if area.cols == 1:
            if area.r1 <= self.row <= area.r2:
                return self.cell(area.sheet, self.row, area.c1)
            return VALUE
        if area.rows == 1:
            if area.c1 <= self.col <= area.c2:
                return self.cell(area.sheet, area.r1, self.col)
            return VALUE
        raise Refused("a range where one value is expected")

    def number(self, node: Node | None, default: float | None = None) -> float | XlError:
        if node is None and default is not None:
            return default
        return to_number(self.scalar(node))

    def text(self, node: Node | None) -> str | XlError:
        return to_text(self.scalar(node))

    # ranges

    def values(self, area: Area) -> Iterator[Scalar]:
        """The non-blank cells of an area, row by row (blank ones are skipped)."""
        sheet = self.book.sheets[area.sheet]
        r2, c2 = min(area.r2, sheet.max_row), min(area.c2, sheet.max_col)
        cells = sheet.cells
        if (r2 - area.r1 + 1) * (c2 - area.c1 + 1) > len(cells) * 4:
            keys = sorted(k for k in cells if area.r1 <= k[0] <= r2 and area.c1 <= k[1] <= c2)
        else:
            keys = [(r, c) for r in range(area.r1, r2 + 1) for c in range(area.c1, c2 + 1)]
        book = self.book
        for r, c in keys:
            content = cells.get((r, c))
            if content is None:
                continue
            if isinstance(content, Formula):
                v = self.cell(area.sheet, r, c)
                if not isinstance(v, _Blank):
                    yield v
            else:  # a constant: read in place
                book.steps += 1
                yield content
        if book.steps > MAX_CELL_READS:
            raise Refused("too many cells read")

    def grid(self, area: Area) -> Grid:
        """Every cell of an area (bounded), blanks included."""
        if area.rows * area.cols > MAX_ARRAY_CELLS:
            raise Refused("range too large")
        sheet = self.book.sheets[area.sheet]
        out: Grid = []
        for r in range(area.r1, area.r2 + 1):
            row: list[Scalar] = []
            for c in range(area.c1, area.c2 + 1):
                row.append(self.cell(area.sheet, r, c) if (r, c) in sheet.cells else BLANK)
            out.append(row)
        return out

    def at(self, area: Area, i: int, j: int) -> Scalar:
        """The cell at 0-based offsets within an area."""
        r, c = area.r1 + i, area.c1 + j
        content = self.book.sheets[area.sheet].cells.get((r, c))
        if content is None:
            return BLANK
        if isinstance(content, Formula):
            return self.cell(area.sheet, r, c)
        return content


def _has_relative_parts(text: str) -> bool:
    """A defined name like 'A1' (no $) means a different cell from each cell
    that uses it: not followed."""
    for token in Tokenizer("=" + text).items:
        if token.type == Token.OPERAND and token.subtype == Token.RANGE:
            ref = token.value.split("!")[-1]
            for part in ref.split(":"):
                if _CELL.fullmatch(part) and part.count("$") < 2:
                    return True
    return False


# -- function table


Impl: TypeAlias = Callable[[_Context, tuple["Node | None", ...]], Scalar]


@dataclass(frozen=True, slots=True)
class Function:
    impl: Impl
    min_args: int
    max_args: int


FUNCTIONS: dict[str, Function] = {}
_REFERENCE_FUNCTIONS: dict[str, Callable[[_Context, tuple[Node | None, ...]], Area | XlError]] = {}
_FUTURE = frozenset(
    {
        *("IFNA", "CONCAT", "TEXTJOIN", "IFS", "SWITCH", "MAXIFS", "MINIFS", "XOR", "DAYS"),
        *("STDEV.S", "STDEV.P", "VAR.S", "VAR.P"),
    }
)
_VOLATILE = frozenset(
    {"NOW", "TODAY", "RAND", "RANDBETWEEN", "RANDARRAY", "OFFSET", "INDIRECT", "CELL", "INFO"}
)


def _fn(name: str, min_args: int, max_args: int = -1) -> Callable[[Impl], Impl]:
    def register(impl: Impl) -> Impl:
        FUNCTIONS[name] = Function(impl, min_args, max_args if max_args >= 0 else min_args)
        return impl

    return register


_MANY = 255


def _items(ctx: _Context, args: Sequence[Node | None]) -> Iterator[tuple[Scalar, bool]]:
    """Each value of each argument, with whether it came from a reference
    (or array) rather than being given directly."""
    for arg in args:
        value = ctx.operand(arg)
        if isinstance(value, Area):
            for v in ctx.values(value):
                yield v, True
        elif isinstance(value, list):
            for row in value:
                for v in row:
                    yield v, True
        else:
            yield value, False


def _numbers(
    ctx: _Context, args: Sequence[Node | None], *, dates: bool = True
) -> list[float] | XlError:
    """The numbers SUM, AVERAGE, MIN... work on: numbers in ranges (text and
    blanks skipped), numbers given directly.  TRUE/FALSE in a range is a
    number to LibreOffice only; text given directly is read by Excel only."""
    out: list[float] = []
    for v, from_range in _items(ctx, args):
        if isinstance(v, XlError):
            return v
        if isinstance(v, bool):
            raise Refused("TRUE/FALSE summed: Excel and LibreOffice differ")
        if isinstance(v, float):
            if not dates and isinstance(v, DateSerial):
                raise Refused("dates averaged or multiplied: LibreOffice differs")
            out.append(v)
        elif not from_range:
            if isinstance(v, _Blank):
                out.append(0.0)
            else:
                raise Refused("text given to a function of numbers")
    return out


def _sum(values: Sequence[float]) -> float | XlError:
    try:
        total = math.fsum(values)
    except OverflowError:
        return NUM
    plain = 0.0
    for v in values:
        plain += v
    biggest = max((abs(v) for v in values), default=0.0)
    if total != plain and abs(total - plain) > abs(total) * 2.0**-50:
        # Rounding differs by order of addition: LibreOffice adds with
        # compensation, Excel left to right.
        raise Refused("sum of numbers that cancel")
    if plain != 0 and abs(plain) < biggest * 2.0**-40:
        raise Refused("sum of numbers that cancel")
    return _finite(plain)


@_fn("SUM", 1, _MANY)
def _f_sum(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _numbers(ctx, args)
    return values if isinstance(values, XlError) else _sum(values)


@_fn("PRODUCT", 1, _MANY)
def _f_product(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _numbers(ctx, args, dates=False)
    if isinstance(values, XlError):
        return values
    if not values:
        return 0.0
    product = math.prod(values)
    if abs(product) >= 1e15 or (product == 0 and all(values)):
        # LibreOffice answers #VALUE! for some large products.
        raise Refused("product too large to compare")
    return product


@_fn("AVERAGE", 1, _MANY)
def _f_average(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _numbers(ctx, args, dates=False)
    if isinstance(values, XlError):
        return values
    if not values:
        return DIV0
    total = _sum(values)
    return total if isinstance(total, XlError) else total / len(values)


@_fn("MIN", 1, _MANY)
def _f_min(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _numbers(ctx, args)
    return values if isinstance(values, XlError) else min(values, default=0.0)


@_fn("MAX", 1, _MANY)
def _f_max(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _numbers(ctx, args)
    return values if isinstance(values, XlError) else max(values, default=0.0)


@_fn("MEDIAN", 1, _MANY)
def _f_median(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _numbers(ctx, args)
    if isinstance(values, XlError):
        return values
    if not values:
        raise Refused("MEDIAN of no numbers: Excel #NUM!, LibreOffice #VALUE!")
    values.sort()
    mid = len(values) // 2
    if len(values) % 2:
        return values[mid]
    return (values[mid - 1] + values[mid]) / 2


def _kth(ctx: _Context, args: tuple[Node | None, ...], *, largest: bool) -> Scalar:
    values = _numbers(ctx, args[:1])
    if isinstance(values, XlError):
        return values
    k = ctx.number(args[1])
    if isinstance(k, XlError):
        return k
    n = math.ceil(k)
    if not 1 <= n <= len(values):
        raise Refused("LARGE/SMALL beyond the numbers: the programs' errors may differ")
    values.sort(reverse=largest)
    return values[n - 1]


@_fn("LARGE", 2)
def _f_large(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _kth(ctx, args, largest=True)


@_fn("SMALL", 2)
def _f_small(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _kth(ctx, args, largest=False)


@_fn("SUMSQ", 1, _MANY)
def _f_sumsq(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _numbers(ctx, args)
    return values if isinstance(values, XlError) else _sum([v * v for v in values])


@_fn("COUNT", 1, _MANY)
def _f_count(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    n = 0
    for v, from_range in _items(ctx, args):
        if isinstance(v, bool):
            raise Refused("TRUE/FALSE counted: Excel and LibreOffice differ")
        if isinstance(v, float):
            n += 1
        elif not from_range and isinstance(v, str):
            raise Refused("text given to COUNT")
    return float(n)


@_fn("COUNTA", 1, _MANY)
def _f_counta(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    n = 0
    for v, from_range in _items(ctx, args):
        if v == "" and from_range:
            raise Refused("COUNTA of a formula's empty text")
        if not isinstance(v, _Blank) or not from_range:
            n += 1
    return float(n)


@_fn("COUNTBLANK", 1)
def _f_countblank(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    area = ctx.operand(args[0])
    if not isinstance(area, Area):
        raise Refused("COUNTBLANK of a value")
    filled = 0
    for v in ctx.values(area):
        if v == "":
            raise Refused("COUNTBLANK of a formula's empty text")
        filled += 1
    return float(area.rows * area.cols - filled)


# conditions


def _criterion(value: Scalar) -> Callable[[Scalar], bool]:
    """COUNTIF's test for one cell, as Excel and LibreOffice agree on it."""
    if isinstance(value, XlError | bool | _Blank):
        raise Refused("condition that is not a number or text")
    if isinstance(value, float):
        op, operand = "=", number_to_text(value)
    else:
        op, operand = "=", value
        for prefix in ("<=", ">=", "<>", "<", ">", "="):
            if value.startswith(prefix):
                op, operand = prefix, value[len(prefix) :]
                break
    if operand == "":
        if op == "<>":
            return lambda v: _nonblank_cell(v)
        if op == "=" and not isinstance(value, float):
            return lambda v: _blank_cell(v, strict=value == "=")
        raise Refused("condition on empty text")
    if _PLAIN.fullmatch(operand) and not operand[:1].isspace() and not operand[-1:].isspace():
        number = float(operand)
        return lambda v: _number_test(op, number, v)
    if operand.upper() in ("TRUE", "FALSE") or might_be_number(operand):
        raise Refused("condition read by the locale (date, currency, TRUE)")
    if op not in ("=", "<>"):
        raise Refused("text order depends on the collation")
    pattern = _wildcard(operand)
    if op == "=":
        return lambda v: _text_cell_match(pattern, v)
    return lambda v: not _text_cell_match(pattern, v) and _plain_cell(v)


def _plain_cell(v: Scalar) -> bool:
    if isinstance(v, bool):
        raise Refused("condition over TRUE/FALSE cells")
    if isinstance(v, _Blank):
        raise Refused("condition '<>' over empty cells")
    if isinstance(v, XlError):
        raise Refused("condition '<>' over error cells")
    return True


def _nonblank_cell(v: Scalar) -> bool:
    if v == "":
        raise Refused("condition over a formula's empty text")
    return not isinstance(v, _Blank)


def _blank_cell(v: Scalar, *, strict: bool) -> bool:
    if v == "":
        raise Refused("condition over a formula's empty text")
    return isinstance(v, _Blank)


def _number_test(op: str, number: float, v: Scalar) -> bool:
    if isinstance(v, bool):
        raise Refused("condition over TRUE/FALSE cells")
    if isinstance(v, str):
        if might_be_number(v):
            # COUNTIF(A:A, 3): LibreOffice skips the text "3"; Excel, it is
            # said, counts it.
            raise Refused("condition over numbers stored as text")
        return op == "<>"
    if isinstance(v, _Blank):
        if op == "<>":
            raise Refused("condition '<>' over empty cells")
        return False
    if isinstance(v, XlError):
        if op == "<>":
            raise Refused("condition '<>' over error cells")
        return False
    result = compare(op, v, number)
    return result is True


class _Wild:
    """A wildcard of a condition: '*' (any run) or '?' (one character)."""

    __slots__ = ("many",)

    def __init__(self, *, many: bool) -> None:
        self.many = many


_STAR = _Wild(many=True)
_ONE = _Wild(many=False)
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
Pattern: TypeAlias = list["str | _Wild"]


def _wildcard(text: str) -> Pattern:
    """A condition's text as literal characters (lower case) and wildcards;
    '~' makes the next character literal.  Matched by ``_wild_match``, not
    by a regular expression: '*a*a*a*...' must not backtrack for ever."""
    if len(text) > 255:
        raise Refused("condition longer than Excel allows")
    if not text.isascii():
        raise Refused("condition over accented text")
    out: Pattern = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "~" and i + 1 < len(text):
            out.append(text[i + 1].translate(_ASCII_LOWER))
            i += 2
            continue
        out.append(_STAR if ch == "*" else _ONE if ch == "?" else ch.translate(_ASCII_LOWER))
        i += 1
    return out


def _wild_match(pattern: Pattern, text: str) -> bool:
    """The whole text against the pattern, ASCII letters in either case
    (a letter outside ASCII is matched by a wildcard only: the Kelvin sign
    is no k).  Greedy with a return to the last '*': O(len * len), never
    exponential."""
    text = text.translate(_ASCII_LOWER)
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and (pattern[p] is _ONE or pattern[p] == text[t]):
            p += 1
            t += 1
        elif p < len(pattern) and pattern[p] is _STAR:
            star, mark = p, t
            p += 1
        elif star >= 0:
            p = star + 1
            mark += 1
            t = mark
        else:
            return False
    while p < len(pattern) and pattern[p] is _STAR:
        p += 1
    return p == len(pattern)


def _text_cell_match(pattern: Pattern, v: Scalar) -> bool:
    """A text condition on one cell.  LibreOffice also matches TRUE/FALSE
    (and, it may be, numbers) by their text; Excel only text cells."""
    if isinstance(v, bool):
        raise Refused("text condition over TRUE/FALSE cells")
    if isinstance(v, float):
        return False
    if not isinstance(v, str):
        return False
    if any(ord(ch) > 0xFFFF for ch in v):
        raise Refused("text with characters outside the basic plane")
    return _wild_match(pattern, v)


def _area_arg(ctx: _Context, node: Node | None, fn: str) -> Area:
    value = ctx.operand(node)
    if not isinstance(value, Area):
        raise Refused(f"{fn} of a value, not a range")
    return value


def _same_shape(base: Area, other: Area) -> Area:
    """SUMIF's sum range takes the shape of the condition range (Excel and
    LibreOffice alike), from its top-left cell."""
    return Area(other.sheet, other.r1, other.c1, other.r1 + base.rows - 1, other.c1 + base.cols - 1)


def _matching(ctx: _Context, pairs: Sequence[tuple[Area, Scalar]]) -> Iterator[tuple[int, int]]:
    """(row, column) offsets of the cells meeting every condition."""
    tests = [(area, _criterion(crit)) for area, crit in pairs]
    first = pairs[0][0]
    for area, _ in pairs:
        if area.rows != first.rows or area.cols != first.cols:
            raise Refused("condition ranges of different sizes")
    sheet_rows = max(ctx.book.sheets[a.sheet].max_row - a.r1 + 1 for a, _ in pairs)
    sheet_cols = max(ctx.book.sheets[a.sheet].max_col - a.c1 + 1 for a, _ in pairs)
    rows, cols = max(min(first.rows, sheet_rows), 0), max(min(first.cols, sheet_cols), 0)
    if rows * cols > MAX_ARRAY_CELLS * 10:
        raise Refused("range too large")
    if rows < first.rows or cols < first.cols:
        # Cells beyond every sheet's used area are blank in every range.
        blank = all(test(BLANK) for _, test in tests)
        if blank:
            raise Refused("condition that matches empty cells over a whole column")
    for i in range(rows):
        for j in range(cols):
            if all(test(ctx.at(area, i, j)) for area, test in tests):
                yield i, j


@_fn("COUNTIF", 2)
def _f_countif(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    area = _area_arg(ctx, args[0], "COUNTIF")
    return float(sum(1 for _ in _matching(ctx, [(area, ctx.single(args[1]))])))


@_fn("COUNTIFS", 2, _MANY)
def _f_countifs(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    if len(args) % 2:
        raise Refused("COUNTIFS with an odd number of arguments")
    pairs = [
        (_area_arg(ctx, args[i], "COUNTIFS"), ctx.single(args[i + 1]))
        for i in range(0, len(args), 2)
    ]
    return float(sum(1 for _ in _matching(ctx, pairs)))


def _summed(ctx: _Context, area: Area, offsets: Iterator[tuple[int, int]]) -> list[float] | XlError:
    out: list[float] = []
    for i, j in offsets:
        v = ctx.at(area, i, j)
        if isinstance(v, XlError):
            return v
        if isinstance(v, bool):
            raise Refused("TRUE/FALSE summed: Excel and LibreOffice differ")
        if isinstance(v, float):
            out.append(v)
    return out


def _if_total(ctx: _Context, target: Area, pairs: list[tuple[Area, Scalar]], avg: bool) -> Scalar:
    values = _summed(ctx, target, _matching(ctx, pairs))
    if isinstance(values, XlError):
        return values
    if avg and any(isinstance(v, DateSerial) for v in values):
        raise Refused("dates averaged or multiplied: LibreOffice differs")
    if avg:
        if not values:
            return DIV0
        total = _sum(values)
        return total if isinstance(total, XlError) else total / len(values)
    return _sum(values)


@_fn("SUMIF", 2, 3)
def _f_sumif(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    area = _area_arg(ctx, args[0], "SUMIF")
    target = _same_shape(area, _area_arg(ctx, args[2], "SUMIF")) if len(args) > 2 else area
    return _if_total(ctx, target, [(area, ctx.single(args[1]))], avg=False)


@_fn("AVERAGEIF", 2, 3)
def _f_averageif(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    area = _area_arg(ctx, args[0], "AVERAGEIF")
    target = _same_shape(area, _area_arg(ctx, args[2], "AVERAGEIF")) if len(args) > 2 else area
    return _if_total(ctx, target, [(area, ctx.single(args[1]))], avg=True)


def _ifs(ctx: _Context, args: tuple[Node | None, ...], fn: str, avg: bool) -> Scalar:
    if len(args) % 2 == 0:
        raise Refused(f"{fn} with an even number of arguments")
    target = _area_arg(ctx, args[0], fn)
    pairs = [(_area_arg(ctx, args[i], fn), ctx.single(args[i + 1])) for i in range(1, len(args), 2)]
    if any(a.rows != target.rows or a.cols != target.cols for a, _ in pairs):
        raise Refused(f"{fn} over ranges of different sizes")
    return _if_total(ctx, target, pairs, avg)


@_fn("SUMIFS", 3, _MANY)
def _f_sumifs(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _ifs(ctx, args, "SUMIFS", avg=False)


@_fn("AVERAGEIFS", 3, _MANY)
def _f_averageifs(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _ifs(ctx, args, "AVERAGEIFS", avg=True)


# logic


@_fn("IF", 1, 3)
def _f_if(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    cond = to_bool(ctx.scalar(args[0]))
    if isinstance(cond, XlError):
        return cond
    if cond:
        if len(args) < 2:
            return True
        return 0.0 if args[1] is None else _branch(ctx, args[1])
    if len(args) < 3:
        return False
    return 0.0 if args[2] is None else _branch(ctx, args[2])


def _branch(ctx: _Context, node: Node) -> Scalar:
    # IF(TRUE, A1) passes the reference on: with A1 empty, it shows 0 in
    # a cell and "" in a concatenation, as an empty cell does.
    return ctx.scalar(node)


@_fn("IFERROR", 2)
def _f_iferror(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    v = ctx.scalar(args[0])
    if isinstance(v, XlError):
        return 0.0 if args[1] is None else _branch(ctx, args[1])
    return _not_blank(v, "IFERROR")


@_fn("IFNA", 2)
def _f_ifna(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    v = ctx.scalar(args[0])
    if v == NA:
        return 0.0 if args[1] is None else _branch(ctx, args[1])
    return _not_blank(v, "IFNA")


def _not_blank(v: Scalar, fn: str) -> Scalar:
    if isinstance(v, _Blank):
        raise Refused(f"{fn} of an empty cell: its value there is not known")
    return v


def _logical(ctx: _Context, args: tuple[Node | None, ...]) -> list[bool] | XlError:
    out: list[bool] = []
    unreadable: XlError | None = None
    for v, from_range in _items(ctx, args):
        if isinstance(v, XlError):
            # AND(TRUE, "ciao", #REF!) is #REF! in Excel: the error given
            # wins over the text that is no TRUE/FALSE before it.
            return v
        if isinstance(v, bool):
            out.append(v)
        elif isinstance(v, float):
            out.append(v != 0)
        elif not from_range and not isinstance(v, _Blank):
            b = to_bool(v)
            if isinstance(b, XlError):
                unreadable = unreadable or b
            else:
                out.append(b)
    return unreadable or out


@_fn("AND", 1, _MANY)
def _f_and(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _logical(ctx, args)
    if isinstance(values, XlError):
        return values
    return all(values) if values else VALUE


@_fn("OR", 1, _MANY)
def _f_or(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _logical(ctx, args)
    if isinstance(values, XlError):
        return values
    return any(values) if values else VALUE


@_fn("NOT", 1)
def _f_not(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    v = to_bool(ctx.scalar(args[0]))
    return v if isinstance(v, XlError) else not v


@_fn("TRUE", 0)
def _f_true(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return True


@_fn("FALSE", 0)
def _f_false(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return False


@_fn("NA", 0)
def _f_na(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return NA


@_fn("CHOOSE", 2, _MANY)
def _f_choose(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    i = ctx.number(args[0])
    if isinstance(i, XlError):
        return i
    n = math.floor(i)
    if not 1 <= n < len(args):
        return VALUE
    return _branch(ctx, _present(args[n]))


def _present(node: Node | None) -> Node:
    if node is None:
        raise Refused("missing argument")
    return node


def _no_bool(v: Scalar) -> bool:
    if isinstance(v, bool):
        raise Refused("TRUE/FALSE tested for its type: LibreOffice keeps it as a number")
    return False


def _is(test: Callable[[Scalar], bool]) -> Impl:
    def impl(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
        return test(ctx.scalar(args[0]))

    return impl


for _name, _test in {
    "ISNUMBER": lambda v: isinstance(v, float) or _no_bool(v),
    "ISTEXT": lambda v: isinstance(v, str),
    "ISNONTEXT": lambda v: not isinstance(v, str),
    "ISLOGICAL": _no_bool,
    "ISBLANK": lambda v: isinstance(v, _Blank),
    "ISERROR": lambda v: isinstance(v, XlError),
    "ISERR": lambda v: isinstance(v, XlError) and v != NA,
    "ISNA": lambda v: v == NA,
}.items():
    FUNCTIONS[_name] = Function(_is(_test), 1, 1)


# math


def _math1(fn: Callable[[float], float | XlError]) -> Impl:
    def impl(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
        x = ctx.number(args[0])
        if isinstance(x, XlError):
            return x
        try:
            result = fn(x)
        except (OverflowError, ValueError):
            return NUM
        return result if isinstance(result, XlError) else _finite(result)

    return impl


def _outside() -> XlError:
    # Excel answers #NUM!, LibreOffice #VALUE! (its "invalid argument").
    raise Refused("argument outside the function's domain: the programs' errors differ")


def _sqrt(x: float) -> float | XlError:
    return _outside() if x < 0 else math.sqrt(x)


def _ln(x: float) -> float | XlError:
    return _outside() if x <= 0 else math.log(x)


def _log10(x: float) -> float | XlError:
    return _outside() if x <= 0 else math.log10(x)


def _asin(x: float) -> float | XlError:
    return _outside() if abs(x) > 1 else math.asin(x)


def _acos(x: float) -> float | XlError:
    return _outside() if abs(x) > 1 else math.acos(x)


def _fact(x: float) -> float | XlError:
    if x < 0 or x >= 171:
        return _outside()
    return float(math.factorial(math.floor(x)))


_MATH1: dict[str, Callable[[float], float | XlError]] = {
    "ABS": abs,
    "INT": lambda x: float(math.floor(x)),
    "SQRT": _sqrt,
    "EXP": math.exp,
    "LN": _ln,
    "LOG10": _log10,
    "SIN": math.sin,
    "COS": math.cos,
    "TAN": math.tan,
    "ASIN": _asin,
    "ACOS": _acos,
    "ATAN": math.atan,
    "SIGN": lambda x: float((x > 0) - (x < 0)),
    "FACT": _fact,
    "RADIANS": math.radians,
    "DEGREES": math.degrees,
}
for _name, _f in _MATH1.items():
    FUNCTIONS[_name] = Function(_math1(_f), 1, 1)


@_fn("PI", 0)
def _f_pi(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return math.pi


def _two(ctx: _Context, args: tuple[Node | None, ...]) -> tuple[float, float] | XlError:
    x = ctx.number(args[0])
    y = ctx.number(args[1])
    if isinstance(x, XlError):
        # LibreOffice reads arguments last to first, Excel first to last:
        # with an error in each, they answer differently.
        if isinstance(y, XlError) and y != x:
            raise Refused("errors in two arguments: the programs differ")
        return x
    if isinstance(y, XlError):
        return y
    return x, y


@_fn("POWER", 2)
def _f_power(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    xy = _two(ctx, args)
    return xy if isinstance(xy, XlError) else arithmetic("^", xy[0], xy[1])


@_fn("MOD", 2)
def _f_mod(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    if ctx.number(args[1]) == 0.0:
        x0 = ctx.number(args[0])
        if isinstance(x0, XlError) and x0 != DIV0:
            raise Refused("MOD of an error by 0: the programs differ")
    xy = _two(ctx, args)
    if isinstance(xy, XlError):
        return xy
    x, y = xy
    if y == 0:
        return DIV0
    if abs(x / y) >= 2.0**48:
        raise Refused("MOD of a very large quotient")
    if x.is_integer() and y.is_integer():
        return float(int(x) % int(y))
    return _finite(x - y * math.floor(x / y))


@_fn("ATAN2", 2)
def _f_atan2(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    xy = _two(ctx, args)
    if isinstance(xy, XlError):
        return xy
    x, y = xy
    if x == 0 and y == 0:
        return DIV0
    return math.atan2(y, x)


@_fn("LOG", 1, 2)
def _f_log(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    x = ctx.number(args[0])
    if isinstance(x, XlError):
        return x
    base = ctx.number(args[1]) if len(args) > 1 and args[1] is not None else 10.0
    if isinstance(base, XlError):
        return base
    if x <= 0 or base <= 0 or base == 1:
        return _outside()
    if base == 10:
        return math.log10(x)
    raise Refused("LOG to a base other than 10")


_WIDE = Context(prec=60)


def _decimal(x: float) -> Decimal:
    """The number as Excel sees it: 15 significant digits."""
    return Decimal(f"{x:.15g}")


def _rounder(mode: str) -> Impl:
    def impl(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
        x = ctx.number(args[0])
        if isinstance(x, XlError):
            return x
        digits = ctx.number(args[1]) if len(args) > 1 else 0.0
        if isinstance(digits, XlError):
            return digits
        n = math.trunc(digits)
        if abs(n) > 15 or abs(x) >= 1e15:
            raise Refused("rounding beyond 15 digits")
        d = _decimal(x)
        if n >= 0:
            return float(d.quantize(Decimal(1).scaleb(-n), rounding=mode, context=_WIDE))
        step = Decimal(1).scaleb(-n)
        return float((d / step).quantize(Decimal(1), rounding=mode, context=_WIDE) * step)

    return impl


FUNCTIONS["ROUND"] = Function(_rounder(ROUND_HALF_UP), 1, 2)
FUNCTIONS["ROUNDUP"] = Function(_rounder(ROUND_UP), 1, 2)
FUNCTIONS["ROUNDDOWN"] = Function(_rounder(ROUND_DOWN), 1, 2)
FUNCTIONS["TRUNC"] = Function(_rounder(ROUND_DOWN), 1, 2)


def _multiple(up: bool) -> Impl:
    def impl(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
        xy = _two(ctx, args)
        if isinstance(xy, XlError):
            return xy
        x, step = xy
        if x < 0 or step < 0:
            raise Refused("CEILING/FLOOR of negative numbers: the programs differ")
        if step == 0:
            return 0.0 if up else DIV0
        q = _decimal(x) / _decimal(step)
        n = q.to_integral_value(rounding=ROUND_UP if up else ROUND_DOWN)
        return float(n * _decimal(step))

    return impl


FUNCTIONS["CEILING"] = Function(_multiple(True), 2, 2)
FUNCTIONS["FLOOR"] = Function(_multiple(False), 2, 2)


@_fn("SUMPRODUCT", 1, _MANY)
def _f_sumproduct(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    grids = [_array(ctx, _present(a)) for a in args]
    shape = (len(grids[0]), len(grids[0][0]))
    if any((len(g), len(g[0])) != shape for g in grids):
        if any(isinstance(v, XlError) for g in grids for row in g for v in row):
            # Excel answers with an error from the arrays, not #VALUE!.
            raise Refused("SUMPRODUCT of arrays of different sizes holding errors")
        return VALUE
    products: list[float] = []
    for i in range(shape[0]):
        for j in range(shape[1]):
            p = 1.0
            for g in grids:
                v = g[i][j]
                if isinstance(v, XlError):
                    raise Refused("an error inside an array operation")
                if isinstance(v, bool):
                    raise Refused("TRUE/FALSE in SUMPRODUCT: Excel and LibreOffice differ")
                p *= v if isinstance(v, float) else 0.0
            products.append(p)
    return _sum(products)


def _array(ctx: _Context, node: Node) -> Grid:
    """A SUMPRODUCT argument, computed element by element."""
    node = ctx.resolve(node)
    if isinstance(node, Ref):
        return ctx.grid(ctx.area(node))
    if isinstance(node, ArrayConst):
        return [list(r) for r in node.rows]
    if isinstance(node, Binary):
        left, right = _array(ctx, node.left), _array(ctx, node.right)
        if (len(left), len(left[0])) != (len(right), len(right[0])):
            if len(left) * len(left[0]) == 1:
                left = [[left[0][0]] * len(right[0]) for _ in right]
            elif len(right) * len(right[0]) == 1:
                right = [[right[0][0]] * len(left[0]) for _ in left]
            else:
                raise Refused("arrays of different sizes")
        return [
            [arithmetic(node.op, a, b) for a, b in zip(lr, rr, strict=True)]
            for lr, rr in zip(left, right, strict=True)
        ]
    if isinstance(node, Unary):
        inner = _array(ctx, node.operand)
        out: Grid = []
        for row in inner:
            new: list[Scalar] = []
            for v in row:
                x = to_number(v)
                if node.op == "+":
                    new.append(0.0 if isinstance(v, _Blank) else v)
                elif isinstance(x, XlError):
                    new.append(x)
                else:
                    new.append(-x if node.op == "-" else x / 100)
            out.append(new)
        return out
    saved = ctx.array_arg
    ctx.array_arg = True
    try:
        return [[ctx.scalar(node)]]
    finally:
        ctx.array_arg = saved


@_fn("SUBTOTAL", 2, _MANY)
def _f_subtotal(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    code = ctx.number(args[0])
    if isinstance(code, XlError):
        return code
    kind = {1: "AVERAGE", 2: "COUNT", 3: "COUNTA", 4: "MAX", 5: "MIN", 9: "SUM"}.get(
        int(code) % 100 if code in (1, 2, 3, 4, 5, 9, 101, 102, 103, 104, 105, 109) else -1
    )
    if kind is None:
        raise Refused("SUBTOTAL of this kind unsupported")
    values: list[Scalar] = []
    for arg in args[1:]:
        area = _area_arg(ctx, arg, "SUBTOTAL")
        sheet = ctx.book.sheets[area.sheet]
        if any(area.r1 <= r <= area.r2 for r in sheet.hidden_rows):
            raise Refused("SUBTOTAL over hidden or filtered rows")
        inside = sorted(
            k for k in sheet.cells if area.r1 <= k[0] <= area.r2 and area.c1 <= k[1] <= area.c2
        )
        for r, c in inside:
            content = sheet.cells[(r, c)]
            if isinstance(content, Formula) and re.search(
                r"\b(SUBTOTAL|AGGREGATE)\s*\(", content.text, re.IGNORECASE
            ):
                continue  # nested subtotals are left out, in both programs
            values.append(ctx.cell(area.sheet, r, c))
    numbers: list[float] = []
    for v in values:
        if isinstance(v, XlError):
            if kind in ("COUNT", "COUNTA"):
                continue  # counted (COUNTA) or skipped (COUNT), never raised
            return v
        if isinstance(v, bool):
            raise Refused("TRUE/FALSE in SUBTOTAL")
        if isinstance(v, float):
            numbers.append(v)
    if kind == "COUNT":
        return float(len(numbers))
    if kind == "COUNTA":
        if any(v == "" for v in values):
            raise Refused("COUNTA of a formula's empty text")
        return float(sum(1 for v in values if not isinstance(v, _Blank)))  # errors too
    if kind == "SUM":
        return _sum(numbers)
    if kind == "MAX":
        return max(numbers, default=0.0)
    if kind == "MIN":
        return min(numbers, default=0.0)
    if not numbers:
        return DIV0
    if any(isinstance(v, DateSerial) for v in numbers):
        raise Refused("dates averaged or multiplied: LibreOffice differs")
    total = _sum(numbers)
    return total if isinstance(total, XlError) else total / len(numbers)


# text


def _text1(fn: Callable[[str], Scalar]) -> Impl:
    def impl(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
        t = ctx.text(args[0])
        return t if isinstance(t, XlError) else fn(t)

    return impl


def _ascii_case(fn: Callable[[str], str]) -> Callable[[str], Scalar]:
    def convert(text: str) -> Scalar:
        if not text.isascii():
            raise Refused("case of accented text")
        return fn(text)

    return convert


def _length(text: str) -> Scalar:
    _non_bmp(text)
    return float(len(text))


FUNCTIONS["LEN"] = Function(_text1(_length), 1, 1)
FUNCTIONS["UPPER"] = Function(_text1(_ascii_case(str.upper)), 1, 1)
FUNCTIONS["LOWER"] = Function(_text1(_ascii_case(str.lower)), 1, 1)
FUNCTIONS["TRIM"] = Function(_text1(lambda t: " ".join(w for w in t.split(" ") if w)), 1, 1)


def _count_arg(ctx: _Context, node: Node | None, default: float) -> int | XlError:
    if node is None:
        return int(default)
    n = ctx.number(node)
    if isinstance(n, XlError):
        return n
    if n < 0:
        return VALUE
    return int(min(n, 1e9))


def _non_bmp(text: str) -> None:
    # Excel counts UTF-16 units, Python code points.
    if any(ord(ch) > 0xFFFF for ch in text):
        raise Refused("text with characters outside the basic plane")


@_fn("LEFT", 1, 2)
def _f_left(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    t = ctx.text(args[0])
    if isinstance(t, XlError):
        return t
    _non_bmp(t)
    n = _count_arg(ctx, args[1] if len(args) > 1 else None, 1)
    return n if isinstance(n, XlError) else t[:n]


@_fn("RIGHT", 1, 2)
def _f_right(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    t = ctx.text(args[0])
    if isinstance(t, XlError):
        return t
    _non_bmp(t)
    n = _count_arg(ctx, args[1] if len(args) > 1 else None, 1)
    if isinstance(n, XlError):
        return n
    return t[max(len(t) - n, 0) :] if n else ""


@_fn("MID", 3)
def _f_mid(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    t = ctx.text(args[0])
    if isinstance(t, XlError):
        return t
    _non_bmp(t)
    start = ctx.number(args[1])
    if isinstance(start, XlError):
        return start
    n = _count_arg(ctx, args[2], 0)
    if isinstance(n, XlError):
        return n
    if start < 1:
        return VALUE
    s = int(min(start, 1e9)) - 1
    return t[s : s + n]


def _join(ctx: _Context, args: Sequence[Node | None], *, ranges: bool) -> Scalar:
    parts: list[str] = []
    size = 0
    for arg in args:
        if ranges:
            values: Iterator[tuple[Scalar, bool]] = _items(ctx, [arg])
        else:
            values = iter([(ctx.scalar(arg), False)])
        for v, _ in values:
            t = to_text(v)
            if isinstance(t, XlError):
                return t
            parts.append(t)
            size += len(t)
            if size > MAX_TEXT:  # before the parts of a whole column are joined
                _too_long()
    return "".join(parts)


@_fn("CONCATENATE", 1, _MANY)
def _f_concatenate(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _join(ctx, args, ranges=False)


@_fn("CONCAT", 1, _MANY)
def _f_concat(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _join(ctx, args, ranges=True)


@_fn("REPT", 2)
def _f_rept(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    t = ctx.text(args[0])
    if isinstance(t, XlError):
        return t
    n = _count_arg(ctx, args[1], 0)
    if isinstance(n, XlError):
        return n
    if len(t) * n > MAX_TEXT:
        _too_long()
    return t * n


@_fn("SUBSTITUTE", 3, 4)
def _f_substitute(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    texts = [ctx.text(a) for a in args[:3]]
    for t in texts:
        if isinstance(t, XlError):
            return t
    text, old, new = (str(t) for t in texts)
    if len(args) == 4:
        nth = ctx.number(args[3])
        if isinstance(nth, XlError):
            return nth
        if nth < 1:
            return VALUE
        if not old:
            return text
        at = -1
        for _ in range(int(nth)):
            at = text.find(old, at + 1)
            if at < 0:
                return text
        result = text[:at] + new + text[at + len(old) :]
    else:
        if old and len(text) + text.count(old) * (len(new) - len(old)) > MAX_TEXT:
            _too_long()  # known before a 32,767 x 32,767 text is made
        result = text.replace(old, new) if old else text
    return result if len(result) <= MAX_TEXT else _too_long()


@_fn("FIND", 2, 3)
def _f_find(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _find(ctx, args, fold=False)


@_fn("SEARCH", 2, 3)
def _f_search(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _find(ctx, args, fold=True)


def _find(ctx: _Context, args: tuple[Node | None, ...], *, fold: bool) -> Scalar:
    needle, hay = ctx.text(args[0]), ctx.text(args[1])
    if isinstance(needle, XlError):
        return needle
    if isinstance(hay, XlError):
        return hay
    _non_bmp(hay)
    start = ctx.number(args[2]) if len(args) > 2 and args[2] is not None else 1.0
    if isinstance(start, XlError):
        return start
    if start < 1 or start > len(hay) + 1:
        return VALUE
    if fold:
        if any(ch in needle for ch in "*?~") or not (needle.isascii() and hay.isascii()):
            raise Refused("SEARCH with wildcards or accented text")
        needle, hay = needle.lower(), hay.lower()
    at = hay.find(needle, int(start) - 1)
    return VALUE if at < 0 else float(at + 1)


@_fn("EXACT", 2)
def _f_exact(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    a, b = ctx.text(args[0]), ctx.text(args[1])
    if isinstance(a, XlError):
        return a
    if isinstance(b, XlError):
        return b
    return a == b


@_fn("VALUE", 1)
def _f_value(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    v = ctx.scalar(args[0])
    if isinstance(v, str):
        if not v.strip():
            return VALUE
        return text_to_number(v)
    if isinstance(v, bool):
        # Excel: #VALUE!; LibreOffice's TRUE is the number 1.
        raise Refused("VALUE of TRUE/FALSE: the programs differ")
    return to_number(v)


@_fn("CHAR", 1)
def _f_char(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    n = ctx.number(args[0])
    if isinstance(n, XlError):
        return n
    if 32 <= int(n) <= 126:
        return chr(int(n))
    raise Refused("CHAR outside printable ASCII: the programs differ")


@_fn("CODE", 1)
def _f_code(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    t = ctx.text(args[0])
    if isinstance(t, XlError):
        return t
    if not t:
        raise Refused("CODE of empty text: Excel #VALUE!, LibreOffice 0")
    if not t[0].isascii():
        raise Refused("CODE outside ASCII depends on the code page")
    return float(ord(t[0]))


_TEXT_NUMBER = re.compile(r"(\$?)(#,##0|0|#)(?:\.(0{1,10}))?(%?)")
_TEXT_DATE = re.compile(r"y+|m+|d+|[-/. ]")
_DATE_TOKENS = frozenset({"yyyy", "yy", "mm", "m", "dd", "d", "-", "/", ".", " "})


@_fn("TEXT", 2)
def _f_text(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    v = ctx.scalar(args[0])
    fmt = ctx.text(args[1])
    if isinstance(v, XlError):
        return v
    if isinstance(fmt, XlError):
        return fmt
    if isinstance(v, str | bool):
        raise Refused("TEXT of text or TRUE/FALSE")
    x = to_number(v)
    if isinstance(x, XlError):
        return x
    m = _TEXT_NUMBER.fullmatch(fmt)
    if m:
        return _text_number(x, m)
    parts = _TEXT_DATE.findall(fmt)
    if (
        "".join(parts) == fmt
        and all(p in _DATE_TOKENS for p in parts)
        and any(p[0] in "ymd" for p in parts)
    ):
        return _text_date(ctx, x, parts)
    raise Refused("TEXT with this format unsupported")


def _text_number(x: float, m: re.Match[str]) -> str:
    currency, body, decimals, percent = m[1], m[2], m[3] or "", m[4]
    places = len(decimals)
    if percent:
        x *= 100
    if abs(x) >= 1e15:
        raise Refused("TEXT of a very large number")
    step = Decimal(1).scaleb(-places)
    d = _decimal(x).quantize(step, rounding=ROUND_HALF_UP, context=_WIDE)
    if Decimal(x).quantize(step, rounding=ROUND_HALF_UP, context=_WIDE) != d:
        # 1.005 is 1.00499999... in binary: which one a program rounds differs.
        raise Refused("TEXT of a number on a rounding edge")
    if d == 0 and x < 0:
        raise Refused("TEXT of a negative number shown as zero")
    digits = f"{abs(d):,.{places}f}" if body == "#,##0" else f"{abs(d):.{places}f}"
    if body == "#" and digits.startswith("0"):
        digits = digits[1:]  # '#' shows no leading zero
    return ("-" if d < 0 else "") + currency + digits + percent


def _text_date(ctx: _Context, x: float, parts: list[str]) -> str:
    if x - math.floor(x) >= 1 - 0.5 / 86400:
        raise Refused("TEXT of a time that rounds to the next day")
    day = _to_date(ctx, x)
    if isinstance(day, XlError):
        raise Refused("TEXT of a number that is no date")
    shown = {
        "yyyy": f"{day.year:04d}",
        "yy": f"{day.year % 100:02d}",
        "mm": f"{day.month:02d}",
        "m": str(day.month),
        "dd": f"{day.day:02d}",
        "d": str(day.day),
    }
    return "".join(shown.get(p, p) for p in parts)


@_fn("TEXTJOIN", 3, _MANY)
def _f_textjoin(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    sep = ctx.text(args[0])
    if isinstance(sep, XlError):
        return sep
    skip = to_bool(ctx.scalar(args[1]))
    if isinstance(skip, XlError):
        return skip
    parts: list[str] = []
    size = 0
    for v in _every_value(ctx, args[2:]):
        t = to_text(v)
        if isinstance(t, XlError):
            return t
        if t or not skip:
            parts.append(t)
            size += len(t) + len(sep)
            if size > MAX_TEXT + len(sep):
                _too_long()
    text = sep.join(parts)
    return text if len(text) <= MAX_TEXT else _too_long()


def _every_value(ctx: _Context, args: Sequence[Node | None]) -> Iterator[Scalar]:
    """Each value of each argument, empty cells of ranges included."""
    for arg in args:
        value = ctx.operand(arg)
        if isinstance(value, Area):
            for row in ctx.grid(value):
                yield from row
        elif isinstance(value, list):
            for row in value:
                yield from row
        else:
            yield value


# lookup


def _exact_key(v: Scalar) -> Callable[[Scalar], bool]:
    if isinstance(v, XlError):
        raise Refused("looking up an error value")
    if isinstance(v, bool | _Blank):
        raise Refused("looking up TRUE/FALSE or an empty cell")
    if isinstance(v, float):

        def number(c: Scalar) -> bool:
            if isinstance(c, bool):
                raise Refused("lookup over TRUE/FALSE cells")
            if isinstance(c, str) and _PLAIN.fullmatch(c):
                raise Refused("lookup over numbers stored as text")
            return isinstance(c, float) and c == v

        return number
    if any(ch in v for ch in "*?~"):
        raise Refused("lookup with wildcards")
    if _PLAIN.fullmatch(v):
        raise Refused("lookup of a number stored as text")
    text = v

    def same(c: Scalar) -> bool:
        if isinstance(c, bool):
            raise Refused("lookup over TRUE/FALSE cells")
        return isinstance(c, str) and _text_equal(text, c)

    return same


def _sorted_position(v: Scalar, column: list[Scalar], descending: bool = False) -> int | None:
    """The last position whose value is <= v in an ascending column (the
    binary search of both programs gives this answer on sorted data only:
    anything else is refused)."""
    if isinstance(v, XlError | bool | _Blank):
        raise Refused("approximate lookup of this value")
    keys: list[float | str] = []
    for c in column:
        if isinstance(v, float) and isinstance(c, float):
            keys.append(c)
        elif isinstance(v, str) and isinstance(c, str) and _ascii_word(c):
            keys.append(c.lower())
        else:
            raise Refused("approximate lookup over mixed or empty cells")
    target: float | str = v if isinstance(v, float) else v.lower()
    if isinstance(target, str) and not _ascii_word(target):
        raise Refused("text order depends on the collation")
    pairs = list(zip(keys, keys[1:], strict=False))
    if descending:
        if any(a < b for a, b in pairs):  # type: ignore[operator]
            raise Refused("approximate lookup over unsorted cells")
        found = None
        for i, k in enumerate(keys):
            if k >= target:  # type: ignore[operator]
                found = i
        return found
    if any(a > b for a, b in pairs):  # type: ignore[operator]
        raise Refused("approximate lookup over unsorted cells")
    found = None
    for i, k in enumerate(keys):
        if k <= target:  # type: ignore[operator]
            found = i
    return found


def _line(ctx: _Context, area: Area, index: int, *, column: bool) -> tuple[list[Scalar], bool]:
    """One column (or row) of an area, up to the sheet's last used cell;
    and whether it was cut there."""
    count = area.rows if column else area.cols
    sheet = ctx.book.sheets[area.sheet]
    used = (sheet.max_row - area.r1 + 1) if column else (sheet.max_col - area.c1 + 1)
    cut = count > used
    count = max(min(count, used), 0)
    if count > MAX_ARRAY_CELLS:
        raise Refused("range too large")
    if column:
        return [ctx.at(area, i, index) for i in range(count)], cut
    return [ctx.at(area, index, j) for j in range(count)], cut


def _find_exact(v: Scalar, line: list[Scalar]) -> int | None:
    test = _exact_key(v)
    return next((i for i, c in enumerate(line) if test(c)), None)


def _find_sorted(v: Scalar, line: list[Scalar], cut: bool, descending: bool = False) -> int | None:
    if cut:
        raise Refused("approximate lookup over a whole column or row")
    return _sorted_position(v, line, descending)


def _lookup_mode(ctx: _Context, node: Node | None) -> bool:
    """True for an exact match (FALSE or 0)."""
    if node is None:
        return False
    v = to_bool(ctx.scalar(node))
    if isinstance(v, XlError):
        raise Refused("lookup mode that is an error")
    return not v


def _xlookup(ctx: _Context, args: tuple[Node | None, ...], *, vertical: bool) -> Scalar:
    v = ctx.single(args[0])
    if isinstance(v, XlError):
        return v
    table = ctx.operand(args[1])
    if not isinstance(table, Area):
        raise Refused("lookup in an array constant")
    index = ctx.number(args[2])
    if isinstance(index, XlError):
        return index
    exact = _lookup_mode(ctx, args[3] if len(args) > 3 else None)
    n = math.trunc(index)
    if n < 1:
        return VALUE
    if n > (table.cols if vertical else table.rows):
        # Excel: #REF!; LibreOffice: #VALUE!.
        raise Refused("lookup column outside the table: the programs' errors differ")
    keys, cut = _line(ctx, table, 0, column=vertical)
    found = _find_exact(v, keys) if exact else _find_sorted(v, keys, cut)
    if found is None:
        return NA
    result = ctx.at(table, found, n - 1) if vertical else ctx.at(table, n - 1, found)
    return _not_blank(result, "VLOOKUP" if vertical else "HLOOKUP")


@_fn("VLOOKUP", 3, 4)
def _f_vlookup(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _xlookup(ctx, args, vertical=True)


@_fn("HLOOKUP", 3, 4)
def _f_hlookup(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _xlookup(ctx, args, vertical=False)


@_fn("MATCH", 2, 3)
def _f_match(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    v = ctx.single(args[0])
    if isinstance(v, XlError):
        return v
    area = ctx.operand(args[1])
    if not isinstance(area, Area):
        raise Refused("MATCH in an array constant")
    kind = ctx.number(args[2]) if len(args) > 2 and args[2] is not None else 1.0
    if isinstance(kind, XlError):
        return kind
    if area.rows != 1 and area.cols != 1:
        return NA
    line, cut = _line(ctx, area, 0, column=area.cols == 1)
    found = _find_exact(v, line) if kind == 0 else _find_sorted(v, line, cut, kind < 0)
    return NA if found is None else float(found + 1)


def _index(ctx: _Context, args: tuple[Node | None, ...]) -> Area | XlError:
    area = ctx.operand(args[0])
    if not isinstance(area, Area):
        raise Refused("INDEX of an array constant")
    row = ctx.number(args[1]) if args[1] is not None else 0.0
    col = ctx.number(args[2]) if len(args) > 2 and args[2] is not None else None
    if isinstance(row, XlError):
        if isinstance(col, XlError) and col != row:
            raise Refused("errors in two arguments: the programs differ")
        return row
    if isinstance(col, XlError):
        return col
    r = math.trunc(row)
    if col is None:
        if area.rows == 1 and area.cols > 1:
            r, c = 1, r  # INDEX(A1:E1, 3) is C1
        elif area.cols == 1:
            c = 1
        else:
            raise Refused("INDEX of a table without a column")
    else:
        c = math.trunc(col)
    if r == 0 or c == 0:
        raise Refused("INDEX of a whole row or column")
    if not (1 <= r <= area.rows and 1 <= c <= area.cols):
        # Excel: #REF!; LibreOffice: #VALUE!.
        raise Refused("INDEX outside its range: the programs' errors differ")
    return Area(area.sheet, area.r1 + r - 1, area.c1 + c - 1, area.r1 + r - 1, area.c1 + c - 1)


def _f_index(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    area = _index(ctx, args)
    if isinstance(area, XlError):
        return area
    return ctx.cell(area.sheet, area.r1, area.c1)


FUNCTIONS["INDEX"] = Function(_f_index, 2, 3)


# dates


_BASE_1900 = datetime.date(1899, 12, 30)
_BASE_1904 = datetime.date(1904, 1, 1)


def _to_date(ctx: _Context, serial: float) -> datetime.date | XlError:
    if serial < 0 or serial > MAX_SERIAL:
        # Excel: #NUM!; LibreOffice has dates before 1900 and after 9999.
        raise Refused("date outside Excel's years 1900-9999")
    if not ctx.book.date1904 and serial < 61:
        raise Refused("dates before March 1900 (Excel's 1900 leap year)")
    base = _BASE_1904 if ctx.book.date1904 else _BASE_1900
    try:
        return base + datetime.timedelta(days=math.floor(serial))
    except OverflowError:
        return NUM


def _serial(ctx: _Context, day: datetime.date) -> Scalar:
    base = _BASE_1904 if ctx.book.date1904 else _BASE_1900
    n = float((day - base).days)
    if not ctx.book.date1904 and n < 61:
        raise Refused("dates before March 1900 (Excel's 1900 leap year)")
    return n


def _date_part(part: Callable[[datetime.date], int]) -> Impl:
    def impl(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
        x = ctx.number(args[0])
        if isinstance(x, XlError):
            return x
        day = _to_date(ctx, x)
        return day if isinstance(day, XlError) else float(part(day))

    return impl


FUNCTIONS["YEAR"] = Function(_date_part(lambda d: d.year), 1, 1)
FUNCTIONS["MONTH"] = Function(_date_part(lambda d: d.month), 1, 1)
FUNCTIONS["DAY"] = Function(_date_part(lambda d: d.day), 1, 1)


def _month_shift(year: int, month: int, months: int) -> tuple[int, int]:
    total = year * 12 + (month - 1) + months
    return total // 12, total % 12 + 1


@_fn("DATE", 3)
def _f_date(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    parts: list[int] = []
    for a in args:
        x = ctx.number(a)
        if isinstance(x, XlError):
            return x
        if abs(x) > 1e7:
            raise Refused("date outside Excel's years 1900-9999")
        parts.append(math.trunc(x))
    y, m, d = parts
    if y < 1900:
        raise Refused("DATE with a two-digit year: the programs differ")
    y, m = _month_shift(y, 1, m - 1)
    try:
        day: datetime.date | None = datetime.date(y, m, 1) + datetime.timedelta(days=d - 1)
    except (OverflowError, ValueError):
        day = None
    if day is None or not 1900 <= day.year <= 9999:
        # Excel: #NUM!; LibreOffice goes on to the year 32767.
        raise Refused("date outside Excel's years 1900-9999")
    return _serial(ctx, day)


@_fn("EDATE", 2)
def _f_edate(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _months(ctx, args, end=False)


@_fn("EOMONTH", 2)
def _f_eomonth(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _months(ctx, args, end=True)


def _months(ctx: _Context, args: tuple[Node | None, ...], *, end: bool) -> Scalar:
    for a in args:
        if isinstance(ctx.scalar(a), bool):
            # Excel: #VALUE!; LibreOffice's TRUE is the number 1.
            raise Refused("TRUE/FALSE given to EDATE or EOMONTH: the programs differ")
    xy = _two(ctx, args)
    if isinstance(xy, XlError):
        return xy
    start = _to_date(ctx, xy[0])
    if isinstance(start, XlError):
        return start
    if abs(xy[1]) > 1e6:
        raise Refused("date outside Excel's years 1900-9999")
    y, m = _month_shift(start.year, start.month, math.trunc(xy[1]))
    if not 1900 <= y <= 9999:
        raise Refused("date outside Excel's years 1900-9999")
    last = 31 if m == 12 else (datetime.date(y, m + 1, 1) - datetime.timedelta(days=1)).day
    return _serial(ctx, datetime.date(y, m, last if end else min(start.day, last)))


@_fn("WEEKDAY", 1, 2)
def _f_weekday(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    x = ctx.number(args[0])
    if isinstance(x, XlError):
        return x
    kind = ctx.number(args[1]) if len(args) > 1 and args[1] is not None else 1.0
    if isinstance(kind, XlError):
        return kind
    day = _to_date(ctx, x)
    if isinstance(day, XlError):
        return day
    monday0 = day.weekday()
    if kind == 1:
        return float((monday0 + 1) % 7 + 1)
    if kind == 2:
        return float(monday0 + 1)
    if kind == 3:
        return float(monday0)
    raise Refused("WEEKDAY of this kind unsupported")


def _average(values: list[float]) -> Scalar:
    if not values:
        return DIV0
    total = _sum(values)
    return total if isinstance(total, XlError) else total / len(values)


def _product(values: list[float]) -> Scalar:
    product = math.prod(values) if values else 0.0
    if abs(product) >= 1e15 or (product == 0 and values and all(values)):
        raise Refused("product too large to compare")
    return product


_ARRAY_AGGREGATES: dict[str, Callable[[list[float]], Scalar]] = {
    "SUM": _sum,
    "AVERAGE": _average,
    "MIN": lambda values: min(values, default=0.0),
    "MAX": lambda values: max(values, default=0.0),
    "COUNT": lambda values: float(len(values)),
    "PRODUCT": _product,
}

# functions of Excel 2016-2019 (written _xlfn.NAME in files)


@_fn("IFS", 2, _MANY)
def _f_ifs(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    if len(args) % 2:
        raise Refused("IFS with an odd number of arguments")
    for i in range(0, len(args), 2):
        cond = to_bool(ctx.scalar(args[i]))
        if isinstance(cond, XlError):
            return cond
        if cond:
            return _not_blank(ctx.scalar(args[i + 1]), "IFS")
    return NA


@_fn("SWITCH", 3, _MANY)
def _f_switch(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    value = ctx.scalar(args[0])
    if isinstance(value, XlError):
        return value
    pairs = len(args) - 1
    for i in range(1, 1 + pairs - pairs % 2, 2):
        case = ctx.scalar(args[i])
        same = compare("=", _switch_blank(value, case), _switch_blank(case, value))
        if isinstance(same, XlError):
            return same
        if same:
            return _not_blank(ctx.scalar(args[i + 1]), "SWITCH")
    if pairs % 2:
        return _not_blank(ctx.scalar(args[-1]), "SWITCH")
    return NA


def _switch_blank(v: Scalar, other: Scalar) -> Scalar:
    """An empty cell in SWITCH: 0 to a number or another empty cell (Excel
    matches it there), but unlike in ``=`` no match for "" or FALSE in
    Excel, where LibreOffice's is not known."""
    if not isinstance(v, _Blank):
        return v
    if isinstance(other, str | bool):
        raise Refused("SWITCH of an empty cell and text or TRUE/FALSE: the programs differ")
    return 0.0


@_fn("XOR", 1, _MANY)
def _f_xor(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    values = _logical(ctx, args)
    if isinstance(values, XlError):
        return values
    return sum(values) % 2 == 1 if values else VALUE


def _extreme_ifs(
    ctx: _Context, args: tuple[Node | None, ...], fn: str, pick: Callable[[list[float]], float]
) -> Scalar:
    if len(args) % 2 == 0:
        raise Refused(f"{fn} with an even number of arguments")
    target = _area_arg(ctx, args[0], fn)
    pairs = [(_area_arg(ctx, args[i], fn), ctx.single(args[i + 1])) for i in range(1, len(args), 2)]
    if any(a.rows != target.rows or a.cols != target.cols for a, _ in pairs):
        raise Refused(f"{fn} over ranges of different sizes")
    values = _summed(ctx, target, _matching(ctx, pairs))
    if isinstance(values, XlError):
        return values
    return pick(values) if values else 0.0


@_fn("MAXIFS", 3, _MANY)
def _f_maxifs(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _extreme_ifs(ctx, args, "MAXIFS", max)


@_fn("MINIFS", 3, _MANY)
def _f_minifs(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    return _extreme_ifs(ctx, args, "MINIFS", min)


def _variance(ctx: _Context, args: tuple[Node | None, ...], *, sample: bool) -> float | XlError:
    values = _numbers(ctx, args, dates=False)
    if isinstance(values, XlError):
        return values
    n = len(values)
    if n < (2 if sample else 1):
        raise Refused("variance of too few numbers: the programs' errors differ")
    mean = math.fsum(values) / n
    return math.fsum((v - mean) ** 2 for v in values) / (n - 1 if sample else n)


def _spread(*, sample: bool, root: bool) -> Impl:
    def impl(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
        var = _variance(ctx, args, sample=sample)
        if isinstance(var, XlError):
            return var
        return math.sqrt(var) if root else var

    return impl


for _name, (_sample, _root) in {
    "STDEV": (True, True),
    "STDEV.S": (True, True),
    "STDEVP": (False, True),
    "STDEV.P": (False, True),
    "VAR": (True, False),
    "VAR.S": (True, False),
    "VARP": (False, False),
    "VAR.P": (False, False),
}.items():
    FUNCTIONS[_name] = Function(_spread(sample=_sample, root=_root), 1, _MANY)


@_fn("DAYS", 2)
def _f_days(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    xy = _two(ctx, args)
    if isinstance(xy, XlError):
        return xy
    end, start = _to_date(ctx, xy[0]), _to_date(ctx, xy[1])
    if isinstance(end, XlError) or isinstance(start, XlError):
        raise Refused("DAYS of a number that is no date")
    return float((end - start).days)


@_fn("DATEDIF", 3)
def _f_datedif(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    xy = _two(ctx, args)
    if isinstance(xy, XlError):
        return xy
    unit = ctx.text(args[2])
    if isinstance(unit, XlError):
        return unit
    start, end = _to_date(ctx, xy[0]), _to_date(ctx, xy[1])
    if isinstance(end, XlError) or isinstance(start, XlError):
        raise Refused("DATEDIF of a number that is no date")
    if start > end:
        raise Refused("DATEDIF backwards: Excel #NUM!, LibreOffice #VALUE!")
    unit = unit.upper()
    if unit == "D":
        return float((end - start).days)
    months = (end.year - start.year) * 12 + end.month - start.month - (end.day < start.day)
    if unit == "M":
        return float(months)
    if unit == "Y":
        return float(months // 12)
    raise Refused("DATEDIF with this unit unsupported")


def _time_part(part: Callable[[int], int]) -> Impl:
    def impl(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
        x = ctx.number(args[0])
        if isinstance(x, XlError):
            return x
        if x < 0:
            raise Refused("time of a negative number: the programs differ")
        fraction = x - math.floor(x)
        seconds = fraction * 86400
        if abs(seconds - round(seconds)) > 1e-6 and abs((seconds % 1) - 0.5) < 1e-3:
            raise Refused("time on a rounding edge")
        return float(part(round(seconds) % 86400))

    return impl


FUNCTIONS["HOUR"] = Function(_time_part(lambda s: s // 3600), 1, 1)
FUNCTIONS["MINUTE"] = Function(_time_part(lambda s: s // 60 % 60), 1, 1)
FUNCTIONS["SECOND"] = Function(_time_part(lambda s: s % 60), 1, 1)


@_fn("TIME", 3)
def _f_time(ctx: _Context, args: tuple[Node | None, ...]) -> Scalar:
    parts: list[int] = []
    for a in args:
        x = ctx.number(a)
        if isinstance(x, XlError):
            return x
        if not 0 <= x < 32768:
            raise Refused("TIME with a negative or huge part: the programs differ")
        parts.append(math.trunc(x))
    seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    if seconds >= 86400:
        raise Refused("TIME past 24 hours: the programs differ")
    return seconds / 86400


# INDEX also gives a reference: SUM(INDEX(...)) and A1:INDEX(...) read it.
_REFERENCE_FUNCTIONS["INDEX"] = _index


def evaluate(book: Book, sheet: str, row: int, col: int) -> Scalar:
    """The value of one cell, its formula computed; raises Refused."""
    return book.value(sheet, row, col)
