"""The one formatter of configuration errors: where (file:line), which key, what is valid."""

import pytest
from pydantic import Field

from pipeline.config.strict import Strict, line_of, validated
from pipeline.core.errors import UserError


class Inner(Strict):
    size: int = Field(1, gt=0)


class Outer(Strict):
    name: str
    inner: Inner = Inner()
    items: list[Inner] = []


TEXT = "name: x\ninner:\n  size: 2\nitems:\n  - size: 1\n  - sise: 3\n"


def test_unknown_key_in_a_list_item_names_its_line_and_the_valid_keys():
    data = {"name": "x", "inner": {"size": 2}, "items": [{"size": 1}, {"sise": 3}]}
    with pytest.raises(UserError) as e:
        validated(Outer, data, "f.yaml", TEXT)
    assert str(e.value) == "f.yaml:6: unknown key 'items.1.sise' (valid here: size)"


def test_bad_value_and_missing_key():
    with pytest.raises(UserError, match=r"^f.yaml:3: inner.size: Input should be greater than 0"):
        validated(Outer, {"name": "x", "inner": {"size": 0}}, "f.yaml", TEXT)
    with pytest.raises(UserError, match=r"^settings: missing key 'name'$"):
        validated(Outer, {}, "settings")


def test_line_of_stops_at_the_deepest_known_key():
    assert line_of(TEXT, ("inner", "size")) == 3
    assert line_of(TEXT, ("inner", "nope")) == 2
    assert line_of("a: [1,", ("a",)) is None  # malformed YAML: no line
