"""The full-text half of the search index: tantivy, in ``STORE/search.tantivy/``.

One document per unit: ``unit`` (the unit's id in ``search.sqlite``, indexed
and stored) and ``text`` (English stemming, stored for snippets).  Only the
daemon's indexer thread (or a command run without a daemon) writes; any
process may read.  Deletes are by unit id.

``within``, ``matching``, ``frequency`` and ``highlight`` serve the queries
of a caller who may read only part of the index (``swfs.find.search``): a query
filtered to a set of units, every document it matches, how often a
document holds a term, and the best passage of a text by weights the
caller gives; ``analyze`` gives the index's own terms of a text.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import tantivy

DIR_NAME = "search.tantivy"
WRITER_HEAP = 64 * 1024 * 1024
RELOAD_EVERY = 0.5  # seconds a reader trusts its view of the index
MERGE_WINDOW = 10.0  # seconds after a commit its merges may still write files
# Commits a tantivy Index object serves before it is dropped and opened
# again.  One that stays open holds a little more of malloc'd memory after
# every commit, until it is dropped (tantivy 0.27 through tantivy-py: a few
# thousand small commits grow malloc's in-use figure by megabytes with
# nothing left in the index; dropped now and then it stays flat).  The
# daemon's indexer commits once a burst of changes,
# so over a long run of small edits that was most of its growth.  Opening
# again costs a few milliseconds, less than one commit.
REOPEN_AFTER = 256


# What the "en_stem" tokenizer the text field names is made of (tantivy's
# default): words split at every character that is not alphanumeric, longer
# than 40 bytes dropped, lowercased, English (Porter2) stems.
def _analyzer() -> Any:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _frequency_in(explanation: str) -> int | None:
    """A term's frequency in a document, read from the explanation (JSON)
    of a term query's score: BM25's inputs, without the whole index's
    statistics around them.  Found by its description, then the value
    before it (plain string searches: a regular expression took most of a
    query's time)."""
    at = explanation.find('"freq, occurrences of term')
    start = explanation.rfind('"value"', 0, at) if at >= 0 else -1
    colon = explanation.find(":", start, at) if start >= 0 else -1
    comma = explanation.find(",", colon, at) if colon >= 0 else -1
    if comma < 0:
        return None
    try:
        return int(float(explanation[colon + 1 : comma]))
    except ValueError:
        return None


def _schema() -> Any:
    sb = tantivy.SchemaBuilder()
    # fast: the units of many matches are read at once, without their text
    # (``units_at``).
    sb.add_integer_field("unit", stored=True, indexed=True, fast=True)
    sb.add_text_field("text", stored=True, tokenizer_name="en_stem")
    return sb.build()


class TextIndex:
    # A reader beside the daemon that keeps the index: it opens an index that
    # exists and never makes one (the daemon may be rebuilding it).
    readonly = False

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._index: Any = None
        self._writer: Any = None
        self._dirty = False  # documents added or deleted since the last commit
        self._committed_at = -MERGE_WINDOW  # monotonic time of the last commit
        self._reloaded = 0.0
        self._commits = 0  # since the index was opened
        self._lock = threading.Lock()
        self._open_lock = threading.Lock()  # one Index made at a time
        self.schema = _schema()
        self.analyzer = _analyzer()

    @property
    def index(self) -> Any:
        index = self._index
        if index is not None:
            return index
        with self._open_lock:
            if self._index is None and self.readonly:
                self._index = tantivy.Index.open(str(self.directory))  # ValueError: none
            if self._index is None:
                # It holds the text of every file: closed to others,
                # whatever the umask of the process that makes it.
                self.directory.mkdir(mode=0o700, exist_ok=True)
                with contextlib.suppress(OSError):  # a reader that does not own it
                    os.chmod(self.directory, 0o700)
                self._index = tantivy.Index(self.schema, path=str(self.directory), reuse=True)
                self.close_files()
            return self._index

    def close_files(self) -> None:
        """Take group and other bits off the index's files (tantivy creates
        them with the process's umask: a command's own may be 022)."""
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
                if st.st_mode & 0o077:
                    os.chmod(e.path, st.st_mode & 0o700, follow_symlinks=False)
            except OSError:
                continue

    # -- writing (one thread)

    def _w(self) -> Any:
        if self._writer is None:
            self._writer = self.index.writer(heap_size=WRITER_HEAP, num_threads=1)
        return self._writer

    def add(self, unit: int, text: str) -> None:
        self._w().add_document(tantivy.Document(unit=unit, text=text))
        self._dirty = True

    def delete(self, unit: int) -> None:
        self._w().delete_documents_by_term("unit", unit)
        self._dirty = True

    def commit(self) -> None:
        """Commit what was added or deleted; nothing when nothing was (a
        tantivy commit writes and syncs its meta files even then, a few
        milliseconds for each burst of changes to files without text)."""
        if self._writer is not None and self._dirty:
            self._writer.commit()
            self._dirty = False
            self._committed_at = time.monotonic()
            self.close_files()
            self._reloaded = 0.0
            self._commits += 1
            if self._commits >= REOPEN_AFTER:
                self.reopen()

    def reopen(self) -> None:
        """Drop the writer and the index; both are opened again when next
        used (``REOPEN_AFTER``).  Waits for the writer's merges, which frees
        its lock file for the next writer.  The writing thread only."""
        with self._lock:
            writer, self._writer = self._writer, None
            self._index = None
            self._commits = 0
        if writer is not None:
            writer.wait_merging_threads()
            self.close_files()

    def close_new_files(self) -> None:
        """``close_files`` again for a while after a commit, for the
        segments its merges (in tantivy's threads) write since."""
        if time.monotonic() - self._committed_at < MERGE_WINDOW:
            self.close_files()

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.wait_merging_threads()
                self._writer = None
                self.close_files()
            self._index = None

    # -- reading (any thread)

    def searcher(self) -> Any:
        now = time.monotonic()
        if now - self._reloaded > RELOAD_EVERY:
            self.index.reload()
            self._reloaded = now
        return self.index.searcher()

    def parse(self, expr: str) -> Any:
        return self.index.parse_query(expr, ["text"])

    def text_of(self, searcher: Any, unit: int) -> str:
        found = searcher.search(tantivy.Query.term_query(self.schema, "unit", unit), 1, count=False)
        if not found.hits:
            return ""
        return str(searcher.doc(found.hits[0][1])["text"][0])

    def snippets(self, searcher: Any, query: Any, chars: int = 160) -> Any:
        """A snippet generator for ``query``: made once per query."""
        gen = tantivy.SnippetGenerator.create(searcher, query, self.schema, "text")
        gen.set_max_num_chars(chars)
        return gen

    def snippet(self, searcher: Any, gen: Any, addr: Any) -> str:
        """The best passage of a hit, its matched words in ``**bold**``."""
        sn = gen.snippet_from_doc(searcher.doc(addr))
        frag: str = sn.fragment()
        raw = frag.encode("utf-8")
        out, at = [], 0
        try:
            for r in sn.highlighted():  # byte ranges of the fragment
                out.append(raw[at : r.start].decode("utf-8"))
                out.append("**" + raw[r.start : r.end].decode("utf-8") + "**")
                at = r.end
            out.append(raw[at:].decode("utf-8"))
        except UnicodeDecodeError:
            return frag
        return "".join(out)

    # -- queries over part of the index

    def analyze(self, text: str) -> list[str]:
        """The terms the index keeps for ``text``, in order."""
        return list(self.analyzer.analyze(text))

    def units(self, units: Iterable[int]) -> Any:
        """A query matching the documents of ``units`` (for ``within``)."""
        return tantivy.Query.term_set_query(self.schema, "unit", list(units))

    @staticmethod
    def within(query: Any, units: Any) -> Any:
        """``query``, matched only by the documents ``units`` (a query of
        ``self.units``) matches."""
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, query), (tantivy.Occur.Must, units)]
        )

    def term(self, term: str) -> Any:
        """A query for one term as the index keeps it (``analyze``'s output)."""
        return tantivy.Query.term_query(self.schema, "text", term)

    @staticmethod
    def matching(searcher: Any, query: Any, most: int) -> list[Any]:
        """The address of every document matching ``query``, up to
        ``most``, in no meaningful order (their scores are not used)."""
        return [addr for _score, addr in searcher.search(query, max(1, most), count=False).hits]

    @staticmethod
    def units_at(searcher: Any, addrs: list[Any]) -> list[int]:
        """The unit of each document at ``addrs``."""
        return [int(u) for u in searcher.fast_field_values("unit", addrs)]

    @staticmethod
    def text_at(searcher: Any, addr: Any) -> str:
        return str(searcher.doc(addr)["text"][0])

    def frequency(self, searcher: Any, term: str, query: Any, addr: Any) -> int:
        """How many times the document at ``addr`` (which holds it) holds
        ``term`` (``query``: ``self.term(term)``), as its postings say;
        counted in its text where tantivy's explanation does not say."""
        found = _frequency_in(query.explain(searcher, addr).to_json())
        if found is not None:
            return found
        return self.analyze(self.text_at(searcher, addr)).count(term)

    def highlight(self, text: str, weights: Mapping[str, float], chars: int = 160) -> str:
        """The best passage of ``text``, its matched words in ``**bold**``:
        tantivy's snippet algorithm (windows of ``chars`` characters, the
        one whose terms weigh the most, the first of equals), with the
        weights of the terms given here instead of taken from the whole
        index."""
        best: tuple[float, int, int, list[tuple[int, int]]] | None = None
        start, stop, score = 0, 0, 0.0
        marks: list[tuple[int, int]] = []
        for tok in self.analyzer.pre_tokenize(text).tokens:
            a, b = tok.char_offset_from, tok.char_offset_to
            if b - start > chars:
                if score > 0 and (best is None or score > best[0]):
                    best = (score, start, stop, marks)
                start, stop, score, marks = a, a, 0.0, []
            stop = b
            w = weights.get(tok.text)
            if w is not None:
                score += w
                marks.append((a, b))
        if score > 0 and (best is None or score > best[0]):
            best = (score, start, stop, marks)
        if best is None:
            return ""
        _, start, stop, marks = best
        out, at = [], start
        for a, b in marks:
            out.append(text[at:a])
            out.append("**" + text[a:b] + "**")
            at = b
        out.append(text[at:stop])
        return "".join(out)

    def size(self) -> int:
        if not self.directory.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.directory.rglob("*") if p.is_file())
