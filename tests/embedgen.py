"""A tiny static-embedding model in the model2vec layout, written by hand:
``tokenizer.json`` (a word-level vocabulary) and ``model.safetensors`` (one
float32 matrix).  Synonyms share a direction, so a vector search can find
a word the text does not contain."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

# Each group's words point the same way; every group is its own axis.
GROUPS = (
    ("revenue", "income", "turnover", "sales"),
    ("north", "northern", "arctic"),
    ("weather", "wind", "rain"),
    ("contract", "agreement", "clause"),
)


def write_model(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    vocab: dict[str, int] = {"[UNK]": 0}
    rows = [np.zeros(len(GROUPS), dtype=np.float32)]
    for axis, words in enumerate(GROUPS):
        for word in words:
            vocab[word] = len(rows)
            row = np.full(len(GROUPS), 0.05, dtype=np.float32)
            row[axis] = 1.0
            rows.append(row)
    matrix = np.stack(rows)
    tokenizer = {"version": "1.0", "model": {"type": "WordLevel", "vocab": vocab}}
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    raw = matrix.astype("<f4").tobytes()
    header = json.dumps(
        {"embeddings": {"dtype": "F32", "shape": list(matrix.shape), "data_offsets": [0, len(raw)]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + raw)
    (directory / "config.json").write_text('{"normalize": true}', encoding="utf-8")
    return directory
