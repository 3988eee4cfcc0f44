"""Results: what a workload records, the summary statistics, results.json and the table."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RATIO = "ratio"  # paired: the same operation on the native folder and on the mount
ABSOLUTE = "absolute"  # one number per round (latency, throughput, memory)


@dataclass(frozen=True)
class Target:
    """A goal from the issue: ``value <op> bound`` where value is the median ratio
    (for ratio metrics) or the median value (for absolute ones)."""

    op: str  # '<=', '<', '>=', '>'
    bound: float
    text: str  # as shown in the table, e.g. '<=15x (ref)'

    def met(self, value: float) -> bool | None:
        if math.isnan(value):
            return None
        return {
            "<=": value <= self.bound,
            "<": value < self.bound,
            ">=": value >= self.bound,
            ">": value > self.bound,
        }[self.op]


@dataclass
class Metric:
    name: str
    unit: str
    kind: str = RATIO
    cold: bool = False
    target: Target | None = None
    note: str = ""
    native: list[float] = field(default_factory=list)
    mount: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)  # ABSOLUTE only

    def ratios(self) -> list[float]:
        return [m / n if n > 0 else math.nan for n, m in zip(self.native, self.mount, strict=False)]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "unit": self.unit,
            "kind": self.kind,
            "cold": self.cold,
            "note": self.note,
            "target": self.target.text if self.target else None,
        }
        if self.kind == RATIO:
            ratios = self.ratios()
            out.update(
                rounds=len(ratios),
                native=self.native,
                mount=self.mount,
                ratios=ratios,
                native_median=_median(self.native),
                mount_median=_median(self.mount),
                ratio_median=_median(ratios),
                ratio_min=_min(ratios),
                ratio_max=_max(ratios),
            )
            headline = out["ratio_median"]
        else:
            out.update(
                rounds=len(self.values),
                values=self.values,
                median=_median(self.values),
                min=_min(self.values),
                max=_max(self.values),
            )
            headline = out["median"]
        out["target_met"] = self.target.met(headline) if self.target else None
        return out


def _median(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def _min(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return min(xs) if xs else math.nan


def _max(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return max(xs) if xs else math.nan


@dataclass
class WorkloadResult:
    name: str
    status: str = "ok"  # ok | skipped | error
    note: str = ""
    error: str | None = None
    elapsed_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)

    def metric(self, name: str, unit: str, **kw: Any) -> Metric:
        """The metric called ``name``, created on first use."""
        for m in self.metrics:
            if m.name == name:
                return m
        m = Metric(name, unit, **kw)
        self.metrics.append(m)
        return m

    def add_note(self, text: str) -> None:
        self.note = f"{self.note}; {text}" if self.note else text

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "note": self.note,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 3),
            "info": self.info,
            "metrics": [m.summary() for m in self.metrics],
        }


def _clean(obj: Any) -> Any:
    """NaN is not JSON: write null instead."""
    if isinstance(obj, float):
        return None if math.isnan(obj) else obj
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def write_json(path: Path, meta: dict[str, Any], results: list[WorkloadResult]) -> None:
    doc = {"meta": meta, "workloads": {r.name: r.to_json() for r in results}}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_clean(doc), indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def _fmt(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) >= 1000:
            return f"{x:.0f}"
        if abs(x) >= 10:
            return f"{x:.1f}"
        if abs(x) >= 0.01:
            return f"{x:.3f}".rstrip("0").rstrip(".") if abs(x) < 1 else f"{x:.2f}"
        return f"{x:.2e}"
    return str(x)


HEADER = (
    "workload",
    "metric",
    "unit",
    "native",
    "mount",
    "ratio",
    "min",
    "max",
    "n",
    "target",
    "ok",
    "note",
)


def table_rows(results: list[WorkloadResult]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for r in results:
        has_data = any(m.native or m.mount or m.values for m in r.metrics)
        if r.status != "ok" and not has_data:
            text = r.note if r.status == "skipped" else f"ERROR: {r.error}"
            rows.append((r.name, "-", "", "", "", "", "", "", "", "", r.status, text))
            continue
        for m in r.metrics:
            s = m.summary()
            met = s["target_met"]
            ok = "" if met is None else ("yes" if met else "NO")
            note = s["note"]
            if m.kind == RATIO:
                cells = (
                    _fmt(s["native_median"]),
                    _fmt(s["mount_median"]),
                    _fmt(s["ratio_median"]) + ("x" if s["ratios"] else ""),
                    _fmt(s["ratio_min"]),
                    _fmt(s["ratio_max"]),
                )
            else:
                cells = ("", _fmt(s["median"]), "", _fmt(s["min"]), _fmt(s["max"]))
            rows.append(
                (r.name, m.name, m.unit, *cells, str(s["rounds"]), s["target"] or "", ok, note)
            )
        if r.status == "error":
            rows.append((r.name, "-", "", "", "", "", "", "", "", "", "error", str(r.error)))
        elif r.note and r.metrics:
            rows.append((r.name, "-", "", "", "", "", "", "", "", "", "", r.note))
    return rows


def format_table(results: list[WorkloadResult]) -> str:
    rows = [HEADER, *table_rows(results)]
    # The last column (note) is not padded so long notes do not widen the table.
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    lines = []
    for i, row in enumerate(rows):
        cells = [
            c.ljust(w) if j < 3 else c.rjust(w)
            for j, (c, w) in enumerate(zip(row[:-1], widths, strict=True))
        ]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths) + "  ----")
    return "\n".join(lines)
