"""The ``search_index`` workload: what ranked search costs over the
benchmark workspace (11,000 files in the full sizes).

* indexing cost as a share of parse cost: the workspace is parsed into a
  fresh store (``drain``, the parse workers' wall time), then the index is
  built from that parse cache (one thread, wall time);
* the index's size against the parsed text it holds;
* warm latency of two-word queries, in the engine (what the daemon runs per
  query) and end to end through the mount (``cat MNT/.search/<query>``);
* the same corpus in a bare SQLite FTS5 table and in a bare tantivy index:
  build time, size and query latency, what the choice between the two
  rested on.
"""

from __future__ import annotations

import functools
import logging
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from bench import gen
from bench.common import STORE, Ctx, run_tool, timed
from bench.mounter import BenchError, SwfsMounter, Unsupported
from bench.report import ABSOLUTE, Target, WorkloadResult
from swfs.engine import Engine
from swfs.find.search import Caller

log = logging.getLogger(__name__)

QUERIES = 20  # measured two-word queries (after as many to warm up)
INDEX_BOUND_S = 1800.0


def _pairs(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        a, b = rng.sample(gen.WORDS, 2)
        q = f"{a} {b}"
        if q not in out:
            out.append(q)
    return out


def _p90(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(len(xs) * 0.9) - 1)] if xs else float("nan")


def _unit_texts(eng: Engine) -> list[tuple[int, str]]:
    """(unit id, text) of every indexed unit, from the parse cache."""
    conn = eng.search_index._connect()
    out: list[tuple[int, str]] = []
    for cid, key in conn.execute("SELECT id, key FROM contents").fetchall():
        h, _, parser = key.partition("|")
        ids = conn.execute("SELECT id FROM units WHERE content = ? ORDER BY id", (cid,)).fetchall()
        units = eng.workspace.parse_units(h, parser) or []
        out += [(uid, text) for (uid,), (_n, _l, text) in zip(ids, units, strict=False)]
    return out


def _fts5_bare(eng: Engine, queries: list[str], result: WorkloadResult) -> None:
    """The same corpus in a bare FTS5 table: what the engine's figures cost
    beyond FTS5 itself (reading the parse cache, access checks, snippets)."""
    import sqlite3

    rows = _unit_texts(eng)
    d = Path(tempfile.mkdtemp(prefix="swfs-fts5-"))
    try:
        conn = sqlite3.connect(d / "bare.sqlite")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE VIRTUAL TABLE fts USING fts5(text, tokenize='porter unicode61')")
        t0 = time.perf_counter()
        with conn:
            conn.executemany("INSERT INTO fts(rowid, text) VALUES(?, ?)", rows)
        result.metric("fts5_bare_index_s", "s", kind=ABSOLUTE).values.append(
            time.perf_counter() - t0
        )
        lat = []
        for i, q in enumerate(queries):
            expr = " OR ".join(f'"{w}"' for w in q.split())
            t0 = time.perf_counter()
            conn.execute(
                "SELECT rowid, text FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 20", [expr]
            ).fetchall()
            if i >= len(queries) // 2:
                lat.append(time.perf_counter() - t0)
        result.metric(
            "fts5_bare_query_ms", "ms", kind=ABSOLUTE, note="top 20 with text, median, warm"
        ).values.append(statistics.median(lat) * 1000)
        conn.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _tantivy(eng: Engine, queries: list[str], result: WorkloadResult) -> None:
    import tantivy

    rows = _unit_texts(eng)
    d = Path(tempfile.mkdtemp(prefix="swfs-tantivy-"))
    try:
        sb = tantivy.SchemaBuilder()
        sb.add_integer_field("unit", stored=True, indexed=True)
        sb.add_text_field("text", stored=True, tokenizer_name="en_stem")
        schema = sb.build()
        index = tantivy.Index(schema, path=str(d))
        t0 = time.perf_counter()
        writer = index.writer()
        for uid, text in rows:
            writer.add_document(tantivy.Document(unit=uid, text=text))
        writer.commit()
        writer.wait_merging_threads()
        build = time.perf_counter() - t0
        index.reload()
        searcher = index.searcher()
        lat = []
        for i, q in enumerate(queries):
            t0 = time.perf_counter()
            found = searcher.search(index.parse_query(q, ["text"]), 20)
            for _score, addr in found.hits:
                searcher.doc(addr)
            if i >= len(queries) // 2:
                lat.append(time.perf_counter() - t0)
        size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
        result.metric("tantivy_index_s", "s", kind=ABSOLUTE).values.append(build)
        result.metric(
            "tantivy_query_ms", "ms", kind=ABSOLUTE, note="top 20 with text, median, warm"
        ).values.append(statistics.median(lat) * 1000)
        result.metric("tantivy_index_mb", "MB", kind=ABSOLUTE).values.append(size / 1e6)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def search_index(ctx: Ctx, result: WorkloadResult) -> None:
    if not isinstance(ctx.mounter, SwfsMounter):
        raise Unsupported("needs --mounter swfs")
    sw = ctx.mounter
    sw.require("mount", "umount", "sync")
    src = gen.workspace(ctx.data, ctx.sizes.ws_files, ctx.sizes.ws_dirs)
    store = src / STORE  # the mount below reuses these parses and this index
    shutil.rmtree(store, ignore_errors=True)
    queries = _pairs(2 * QUERIES, seed=14)
    share = result.metric(
        "index_vs_parse", "fraction", kind=ABSOLUTE, target=Target("<=", 0.25, "<=25%")
    )
    engine_ms = result.metric(
        "query_engine_ms",
        "ms",
        kind=ABSOLUTE,
        target=Target("<=", 100.0, "<=100 ms"),
        note="two words, warm, median",
    )
    with Engine.open(src, store) as eng:
        eng.scan()
        t_parse = timed(lambda: trio.run(functools.partial(eng.drain, scan=False)))
        stats = eng.search_index.catch_up()
        sizes = eng.search_index.sizes()
        eng.search_index.notify_all()
        t_reconcile = timed(eng.search_index.catch_up)
        parsed_bytes = sizes["text_bytes"]
        result.info.update(
            files=sizes["files"],
            units=sizes["units"],
            text_bytes=parsed_bytes,
            index_bytes=sizes["index_bytes"],
            parse_wall_s=round(t_parse, 2),
            index_wall_s=round(stats.secs, 2),
            reconcile_unchanged_s=round(t_reconcile, 3),
        )
        result.metric("parse_s", "s", kind=ABSOLUTE).values.append(t_parse)
        result.metric("index_s", "s", kind=ABSOLUTE).values.append(stats.secs)
        share.values.append(stats.secs / t_parse if t_parse > 0 else float("nan"))
        result.metric(
            "index_vs_text", "fraction", kind=ABSOLUTE, note="index bytes / parsed text bytes"
        ).values.append(sizes["index_bytes"] / max(parsed_bytes, 1))
        for caller, metric in ((Caller(0), engine_ms), (Caller(65534), None)):
            for q in queries[:QUERIES]:
                eng.search_index.search(q, caller)
            lat, cpu = [], []
            for q in queries[QUERIES:]:
                c0 = time.thread_time()
                lat.append(timed(functools.partial(eng.search_index.search, q, caller)) * 1000)
                cpu.append((time.thread_time() - c0) * 1000)
            if metric is None:
                metric = result.metric(
                    "query_engine_other_ms",
                    "ms",
                    kind=ABSOLUTE,
                    note="as a user who is not the owner: every hit's access checked",
                )
            metric.values.append(statistics.median(lat))
            result.info[f"query_ms_p90_uid{caller.uid}"] = round(_p90(lat), 2)
            result.info[f"query_cpu_ms_median_uid{caller.uid}"] = round(statistics.median(cpu), 2)
        _fts5_bare(eng, queries, result)
        _tantivy(eng, queries, result)

    mount_ms = result.metric(
        "query_mount_ms",
        "ms",
        kind=ABSOLUTE,
        target=Target("<=", 100.0, "<=100 ms"),
        note="cat MNT/.search/'two words', warm, median",
    )
    with sw.mounted(src, ctx.mountpoint("search")) as m:
        sw.settle(m)
        probe = m.mountpoint / ".search" / queries[0]
        deadline = time.monotonic() + INDEX_BOUND_S
        while "catching up" in probe.read_text(encoding="utf-8").splitlines()[0]:
            if time.monotonic() > deadline:
                raise BenchError(f"the mount's index did not catch up in {INDEX_BOUND_S:.0f} s")
            time.sleep(0.5)
        for q in queries[:QUERIES]:
            run_tool(["cat", m.mountpoint / ".search" / q])
        lat = [run_tool(["cat", m.mountpoint / ".search" / q])[0] * 1000 for q in queries[QUERIES:]]
        mount_ms.values.append(statistics.median(lat))
        result.info["query_mount_ms_p90"] = round(_p90(lat), 2)


WORKLOADS: dict[str, Any] = {"search_index": search_index}
