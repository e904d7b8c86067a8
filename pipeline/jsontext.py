"""JSON text as the standard library's json.dumps spells it, written by msgspec, the one JSON library:
the index files, the release metadata, the stored extra fields and the ids of snapshots without a
commit have always had that spelling, and others read them byte for byte."""

import codecs
import math
from typing import Any

import msgspec

# Within this range, and at zero, msgspec writes a float as json.dumps does (its repr); below it msgspec
# writes 0.00001 for 1e-05, from 1e16 on 1e16 for 1e+16. The upper bound leaves room to round up.
PLAIN_FLOAT_RANGE = (1e-4, 1e15)
_ENCODERS = {False: msgspec.json.Encoder().encode, True: msgspec.json.Encoder(order="sorted").encode}


def as_json_dumps_writes(value: Any) -> Any:
    """`value` with each float outside PLAIN_FLOAT_RANGE as json.dumps's text of it."""
    if type(value) is dict:
        return {key: as_json_dumps_writes(item) for key, item in value.items()}
    if type(value) is list:
        return [as_json_dumps_writes(item) for item in value]
    if type(value) is float and value and not PLAIN_FLOAT_RANGE[0] <= abs(value) < PLAIN_FLOAT_RANGE[1]:
        if not math.isfinite(value):
            raise ValueError(f"{value} has no JSON form")
        return msgspec.Raw(repr(value).encode())
    return value


def _ascii_escape(error: UnicodeEncodeError) -> tuple[str, int]:
    """What ASCII cannot hold as json.dumps escapes it: \\uXXXX, a UTF-16 pair beyond the first plane."""
    units = error.object[error.start:error.end].encode("utf-16-be")
    return "".join(f"\\u{units[i:i + 2].hex()}" for i in range(0, len(units), 2)), error.end


# An encoding error handler: encoding scans at C speed and calls it only for each run beyond ASCII.
codecs.register_error("json_ascii_escape", _ascii_escape)


def dumps(document: Any, *, indent: int | None = 2, ensure_ascii: bool = True, sort_keys: bool = False,
          floats_vetted: bool = False) -> bytes:
    """json.dumps(document, indent=, ensure_ascii=, sort_keys=) as bytes, byte for byte (indent None: one
    line, ", " and ": " between items). `floats_vetted` says every float is zero or within
    PLAIN_FLOAT_RANGE, which spares a walk through the document. A lone surrogate, which no JSON this
    project reads can hold, is refused."""
    encoded = _ENCODERS[sort_keys](document if floats_vetted else as_json_dumps_writes(document))
    data = msgspec.json.format(encoded, indent=indent or 0)
    if ensure_ascii and not data.isascii():  # beyond ASCII, and DEL below, sit inside strings
        data = data.decode("utf-8").encode("ascii", errors="json_ascii_escape")
    return data.replace(b"\x7f", b"\\u007f") if ensure_ascii and b"\x7f" in data else data
