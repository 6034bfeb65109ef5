"""The one resume store (dialscore.reporting.resume_store) that probe runs and every evaluation
use: which stored rows are reused, which ids are missing again, and appends that survive a torn
line."""

from __future__ import annotations

import asyncio
import json

from dialscore.reporting.resume_store import ResumeStore, content_key


def _lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_settings_are_written_and_other_settings_are_stale(tmp_path):
    path = tmp_path / "s.jsonl"
    ResumeStore(path, key="key", settings={"mode": "a"}).append([{"key": "x", "v": 1}])
    assert json.loads(_lines(path)[0]) == {"key": "x", "settings": {"mode": "a"}, "v": 1}
    same = ResumeStore(path, key="key", settings={"mode": "a"})
    assert set(same.load()) == {"x"} and (same.stale, same.invalid) == (0, 0)
    other = ResumeStore(path, key="key", settings={"mode": "b"})
    assert other.load() == {} and other.stale == 1 and other.stale_settings == {"mode": "a"}
    assert other.missing([("x", "job")]) == [("x", "job")]


def test_invalid_rows_are_counted_and_their_ids_missing_again(tmp_path):
    path = tmp_path / "s.jsonl"
    rows = [{"id": "a", "n": 1}, {"id": "b", "n": "one"}, {"id": 3, "n": 1}, {"id": "c", "n": 2}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"id": "d", "n"')
    store = ResumeStore(path, valid=lambda row: isinstance(row.get("n"), int))
    assert set(store.load()) == {"a", "c"} and store.invalid == 3   # "b", the int id, the torn line
    todo = store.missing([("a", 1), ("b", 1), ("b", 1), ("c", 5), ("d", 1)],
                         fits=lambda row, n: row["n"] <= n)
    assert todo == [("b", 1), ("d", 1)]
    todo = store.missing([("c", 1)], fits=lambda row, n: row["n"] <= n)   # two is more than one
    assert todo == [("c", 1)] and store.invalid == 4 and "c" not in store.rows


def test_an_append_ends_a_torn_line_first_and_a_later_row_wins(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": "a", "n": 1}\n{"id": "b", "n')
    store = ResumeStore(path)
    store.load()
    store.append([{"id": "b", "n": 2}, {"id": "a", "n": 3}])
    assert _lines(path)[1:] == ['{"id": "b", "n', '{"id": "b", "n": 2}', '{"id": "a", "n": 3}']
    again = ResumeStore(path)
    assert again.load() == {"a": {"id": "a", "n": 3}, "b": {"id": "b", "n": 2}}
    assert again.invalid == 1


def test_fill_appends_block_by_block(tmp_path):
    store = ResumeStore(tmp_path / "s.jsonl", key="key", settings={"k": 1})
    blocks: list[list[str]] = []

    async def compute(values: list[str]) -> list[dict]:
        blocks.append(values)
        written = len(_lines(store.path)) if store.path.exists() else 0
        assert written == 2 * (len(blocks) - 1)   # every block before this one is on disk
        return [{"upper": v.upper()} for v in values]

    asyncio.run(store.fill([("1", "a"), ("2", "b"), ("3", "c")], 2, compute))
    assert blocks == [["a", "b"], ["c"]]
    assert [json.loads(line)["upper"] for line in _lines(store.path)] == ["A", "B", "C"]
    assert store.rows["3"] == {"key": "3", "settings": {"k": 1}, "upper": "C"}


def test_content_key_ignores_dict_order():
    assert content_key({"a": 1, "b": [1, "é"]}) == content_key({"b": [1, "é"], "a": 1})
    assert content_key({"a": 1}) != content_key({"a": 2})
