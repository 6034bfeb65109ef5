"""The batch job's parts that need no model: line checks, scoring order, and reading an output
file back for a resume."""

from __future__ import annotations

import json

from batch_kit import nll_line
from dialscore_server.batch.grouping import in_scoring_order
from dialscore_server.batch.lines import Rejected, Request, output_line, parse_line
from dialscore_server.batch.output import OutputFile


def test_line_checks_name_the_field_and_keep_ids_unique():
    seen: set[str] = set()
    ok = parse_line(json.dumps(nll_line("a", ["hi"], "yo")), 1, seen)
    assert isinstance(ok, Request) and ok.custom_id == "a" and ok.method == "POST"
    cases = {
        "not json": (None, None),
        "[1, 2]": (None, None),
        json.dumps({"method": "POST", "url": "/v1/nll", "body": {}}): (None, "custom_id"),
        json.dumps({"custom_id": "", "method": "POST", "url": "/v1/nll", "body": {}}):
            (None, "custom_id"),
        json.dumps(nll_line("a", ["hi"], "again")): ("a", "custom_id"),  # duplicate
        json.dumps({"custom_id": "m", "url": "/v1/nll", "body": {}}): ("m", "method"),
        json.dumps({"custom_id": "u", "method": "POST", "body": {}}): ("u", "url"),
        json.dumps({"custom_id": "b", "method": "POST", "url": "/v1/nll"}): ("b", "body"),
    }
    for number, (text, (custom_id, param)) in enumerate(cases.items(), start=2):
        got = parse_line(text, number, seen)
        assert isinstance(got, Rejected), text
        assert (got.line, got.custom_id, got.error.param) == (number, custom_id, param), text
        assert got.error.type == "invalid_request" and got.error.status == 422


def test_requests_sharing_a_model_and_context_become_neighbours():
    lines = [nll_line("1", ["A"], "x"), nll_line("2", ["B"], "x"), nll_line("3", ["A"], "y"),
             nll_line("4", ["A"], "z", model="other"), nll_line("5", ["B"], "y"),
             nll_line("6", ["A"], "w")]
    requests = [parse_line(json.dumps(x), i, set()) for i, x in enumerate(lines, start=1)]
    order = [r.custom_id for r in in_scoring_order(requests)]
    assert order == ["1", "3", "6", "2", "5", "4"]


def test_resume_reads_whole_lines_and_cuts_a_torn_tail(tmp_path):
    out = OutputFile(tmp_path / "out.jsonl")
    assert out.resume().lines == set()
    duplicate = {"error": {"type": "invalid_request", "message": "dup", "param": "custom_id"}}
    out.append([output_line(1, "a", 200, {"results": []}),
                output_line(2, "b", 404, {"error": {"type": "unknown_model", "message": "m",
                                                    "param": "model"}}),
                output_line(9, "c", 422, duplicate)])
    whole = out.path.read_bytes()
    with out.path.open("ab") as f:
        f.write(b'{"id": "batch-x", "custom_id": "d", "li')  # a write cut short
    done = out.resume()
    assert done.torn_bytes == len(b'{"id": "batch-x", "custom_id": "d", "li')
    assert out.path.read_bytes() == whole
    assert done.lines == {1, 2, 9} and (done.ok, done.failed) == (1, 1 + 1)
    # The duplicate's refusal answers its line, not the custom_id (whose own line may be pending).
    assert done.custom_ids == {"a", "b"}
    assert done.covers(9, "c") and not done.covers(3, "c") and done.covers(3, "a")


def test_the_batch_package_does_not_import_the_gateway():
    import ast
    from pathlib import Path

    import dialscore_server.batch as batch

    for path in Path(batch.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith("dialscore_server.gateway") for n in names), path
