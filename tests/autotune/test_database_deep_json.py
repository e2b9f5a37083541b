"""A tuning database line of deeply nested JSON (deeper than Python's parsers recurse) is a corrupt
line like any other: warned about with its file and line, skipped, and every other record loads."""
import json
import warnings

import pytest

from tessera.autotune.database import Database
from test_database import TARGET, _good_db

DEEP = 100_000


def _nested_line(where, record_line, key):
    deep = "[" * DEEP + "]" * DEEP
    if where == "record header":          # the fast path: a record split at its trace
        return record_line.replace('"error":null', '"error":null,"extra":' + deep, 1)
    if where == "record trace":           # read lazily, when the records are asked for
        return record_line.replace('"trace":[', '"trace":[' + deep + ",", 1)
    if where == "workload":
        return json.dumps({"workload": key})[:-1] + ',"func":' + '{"a":' * DEEP + "1" + "}" * DEEP + "}"
    return '{"other":' + deep + "}"       # a line of no known form


@pytest.mark.parametrize("where", ["record header", "record trace", "workload", "other line"])
def test_deeply_nested_line_is_skipped_with_a_warning_and_the_other_records_load(tmp_path, where):
    path = tmp_path / "db.jsonl"
    wl = _good_db(path, n=4)
    lines = path.read_text().splitlines()
    lines.insert(2, _nested_line(where, lines[1], "cd" * 8))
    path.write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        db = Database(path)
        records = db.records()
        top = db.get_top_k(wl, TARGET, 10)
    assert len(records) == 4 and len(top) == 4
    assert [r.run_secs for r in records] == [(1e-3 * (i + 1),) for i in range(4)]
    assert [r._lineno for r in records] == [2, 4, 5, 6]
    messages = [str(w.message) for w in got]
    assert len(messages) == 1 and messages[0].startswith(f"{path}:3: ")
    assert "nested too deeply to read" in messages[0]
    # the database stays usable: it appends after the skipped line and reads its own records back
    db.commit([records[0]])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert len(Database(path).records()) == 5
