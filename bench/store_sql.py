"""The store's SQL: lines of code, and how many statements are written once rather than per dialect.

Reads ``sidecar/store/*.py`` (it imports nothing from it): every string literal that starts
a statement (``SELECT``, ``INSERT``, ``UPDATE``, ``DELETE``, ``WITH``, ``CREATE``, ``ALTER``,
``DROP``) is one statement; a migration script counts each of its ``;``-separated statements.
A literal is *per dialect* when its module is one dialect's (``*sqlite*``, ``*_pg*``,
``postgres*``, ``schema.py``: SQLite's migrations), *once* otherwise (a query module both
dialects render through :mod:`sidecar.store.dialect`).

Migrations (``*schema*`` modules: DDL, numbered per dialect) are counted apart: they stay
per dialect by design. The share is of the other statements, the queries.

Of the per-dialect statements, *twins* are those whose normalised text (``$n`` → ``?``,
``::type`` casts dropped, whitespace and case folded) the other dialect also holds: the
duplication the dialect layer exists to remove.

    python bench/store_sql.py            # every module of sidecar/store
    python bench/store_sql.py --quick    # the same (it reads files; there is nothing to shorten)
    python bench/store_sql.py --store DIR   # another tree's store, e.g. an older commit's
"""

from __future__ import annotations

import argparse
import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "sidecar" / "store"
_STATEMENT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP)\b")  # as the store writes SQL: upper case


def dialect_of(name: str) -> str:
    if "schema" in name:
        return "migrations"
    if name in ("postgres.py", "schema_pg.py") or name.endswith("_pg.py"):
        return "pg"
    if name in ("sqlite.py", "schema.py") or name.endswith("_sqlite.py"):
        return "sqlite"
    return "once"


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def statements(path: Path) -> list[str]:
    """The SQL statements written as literals in one module."""
    found: list[str] = []
    inner: set[int] = set()  # the pieces of an f-string are not literals of their own
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inner.update(id(v) for v in node.values)
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        text = _text(node)
        if text is None:
            continue
        for part in text.split(";"):
            if _STATEMENT.match(part):
                found.append(part)
    return found


def normalise(sql: str) -> str:
    sql = re.sub(r"\$\d+", "?", sql)
    sql = re.sub(r"::\s*[a-z_]+(\[\])?", "", sql, flags=re.I)
    sql = re.sub(r"\s*([(),=<>!])\s*", r"\1", sql)
    sql = sql.replace("<>", "!=")
    return re.sub(r"\s+", " ", sql).strip().lower()


#: The modules of the collector's and the watches' tables (the rest is the sidecar's own).
OTHERS = ("corpus_", "collected_", "watch_")


def measure(store: Path = STORE, *, own: bool = False) -> dict[str, object]:
    files = sorted(p for p in store.glob("*.py") if not (own and p.name.startswith(OTHERS)))
    lines = sum(len(p.read_text().splitlines()) for p in files)
    by: dict[str, list[str]] = {"once": [], "sqlite": [], "pg": [], "migrations": []}
    for path in files:
        by[dialect_of(path.name)].extend(statements(path))
    sqlite_norm = Counter(normalise(s) for s in by["sqlite"])
    pg_norm = Counter(normalise(s) for s in by["pg"])
    twins = sum(n for s, n in sqlite_norm.items() if s in pg_norm) + sum(n for s, n in pg_norm.items() if s in sqlite_norm)
    once, per = len(by["once"]), len(by["sqlite"]) + len(by["pg"])
    return {"files": len(files), "lines": lines, "once": once, "sqlite": len(by["sqlite"]), "pg": len(by["pg"]),
            "per": per, "twins": twins, "share": once / max(1, once + per), "migrations": len(by["migrations"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the same measure (kept for the suite's bench run)")
    parser.add_argument("--store", type=Path, default=STORE, help="the store folder to read")
    args = parser.parse_args()
    for label, m in (("sidecar/store/*.py", measure(args.store)),
                     ("own tables (not corpus_*, collected_*, watch_*)", measure(args.store, own=True))):
        print(f"## {label}")
        print(f"store modules: {m['files']}, lines: {m['lines']:,}")
        print(f"migration statements (per dialect by design): {m['migrations']}")
        print(f"query statements: {m['once']} defined once, {m['per']} per dialect "
              f"({m['sqlite']} SQLite, {m['pg']} PostgreSQL; {m['twins']} of them twins of the other dialect's)")
        print(f"share of query statements defined once: {m['share']:.0%}")


if __name__ == "__main__":
    main()
