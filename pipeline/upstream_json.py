"""The upstream's JSON, read one way: msgspec decodes each file into types generated from the schemas
(each upstream column's JSON path, type and presence), refusing a value of another JSON type, an
integer beyond 64 bits, NaN, a number no double holds, a byte order mark and malformed UTF-8.

A file with keys the schemas do not declare, or with a value they refuse, is decoded again without
types and converted object by object with the same types: unknown keys are kept (extra_fields) and
every refused value is worded with its file, entry and field, not just the first.

Repeated keys: msgspec, like every fast decoder, keeps a repeated key's last value. The keys of a JSON
text are exactly its colons outside strings, so a file with as many colons as keys decoded repeats
none. Where strings hold colons the exact count is taken (strings removed by a regular expression);
only where keys still outnumber those decoded does the standard library's parser decide whether a
repeated key conflicts (the upstream's 2025-12-15 text-to-image file repeats one with its value).
"""

import dataclasses
import functools
import json
import math
import re
from collections import Counter
from operator import attrgetter
from typing import Annotated, Any

import msgspec

from pipeline import jsontext
from pipeline.errors import PipelineError
from schemas import dictionary
from schemas.types import TYPES

COUNT = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
ABSENT = msgspec.UNSET
Absent = msgspec.UnsetType
_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
          "object": "a JSON object", "array": "a list"}


class Histogram(msgspec.Struct, forbid_unknown_fields=True):
    """An output_length_distribution: n + 1 bin edges and n counts."""

    bins: list[float]
    counts: list[COUNT]


# Where a detail file and each of its configurations hold their Histogram.
HISTOGRAM_KEY = "output_length_distribution"
HISTOGRAM_PROBLEM = (
    "output_length_distribution must be {bins: numbers, counts: counts} with one more bin edge than counts"
)


@dataclasses.dataclass(frozen=True)
class RowType:
    """The msgspec type of one kind of upstream object, generated from its table's schema."""

    struct: type[msgspec.Struct]
    paths: dict[str, tuple[str, ...]]  # upstream column -> its JSON path
    groups: dict[str, type[msgspec.Struct]]  # nested objects whose keys are columns (parallelization)
    file: Any = None  # for a task file's rows: the type of the whole file


def row_type(table: str, name: str, extra: tuple[tuple[str, Any, Any], ...] = ()) -> RowType:
    """A Struct with one field per upstream column of `table` (required ones without default; an
    absent optional one is ABSENT, so that decoded keys can be counted) and the `extra` fields."""
    paths, columns = dictionary.json_paths(table), dictionary.table_entry(table).columns
    top: list[tuple[str, Any, Any]] = []
    nested: dict[str, list[tuple[str, Any, Any]]] = {}
    for column, path in paths.items():
        json_type = TYPES[dictionary.field_type(column)].json | None
        if len(path) == 1:
            top.append((path[0], json_type) if columns[column].upstream == "required"
                       else (path[0], json_type | Absent, ABSENT))
        else:
            nested.setdefault(path[0], []).append((path[1], json_type | Absent, ABSENT))
    groups = {
        parent: msgspec.defstruct(f"{name}_{parent}", fields, kw_only=True, forbid_unknown_fields=True)
        for parent, fields in nested.items()
    }
    top += [(parent, struct | None | Absent, ABSENT) for parent, struct in groups.items()]
    struct = msgspec.defstruct(name, [*top, *extra], kw_only=True, forbid_unknown_fields=True)
    return RowType(struct, paths, groups)


@functools.cache
def file_types() -> dict[str, RowType]:
    """The msgspec types of the upstream's objects, by the table they go to."""
    histogram = (HISTOGRAM_KEY, Histogram | Absent, ABSENT)
    types = {"models": row_type("models", "ModelRow"),
             "model_detail_configurations": row_type("model_detail_configurations", "DetailRow", (histogram,))}
    types["model_details"] = row_type("model_details", "DetailFile", (
        ("configurations", list[types["model_detail_configurations"].struct]), histogram))
    for table, name in (("token_configurations", "Token"), ("diffusion_configurations", "Diffusion")):
        rows = row_type(table, f"{name}Row")
        types[table] = dataclasses.replace(rows, file=msgspec.defstruct(f"{name}TaskFile", [
            ("task", str | Absent, ABSENT), ("task_display_name", str), ("architecture", str | None | Absent, ABSENT),
            ("configurations", list[rows.struct]),
        ], kw_only=True, forbid_unknown_fields=True))
    return types


def _finite_float(text: str) -> float:
    if not math.isfinite(value := float(text)):
        raise ValueError(f"number {text} is out of range for a 64-bit float")
    return value


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def _no_conflicting_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object, refusing a key given twice with different values (the same value twice is harmless
    and real: the upstream's 2025-12-15 text-to-image file repeats weight_precision in every entry)."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj and obj[key] != value:
            raise ValueError(f"key {key!r} appears twice in one object with different values")
        obj[key] = value
    return obj


def _strict_refusal(name: str, data: bytes) -> PipelineError | None:
    """Why `data` is not JSON as RFC 8259 says (UTF-8 without BOM, no NaN/Infinity, no key given two
    values), naming `name` and the position; None when it is. The standard library's parser, because
    msgspec (fast, and used wherever a file is well formed) keeps a repeated key's last value and
    gives no line and column."""
    if data.startswith(b"\xef\xbb\xbf"):
        return PipelineError(f"{name}: starts with a UTF-8 byte order mark, which JSON does not allow")
    try:
        json.loads(data.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float,
                   object_pairs_hook=_no_conflicting_keys)
    except UnicodeDecodeError as error:
        return PipelineError(f"{name}: invalid UTF-8 at byte {error.start}")
    except json.JSONDecodeError as error:
        return PipelineError(
            f"{name}: malformed JSON at line {error.lineno} column {error.colno} (char {error.pos}): {error.msg}")
    except ValueError as error:
        return PipelineError(f"{name}: invalid JSON: {error}")
    except RecursionError:
        return PipelineError(f"{name}: JSON nested too deeply to parse")
    return None


class Irregular(Exception):
    """The typed decoding refused the file: it is read object by object (read_objects)."""


def decode(name: str, data: bytes, file_type: Any) -> Any:
    """The file decoded into `file_type`; raises Irregular where a value or key is not as declared."""
    try:
        return msgspec.json.decode(data, type=file_type)
    except msgspec.ValidationError:
        raise Irregular from None
    except (msgspec.DecodeError, RecursionError) as error:
        raise _strict_refusal(name, data) or PipelineError(f"{name}: invalid JSON: {error}") from None


def decode_untyped(name: str, data: bytes) -> Any:
    """The file as JSON values (dicts, lists), repeated keys checked."""
    try:
        document = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as error:
        raise _strict_refusal(name, data) or PipelineError(f"{name}: invalid JSON: {error}") from None
    check_repeated_keys(name, data, _keys_of(document))
    return document


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


def check_repeated_keys(name: str, data: bytes, decoded_keys: int) -> None:
    if data.count(b":") != decoded_keys and _STRING.sub(b"", data).count(b":") != decoded_keys:
        if refusal := _strict_refusal(name, data):  # a repeated key with two values
            raise refusal


def _keys_of(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(map(_keys_of, value.values()))
    return sum(map(_keys_of, value)) if isinstance(value, list) else 0


def columns_of(items: list[Any], kind: RowType) -> tuple[dict[str, list[Any]], int]:
    """Each upstream column's values over `items` (absent as None), and how many keys they held."""
    by_path, keys = _fields_of(items, kind.struct, kind.groups)
    return {column: by_path[path] for column, path in kind.paths.items()}, keys


def _fields_of(
    items: list[Any], struct: type[msgspec.Struct], groups: dict[str, type[msgspec.Struct]]
) -> tuple[dict[tuple[str, ...], list[Any]], int]:
    values_by_path: dict[tuple[str, ...], list[Any]] = {}
    keys = 0
    for field in struct.__struct_fields__:
        values = list(map(attrgetter(field), items))
        if absent := values.count(ABSENT):
            values = [None if value is ABSENT else value for value in values]
        keys += len(values) - absent
        if field in groups:
            nested, nested_keys = _fields_of([value for value in values if value is not None], groups[field], {})
            keys += nested_keys
            for (child,), child_values in nested.items():
                remaining = iter(child_values)
                values_by_path[(field, child)] = [None if value is None else next(remaining) for value in values]
        elif field == HISTOGRAM_KEY:
            keys += len(Histogram.__struct_fields__) * (len(values) - values.count(None))
        values_by_path[(field,)] = values
    return values_by_path, keys


def read_objects(
    objects: list[tuple[str, Any]], kind: RowType, file_name: str, problems: list[str]
) -> tuple[list[Any], list[str | None]]:
    """Convert each (where, object) to `kind`, keeping unknown keys (as extras_text) and adding a
    worded problem for every object refused; a missing required key is counted per file rather than
    named per entry."""
    items, extras = [], []
    missing: Counter[str] = Counter()
    for where, obj in objects:
        if not isinstance(obj, dict):
            problems.append(f"{where}: must be a JSON object")
            continue
        known, unknown = _split(obj, kind)
        try:
            items.append(msgspec.convert(known, kind.struct))
        except msgspec.ValidationError as error:
            if field := re.search(r"missing required field `([^`]+)`", str(error)):
                missing[field.group(1)] += 1
            else:
                problems.append(f"{where}: {_worded(error, known)}")
        extras.append(extras_text(unknown))
    for name, count in sorted(missing.items()):
        problems.append(f"{file_name}: missing required field '{name}' in {count} entr{'y' if count == 1 else 'ies'}")
    return items, extras


def extras_text(unknown: dict[str, Any]) -> str | None:
    """Unknown keys as the stored text spells them (sorted, ", " and ": " between items, as the views and
    their users read it since the first release); None when there are none."""
    return jsontext.dumps(unknown, indent=None, ensure_ascii=False, sort_keys=True).decode() if unknown else None


def _split(obj: dict[str, Any], kind: RowType) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the declared keys, the rest) of an object; a nested group's unknown keys stay under its name."""
    declared = set(kind.struct.__struct_fields__)
    known = {key: value for key, value in obj.items() if key in declared}
    unknown = {key: value for key, value in obj.items() if key not in declared}
    for key, group in kind.groups.items():
        if isinstance(value := known.get(key), dict):
            known[key] = {k: v for k, v in value.items() if k in group.__struct_fields__}
            if rest := {k: v for k, v in value.items() if k not in group.__struct_fields__}:
                unknown[key] = rest
    return known, unknown


def _worded(error: msgspec.ValidationError, obj: dict[str, Any]) -> str:
    """msgspec's refusal as this project words it: the field, what was expected and the value."""
    text = str(error)
    located = re.search(r" - at `\$((?:\.[^.`\[]+|\[\d+\])*)`$", text)
    steps = re.findall(r"\.([^.`\[]+)|\[(\d+)\]", located.group(1)) if located else []
    path = [key or int(index) for key, index in steps]
    if path and path[0] == HISTOGRAM_KEY:
        return HISTOGRAM_PROBLEM
    value: Any = obj
    for step in path:
        value = value[step]
    expected = re.match(r"Expected `(\w+)", text)
    field = ".".join(map(str, path))
    if expected and expected.group(1) == "int" and isinstance(value, int) and not isinstance(value, bool):
        return f"field '{field}': integer {value} is out of the 64-bit range"
    if expected and expected.group(1) in _WORDS:
        return f"field '{field}': expected {_WORDS[expected.group(1)]}, got {msgspec.json.encode(value).decode()[:60]}"
    return f"field '{field}': {text.split(' - at ')[0]}"
