"""Office Math (OMML) as linear text, close to Word's own linear format.

``x^2``, ``(a+b)/(2c)``, ``√(x)``, ``∑_(i=1)^n i``, ``sin(θ)``, ``[1, 0; 0, 1]``:
what an agent greps for and can read back, not a typeset picture.  A group is
parenthesised only when it is more than one letter or number, so ``x^2``
and ``10^12`` stay as they are and ``x^(n+1)`` keeps its meaning; a
fraction's parts are grouped unless all digits or all letters.
"""

from __future__ import annotations

from xml.etree.ElementTree import Element

M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"

# Equations nest (a fraction in a root in a sum ...); real ones stay shallow.
# Past this depth the text is kept, the structure dropped: no recursion limit
# is ever reached on untrusted nesting.
_MAX_DEPTH = 48


def linear(math: Element) -> str:
    """The linear form of an ``m:oMath`` or ``m:oMathPara`` element."""
    if math.tag == M + "oMathPara":
        return " ".join(t for t in (_node(e, 0) for e in math.iter(M + "oMath")) if t)
    return _node(math, 0).strip()


def _flat(element: Element) -> str:
    return "".join(t.text or "" for t in element.iter() if t.tag in (M + "t", W + "t"))


def _group(text: str) -> str:
    return text if len(text) <= 1 or text.isalnum() else f"({text})"


def _fraction_part(text: str) -> str:
    return text if len(text) <= 1 or text.isdecimal() or text.isalpha() else f"({text})"


def _val(element: Element, prop: str, name: str, default: str) -> str:
    found = element.find(f"{M}{prop}/{M}{name}")
    if found is None:
        return default
    return found.get(M + "val", default)


def _node(element: Element, depth: int) -> str:
    if depth > _MAX_DEPTH:
        return _flat(element)
    tag = element.tag

    def part(name: str) -> str:
        child = element.find(M + name)
        return _node(child, depth + 1) if child is not None else ""

    if tag in (M + "t", W + "t"):
        return element.text or ""
    if tag == M + "f":
        bar = "¦" if _val(element, "fPr", "type", "bar") == "noBar" else "/"
        # "2a" alone is a unit, but "x/2a" reads as "(x/2)a": fractions group it.
        return f"{_fraction_part(part('num'))}{bar}{_fraction_part(part('den'))}"
    if tag == M + "sSup":
        return f"{_group(part('e'))}^{_group(part('sup'))}"
    if tag == M + "sSub":
        return f"{_group(part('e'))}_{_group(part('sub'))}"
    if tag == M + "sSubSup":
        return f"{_group(part('e'))}_{_group(part('sub'))}^{_group(part('sup'))}"
    if tag == M + "sPre":
        return f"_{_group(part('sub'))}^{_group(part('sup'))} {part('e')}"
    if tag == M + "rad":
        degree = part("deg")
        return f"√({degree}&{part('e')})" if degree else f"√{_group(part('e'))}"
    if tag == M + "nary":
        text = _val(element, "naryPr", "chr", "∫")
        if sub := part("sub"):
            text += "_" + _group(sub)
        if sup := part("sup"):
            text += "^" + _group(sup)
        return f"{text} {part('e')}"
    if tag == M + "d":
        begin = _val(element, "dPr", "begChr", "(")
        end = _val(element, "dPr", "endChr", ")")
        sep = _val(element, "dPr", "sepChr", "|")
        items = [_node(e, depth + 1) for e in element.findall(M + "e")]
        return begin + sep.join(items) + end
    if tag == M + "func":
        name, arg = part("fName"), part("e")
        return name + arg if arg.startswith(("(", "[", "{")) else f"{name}({arg})"
    if tag in (M + "limLow", M + "limUpp"):
        mark = "_" if tag == M + "limLow" else "^"
        return f"{part('e')}{mark}{_group(part('lim'))}"
    if tag == M + "acc":
        return part("e") + _val(element, "accPr", "chr", "\u0302")
    if tag == M + "groupChr":
        return _group(part("e")) + _val(element, "groupChrPr", "chr", "\u23df")
    if tag == M + "bar":
        mark = "\u0332" if _val(element, "barPr", "pos", "bot") == "bot" else "\u0305"
        return _group(part("e")) + mark
    if tag == M + "eqArr":
        return "; ".join(_node(e, depth + 1) for e in element.findall(M + "e"))
    if tag == M + "m":
        rows = [
            ", ".join(_node(e, depth + 1) for e in row.findall(M + "e"))
            for row in element.findall(M + "mr")
        ]
        return "[" + "; ".join(rows) + "]"
    if tag.endswith("Pr") or tag in (W + "delText", W + "instrText"):
        return ""  # properties; text deleted by a tracked change
    return "".join(_node(child, depth + 1) for child in element)
