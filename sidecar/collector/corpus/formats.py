"""The file formats a corpus is imported from, on their own: the CLI names them in its
arguments without importing the corpus's item model (and what that imports)."""

from __future__ import annotations

FORMATS = ("jsonl", "csv")
