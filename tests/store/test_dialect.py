"""The dialect layer (:mod:`sidecar.store.dialect`): one statement, what each driver takes.

The conformance suite runs every statement against both real databases; this pins the
rendering itself."""

from __future__ import annotations

from sidecar.store.dialect import POSTGRES, SQLITE, chunks, pg, rowcount, sq


def test_parameters_are_numbered_in_postgresql_and_left_as_they_are_in_sqlite() -> None:
    statement = "UPDATE t SET a = ? WHERE id = ? AND b IS NOT DISTINCT FROM ?:text RETURNING *"
    assert sq(statement, 1, "x", None) == (
        "UPDATE t SET a = ? WHERE id = ? AND b IS NOT DISTINCT FROM ? RETURNING *", (1, "x", None)
    )
    assert pg(statement, 1, "x", None) == (
        "UPDATE t SET a = $1 WHERE id = $2 AND b IS NOT DISTINCT FROM $3::text RETURNING *", 1, "x", None
    )


def test_a_list_parameter_is_expanded_in_sqlite_and_one_array_in_postgresql() -> None:
    statement = "DELETE FROM t WHERE team = ? AND id IN ?[] AND n > ?"
    assert sq(statement, "a", ("x", "y", "z"), 3) == (
        "DELETE FROM t WHERE team = ? AND id IN (?, ?, ?) AND n > ?", ("a", "x", "y", "z", 3)
    )
    assert sq(statement, "a", ["x"], 3) == ("DELETE FROM t WHERE team = ? AND id IN (?) AND n > ?", ("a", "x", 3))
    assert sq(statement, "a", [], 3) == ("DELETE FROM t WHERE team = ? AND id IN (NULL) AND n > ?", ("a", 3))
    assert pg(statement, "a", ("x", "y"), 3) == (
        "DELETE FROM t WHERE team = $1 AND id = ANY($2::text[]) AND n > $3", "a", ["x", "y"], 3
    )
    assert pg("SELECT 1 WHERE n IN ?[bigint]", [1])[0] == "SELECT 1 WHERE n = ANY($1::bigint[])"


def test_the_words_the_dialects_spell_differently() -> None:
    statement = (
        "SELECT {GREATEST}(a, ?) FROM t WHERE b = ? ORDER BY c {COLLATE_C} {FOR_UPDATE}; "
        "SELECT id FROM q LIMIT ? {SKIP_LOCKED}"
    )
    assert SQLITE.sql(statement) == "SELECT MAX(a, ?) FROM t WHERE b = ? ORDER BY c  ; SELECT id FROM q LIMIT ? "
    assert POSTGRES.sql(statement) == (
        'SELECT GREATEST(a, $1) FROM t WHERE b = $2 ORDER BY c COLLATE "C" FOR UPDATE; '
        "SELECT id FROM q LIMIT $3 FOR UPDATE SKIP LOCKED"
    )


def test_helpers() -> None:
    assert rowcount("INSERT 0 1") == 1 and rowcount("DELETE 7") == 7
    assert [len(c) for c in chunks(list(range(1201)))] == [500, 500, 201]
