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
import sqlite3
import sys
import time
from collections.abc import Callable
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


#: The reservation's conditional update, as SQLite runs it (one write at a time, on its thread).
_RESERVE = ("UPDATE trials SET reserved_micros = reserved_micros + ? WHERE id = ? AND status = 'running' "
            "AND spent_micros + reserved_micros + ? <= cap_micros")


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(3):  # the best of three: the machine is shared
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def single_writer(n: int) -> dict[str, float]:
    """µs per reservation statement on SQLite (in memory: the statement's own cost, no disk),
    written raw, through the dialect layer, and through SQLAlchemy Core when it is installed."""
    sys.path.insert(0, str(ROOT))
    from sidecar.store.dialect import sq

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE TABLE trials (id TEXT PRIMARY KEY, status TEXT, reserved_micros INTEGER, "
                 "spent_micros INTEGER, cap_micros INTEGER)")
    conn.execute("INSERT INTO trials VALUES ('t', 'running', 0, 0, 1000000000000000)")
    out = {
        "raw sqlite3": _per_call_us(lambda: conn.execute(_RESERVE, (1, "t", 1)), n),
        "dialect layer (bind + execute)": _per_call_us(lambda: conn.execute(*sq(_RESERVE, 1, "t", 1)), n),
        "dialect layer, bind alone": _per_call_us(lambda: sq(_RESERVE, 1, "t", 1), n),
    }
    try:
        import sqlalchemy as sa
    except ImportError:
        return out
    engine = sa.create_engine("sqlite://")
    with engine.begin() as c:
        c.execute(sa.text("CREATE TABLE trials (id TEXT PRIMARY KEY, status TEXT, reserved_micros INTEGER, "
                          "spent_micros INTEGER, cap_micros INTEGER)"))
        c.execute(sa.text("INSERT INTO trials VALUES ('t', 'running', 0, 0, 1000000000000000)"))
    t = sa.table("trials", *(sa.column(c) for c in ("id", "status", "reserved_micros", "spent_micros", "cap_micros")))
    m = sa.bindparam("m")
    stmt = sa.update(t).values(reserved_micros=t.c.reserved_micros + m).where(
        t.c.id == sa.bindparam("tid"), t.c.status == "running",
        t.c.spent_micros + t.c.reserved_micros + m <= t.c.cap_micros)
    with engine.connect() as c:
        out[f"SQLAlchemy {sa.__version__} Core (compiled-statement cache)"] = _per_call_us(
            lambda: c.execute(stmt, {"m": 1, "tid": "t"}), n)
    return out


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
    print("## the reservation's conditional update on SQLite, µs per statement (best of 3)")
    for label, us in single_writer(2_000 if args.quick else 50_000).items():
        print(f"{label:>60}: {us:7.2f} µs")


if __name__ == "__main__":
    main()
