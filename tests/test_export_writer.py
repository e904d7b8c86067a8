"""The JSON writer (pipeline/jsontext.py): msgspec where it prints exactly what json.dumps(indent=2) prints (the
standard library is the reference here), and the export of a large index; neither may change a byte of
the index."""

import json
import math
import shutil

import hypothesis.strategies as st
import msgspec
import pytest
from conftest import SEED_AS_OF, SEED_RETRIEVED, examples, tree_digest
from hypothesis import given, settings

import pipeline.export
from pipeline.errors import PipelineError
from pipeline.export import _rows_by_task, export
from pipeline.jsontext import PLAIN_FLOAT_RANGE, dumps
from pipeline.paths import Paths

finite_floats = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | finite_floats | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=examples(60, 600), deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_dumps_is_json_dumps_byte_for_byte(document):
    assert dumps(document) == json.dumps(document, indent=2).encode("ascii")
    # The release metadata's spelling and the stored extra fields'.
    assert dumps(document, ensure_ascii=False) == json.dumps(document, indent=2, ensure_ascii=False).encode()
    assert dumps(document, indent=None, ensure_ascii=False, sort_keys=True) == json.dumps(
        document, ensure_ascii=False, sort_keys=True).encode()


def test_dumps_escapes_what_ascii_cannot_hold():
    document = {"é": "× ÷ \x7f \u2028 😀", "k": [1e-05, 1e16, 0.0001, 123.5, 2**64]}
    assert dumps(document) == json.dumps(document, indent=2).encode("ascii")
    with pytest.raises(UnicodeEncodeError, match="surrogates not allowed"):
        dumps({"lone surrogate": "\ud800"})


@settings(max_examples=examples(200, 2000), deadline=None)
@given(st.floats(min_value=PLAIN_FLOAT_RANGE[0], max_value=PLAIN_FLOAT_RANGE[1], exclude_max=True), st.booleans())
def test_floats_in_the_plain_range_print_alike(value, negative):
    value = -value if negative else value
    assert msgspec.json.encode(value) == json.dumps(value).encode()
    assert dumps({"v": [value]}, floats_vetted=True) == json.dumps({"v": [value]}, indent=2).encode()


def test_plain_range_bounds_are_where_the_formats_part():
    low, high = PLAIN_FLOAT_RANGE
    below = math.nextafter(low, 0)
    assert msgspec.json.encode(below) != json.dumps(below).encode()  # 9.999999999999999e-05 vs 0.0000999…
    # The upper bound keeps a margin: a value just under it that rounds up still prints alike.
    assert all(msgspec.json.encode(v) == json.dumps(v).encode()
               for v in (high, math.nextafter(high, 0), math.nextafter(high * 10, 0)))
    assert msgspec.json.encode(high * 10) != json.dumps(high * 10).encode()  # 1e16 vs 1e+16


def test_an_export_with_floats_outside_the_plain_range_writes_the_same_files(newest_build: Paths, tmp_path,
                                                                            monkeypatch):
    """Floats the export has not vetted take the slower path through the document, to the same bytes."""
    monkeypatch.setattr(pipeline.jsontext, "PLAIN_FLOAT_RANGE", (1.0, 10.0))
    unvetted = Paths(tmp_path / "out")
    shutil.copytree(newest_build.out, unvetted.out, symlinks=True)
    export(unvetted, as_of=SEED_AS_OF, retrieved=SEED_RETRIEVED)
    assert tree_digest(unvetted.out, "index") == tree_digest(newest_build.out, "index")


def test_export_as_a_large_index_writes_the_same_files(newest_build: Paths, tmp_path, monkeypatch):
    """Each task's tiers read by a query of its own."""
    monkeypatch.setattr(pipeline.export, "LARGE_INDEX_CONFIGURATIONS", 0)
    split = Paths(tmp_path / "out")
    shutil.copytree(newest_build.out, split.out, symlinks=True)
    export(split, as_of=SEED_AS_OF, retrieved=SEED_RETRIEVED)
    assert tree_digest(split.out, "index") == tree_digest(newest_build.out, "index")


def test_rows_by_task_gives_each_task_its_rows_and_refuses_rows_out_of_order():
    rows = [{"task": "a", "n": 1}, {"task": "a", "n": 2}, {"task": "c", "n": 3}]
    assert list(_rows_by_task(iter(rows), ["a", "b", "c", "d"])) == [rows[:2], [], rows[2:], []]
    with pytest.raises(PipelineError, match="rows of task c out of the tasks' order"):
        list(_rows_by_task(iter(rows), ["c", "a"]))
