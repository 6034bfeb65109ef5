"""The strict JSON reader's own checks, on the raw bytes (contract/strict_json.py; no app)."""

from __future__ import annotations

import pytest

from dialscore_server.contract.errors import ServiceError
from dialscore_server.contract.strict_json import MAX_DEPTH, check_shape, loads_strict


@pytest.mark.parametrize("body, value", [
    (b'{"a": "\\ud83d\\ude00"}', {"a": "\U0001F600"}),          # a surrogate pair: one character
    (b'{"a": "\\\\ud800"}', {"a": "\\ud800"}),                  # an escaped backslash, then text
    (b'{"a": ["x\\"y", "\\\\", ""], "b": "\\u00e9"}', {"a": ['x"y', "\\", ""], "b": "\u00e9"}),
])
def test_accepted(body, value):
    assert loads_strict(body) == value


@pytest.mark.parametrize("body, param", [
    (b'{"a": ["ok", "\\ud800"]}', "a[1]"),
    (b'{"a": "\\uDFFF"}', "a"),
    (b'{"a": {"\\udc00": 1}}', "a"),
])
def test_lone_surrogates_are_refused_naming_the_field(body, param):
    with pytest.raises(ServiceError) as err:
        loads_strict(body)
    assert err.value.type == "invalid_request" and err.value.param == param
    assert "surrogate" in str(err.value)


def test_nesting_and_value_count_are_checked_on_the_bytes():
    """Brackets inside strings (escaped quotes included) count neither as nesting nor as values."""
    deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    with pytest.raises(ServiceError, match="nested deeper"):
        loads_strict(deep)
    inside = b'["' + b"[[[[,,,,\\\"[[[" * 20 + b'"]'
    check_shape(inside, max_values=2, max_depth=1)  # one array, one string
    assert loads_strict(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    with pytest.raises(ServiceError) as err:
        check_shape(b"[1, 2, 3]", max_values=3)
    assert err.value.type == "payload_too_large"
