"""A local static-embedding model (model2vec layout), for hybrid search.

A model is a directory the user already has; nothing is ever fetched::

    tokenizer.json      a Hugging Face tokenizer: its ``model.vocab`` (a
                        {token: id} map, or a Unigram [[token, score], ...] list)
    model.safetensors   one 2-D tensor (``embeddings``), a row per token id,
                        float32, float16 or float64

A text's vector is the mean of its tokens' rows, scaled to unit length (so
that a dot product is the cosine).  Words
are lower-cased and split on non-word characters; a word missing from the
vocabulary is cut WordPiece-style into the longest pieces it has
(``##``-prefixed continuations, or SentencePiece's ``▁`` word start).
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import numpy as np

MAX_TOKENS = 4096  # tokens of one unit that count (static vectors saturate fast)
_WORD = re.compile(r"\w+", re.UNICODE)
_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


class ModelError(Exception):
    """The directory is not a usable model; the message names the cause."""


def _read_safetensors(path: Path) -> np.ndarray[Any, Any]:
    data = path.read_bytes()
    if len(data) < 8:
        raise ModelError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8 : 8 + n])
    except ValueError as exc:
        raise ModelError(f"{path}: bad safetensors header: {exc}") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if not tensors:
        raise ModelError(f"{path}: holds no tensor")
    name = "embeddings" if "embeddings" in tensors else next(iter(tensors))
    info = tensors[name]
    dtype = _DTYPES.get(info.get("dtype"))
    shape = info.get("shape")
    if dtype is None or not isinstance(shape, list) or len(shape) != 2:
        raise ModelError(f"{path}: tensor {name!r} is not a 2-D float matrix")
    start, end = info["data_offsets"]
    raw = data[8 + n + start : 8 + n + end]
    mat = np.frombuffer(raw, dtype=dtype)
    if mat.size != shape[0] * shape[1]:
        raise ModelError(f"{path}: tensor {name!r} is cut short")
    return mat.reshape(shape).astype(np.float32)


def _read_vocab(path: Path) -> dict[str, int]:
    try:
        tok = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read the tokenizer: {exc}") from None
    vocab = (tok.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        return {str(k): int(v) for k, v in vocab.items()}
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], ids by position
        return {str(entry[0]): i for i, entry in enumerate(vocab)}
    raise ModelError(f"{path}: no model.vocab in the tokenizer")


@dataclass
class EmbedModel:
    vocab: dict[str, int]
    matrix: np.ndarray[Any, Any]
    fingerprint: str

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    @classmethod
    def load(cls, directory: str | Path) -> EmbedModel:
        d = Path(directory)
        if not d.is_dir():
            raise ModelError(f"{d}: not a directory")
        tok, weights = d / "tokenizer.json", d / "model.safetensors"
        for p in (tok, weights):
            if not p.is_file():
                raise ModelError(
                    f"{d}: no {p.name} (a model2vec model has tokenizer.json and model.safetensors)"
                )
        vocab = _read_vocab(tok)
        matrix = _read_safetensors(weights)
        if vocab and max(vocab.values()) >= matrix.shape[0]:
            raise ModelError(f"{d}: the vocabulary has more ids than the matrix has rows")
        h = blake3.blake3(tok.read_bytes())
        h.update(weights.read_bytes())
        return cls(vocab, matrix, h.hexdigest()[:16])

    def _pieces(self, word: str) -> list[int]:
        v = self.vocab
        for form in (word, "▁" + word):
            if form in v:
                return [v[form]]
        out: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while end > start:
                piece = word[start:end]
                cands = (piece, "▁" + piece) if start == 0 else ("##" + piece, piece)
                for c in cands:
                    if c in v:
                        found = v[c]
                        break
                if found is not None:
                    break
                end -= 1
            if found is None:
                start += 1  # a character the vocabulary lacks: skipped
                continue
            out.append(found)
            start = end
        return out

    def tokens(self, text: str) -> list[int]:
        out: list[int] = []
        for m in _WORD.finditer(text.lower()):
            out.extend(self._pieces(m.group()))
            if len(out) >= MAX_TOKENS:
                break
        return out[:MAX_TOKENS]

    def embed(self, text: str) -> np.ndarray[Any, Any]:
        ids = self.tokens(text)
        if not ids:
            return np.zeros(self.dim, dtype=np.float32)
        v = self.matrix[ids].mean(axis=0)
        n = float(np.linalg.norm(v))
        if n > 0:
            v = v / n
        return v.astype(np.float32)
