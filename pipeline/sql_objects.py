"""The views and macros of sql/, one per file named after it: each file's CREATE statement, parsed, and
its header, which says what the object holds, its grain and its key (the comments and the docs read
them here)."""

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.paths import SQL_DIR

# A sql/ file's statement: view or macro, its name, (past a macro's parameters) "table" for a table macro, the body.
SQL_OBJECT = re.compile(
    r"^create or replace (?P<kind>view|macro)\s+(?P<name>\w+)\s*(?:\(.*?\)\s*)?as\s+"
    r"(?P<table>table\s+)?(?P<body>.*?);?\s*\Z", re.DOTALL | re.MULTILINE)


@functools.cache
def view_files() -> dict[str, Path]:
    """Every view and macro of sql/ and its subfolders (the layers), by name."""
    return {path.stem: path for path in sorted(SQL_DIR.rglob("*.sql"))}


def sql_path(name: str) -> str:
    return view_files()[name].relative_to(SQL_DIR.parent).as_posix()


@dataclass(frozen=True)
class SqlObject:
    kind: str  # "view", "macro" (scalar) or "table macro"
    body: str  # the view's query or the macro's expression
    statement: str  # the file's CREATE statement


@functools.cache
def sql_object(name: str) -> SqlObject:
    """A sql/ file's one CREATE statement, parsed: what it defines and the query or expression it runs."""
    text = view_files()[name].read_text(encoding="utf-8")
    match = SQL_OBJECT.search(text)
    if match is None or match["name"] != name:
        raise PipelineError(f"{sql_path(name)}: not one 'create or replace view|macro {name} ... as' statement")
    kind = "view" if match["kind"] == "view" else "table macro" if match["table"] else "macro"
    return SqlObject(kind, match["body"], text[match.start():])


# A view whose header has this line is stored: the build keeps its rows as a table, computed once per build,
# so that the views and macros above it bind against a table's columns rather than its whole query.
STORED_LINE = re.compile(r"^-- stored: ", re.MULTILINE)


def is_stored(name: str) -> bool:
    """Whether a sql/ view is kept as a table of its rows (its header's `-- stored:` line)."""
    return sql_object(name).kind == "view" and STORED_LINE.search(_header(name)) is not None


# A view whose header has this line is left out of the Spark script (pipeline/spark.py): what reads it is
# DuckDB's alone, a table macro, and its SQL may use what Spark lacks (an aggregate in a given order).
DUCKDB_ONLY_LINE = re.compile(r"^-- duckdb only: ", re.MULTILINE)


def is_duckdb_only(name: str) -> bool:
    """Whether a sql/ view serves DuckDB's table macros alone (its header's `-- duckdb only:` line)."""
    return sql_object(name).kind == "view" and DUCKDB_ONLY_LINE.search(_header(name)) is not None


# A view's or table macro's key in its header: the columns that tell its rows apart, one line, and those
# of them that may be null (a row without that part, as SQL's UNIQUE allows), e.g. "-- key: task, row_id".
KEY_LINE = re.compile(r"^-- key: (.*)$", re.MULTILINE)
NULL_IN_KEY_LINE = re.compile(r"^-- null in key: (.*)$", re.MULTILINE)
COLUMN_LIST = re.compile(r"\w+(?:, \w+)*")


@dataclass(frozen=True)
class Key:
    columns: tuple[str, ...]
    nullable: tuple[str, ...] = ()  # the key columns that may be null


def _header(name: str) -> str:
    return view_files()[name].read_text(encoding="utf-8").split("\ncreate ")[0]


@functools.cache
def view_key(name: str) -> Key | None:
    """A view's or table macro's key, from its header's `-- key:` line (and `-- null in key:`); None for a
    scalar macro, which returns a value. A view or table macro without one fails the build."""
    header = _header(name)
    found = {label: pattern.findall(header) for label, pattern in (("key", KEY_LINE), ("null in key", NULL_IN_KEY_LINE))}
    if sql_object(name).kind == "macro":
        if found["key"] or found["null in key"]:
            raise PipelineError(f"{sql_path(name)}: a scalar macro returns a value; its header declares no key")
        return None
    lists = {label: [COLUMN_LIST.fullmatch(text) for text in texts] for label, texts in found.items()}
    if len(found["key"]) != 1 or len(found["null in key"]) > 1 or not all(map(all, lists.values())):
        raise PipelineError(f"{sql_path(name)}: its header needs one '-- key: column, column, ...' line (and at"
                            " most one '-- null in key: column, ...' line naming some of them)")
    columns = tuple(found["key"][0].split(", "))
    nullable = tuple(found["null in key"][0].split(", ")) if found["null in key"] else ()
    if not set(nullable) <= set(columns):
        raise PipelineError(f"{sql_path(name)}: '-- null in key:' names columns not in its key: "
                            f"{', '.join(sorted(set(nullable) - set(columns)))}")
    return Key(columns, nullable)


def view_description(name: str) -> str:
    """A sql/ object's description from its header: what it holds (the first comment lines), its grain
    (a label's indented comment lines continue it; a scalar macro's grain is a value) and its key."""
    scalar = {"grain": ["(a value)"]} if sql_object(name).kind == "macro" else {}
    fields: dict[str, list[str]] = {"what": [], **scalar}
    current = "what"
    for line in _header(name).splitlines():
        text = line.removeprefix("--").strip()
        label, _, rest = text.partition(":")
        if label == "grain":
            current = label
            fields[current] = [rest.strip()]
        elif current == "what" or (current == "grain" and line.startswith("--  ")):
            fields[current].append(text)
        else:
            break
    what = " ".join(fields["what"]).split(":", 1)[1].strip()
    key = view_key(name)
    key_text = "—" if key is None else f"({', '.join(key.columns)})"
    return f"{what[0].upper()}{what[1:]} Grain: {' '.join(fields['grain'])}. Key: {key_text}."
