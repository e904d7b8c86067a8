"""Run the pandera schemas (generated from schemas/dictionary.toml) over Arrow tables and report every
failure in one message.

Also derives from those schemas what other steps need: each table's Arrow schema, its upstream
columns, and its column descriptions.
"""

import copy
import functools
import re
from collections import Counter
import warnings
from typing import Any

import pandas as pd
import pandera.pandas as pa
import pyarrow

from pipeline.errors import PipelineError
from schemas import dictionary

# How many failures one message lists before it summarises the rest.
MAX_REPORTED_FAILURES = 200


def _arrow_type(dtype: Any) -> pyarrow.DataType:
    name = str(dtype).lower()
    if name.startswith("int"):
        return pyarrow.int64()
    if name.startswith("float"):
        return pyarrow.float64()
    if name in ("bool", "boolean") or "bool" in name:
        return pyarrow.bool_()
    if name.startswith("str") or name == "object":
        return pyarrow.string()
    raise TypeError(f"no Arrow type declared for pandera dtype {dtype}")


def arrow_schema(model: pa.DataFrameSchema) -> pyarrow.Schema:
    schema = model
    return pyarrow.schema(
        pyarrow.field(name, _arrow_type(column.dtype), nullable=column.nullable)
        for name, column in schema.columns.items()
    )


# Columns validated as ISO 8601 text (as the upstream and the manifest spell them) but stored typed,
# so that Parquet readers and the database see dates and instants: metadata {"stored_as": ...}.
STORED_TYPES = {"date": pyarrow.date32(), "timestamptz": pyarrow.timestamp("us", tz="UTC")}


def parquet_schema(table: str, model: pa.DataFrameSchema) -> pyarrow.Schema:
    """The table as stored: typed dates and times, each field's description (schemas/dictionary.toml)
    as Parquet field metadata and the table's as schema metadata, so that tools reading the files
    directly see them."""
    fields = []
    for name, column in model.columns.items():
        stored = (column.metadata or {}).get("stored_as")
        arrow_type = STORED_TYPES[stored] if stored else _arrow_type(column.dtype)
        entry = dictionary.column(table, name)
        metadata = {"description": entry.description, **({"unit": entry.unit} if entry.unit else {})}
        fields.append(pyarrow.field(name, arrow_type, nullable=column.nullable, metadata=metadata))
    return pyarrow.schema(fields, metadata={"description": dictionary.table_description(table)})


def as_stored(table: pyarrow.Table, schema: pyarrow.Schema) -> pyarrow.Table:
    """A validated table cast to its stored schema (ISO 8601 text to date and timestamp)."""
    return table.select(schema.names).cast(schema)


def upstream_columns(model: pa.DataFrameSchema) -> dict[str, str]:
    """Columns copied from upstream keys, each 'required' or 'optional'."""
    return {
        name: column.metadata["upstream"]
        for name, column in model.columns.items()
        if column.metadata and "upstream" in column.metadata
    }


def json_paths(model: pa.DataFrameSchema) -> dict[str, tuple[str, ...]]:
    """Where each upstream column sits in its JSON object: the key of the same name, or a nested path
    declared as metadata json_path ("parallelization.tensor_parallel")."""
    return {
        name: tuple(column.metadata.get("json_path", name).split("."))
        for name, column in model.columns.items()
        if column.metadata and "upstream" in column.metadata
    }


def table_key(model: pa.DataFrameSchema) -> list[str]:
    return list(model.unique or [])


def _to_pandas(table: pyarrow.Table) -> pd.DataFrame:
    return table.to_pandas(types_mapper={pyarrow.int64(): pd.Int64Dtype()}.get)


def _plain(value: Any) -> Any:
    """A numpy or pandas scalar as the Python value it holds, so messages show 1.5, not np.float64(1.5)."""
    return value.item() if hasattr(value, "item") else value


def _row_label(frame: pd.DataFrame, index: Any, key: list[str]) -> str:
    if not isinstance(index, int) or index not in frame.index:
        return "table"
    row = frame.loc[index]
    return ", ".join(f"{column}={_plain(row[column])}" for column in key if column != "snapshot_id")


def _format_failures(table_name: str, frame: pd.DataFrame, error: pa.errors.SchemaErrors, key: list[str]) -> list[str]:
    cases = error.failure_cases
    lines = []
    for (check, index), group in cases.groupby(["check", "index"], sort=False, dropna=False):
        columns = [c for c in group["column"].dropna().unique()]
        # A row-wide check names the columns it compares; show only those values.
        named = [c for c in columns if re.search(rf"\b{re.escape(str(c))}\b", str(check))] or columns
        if isinstance(index, int) and index in frame.index:
            values = ", ".join(f"{c}={_plain(frame.at[index, c])!r}" for c in named if c in frame.columns)
        else:
            values = ", ".join(f"{c}: {_plain(v)!r}" for c, v in zip(group["column"], group["failure_case"]))
        label = _row_label(frame, index, key)
        lines.append(f"{table_name} [{label}] column {', '.join(map(str, named)) or '-'}: {values} fails check {check}")
    return lines


# Below this many rows a Python set is quicker than starting DuckDB.
SMALL_TABLE_ROWS = 50_000


@functools.cache
def _key_checker() -> Any:
    from pipeline.database import connect

    return connect()


def _duplicate_keys(table_name: str, table: pyarrow.Table, key: list[str]) -> list[str]:
    """The table's key (Config.unique), checked by DuckDB on large tables: on millions of rows it is
    several times as fast as pandas' duplicated(), which pandera uses, or an Arrow group-by."""
    if not key or table.num_rows < 2:
        return []
    if table.num_rows < SMALL_TABLE_ROWS:
        counts = Counter(zip(*(table[column].to_pylist() for column in key)))
        duplicates = sorted(
            ((*values, count) for values, count in counts.items() if count > 1), key=lambda row: repr(row)
        )[:1000]
    else:
        columns = ", ".join(f'"{column}"' for column in key)
        connection = _key_checker()
        connection.register("checked", table.select(key))
        try:
            # Distinct hashes are distinct keys; only a shortfall (a duplicate or a collision) needs grouping.
            shortfall = connection.execute(
                f"select count(*) - count(distinct hash({columns})) from checked"
            ).fetchall()[0][0]
            duplicates = connection.execute(
                f"select {columns}, count(*) as n from checked group by all having count(*) > 1 order by all limit 1000"
            ).fetchall() if shortfall else []
        finally:
            connection.unregister("checked")
    return [
        f"{table_name} [{', '.join(f'{c}={v}' for c, v in zip(key, row) if c != 'snapshot_id')}] column "
        f"{', '.join(key)}: {row[-1]} rows share this key; fails check unique"
        for row in duplicates
    ]


_WITHOUT_KEY: dict[str, pa.DataFrameSchema] = {}


def _schema_without_key(name: str, model: pa.DataFrameSchema) -> pa.DataFrameSchema:
    """The table's schema less its key (unique), which _duplicate_keys checks instead (on a copy: the
    schemas are shared)."""
    if name in _WITHOUT_KEY:
        return _WITHOUT_KEY[name]
    schema = _WITHOUT_KEY[name] = copy.copy(model)  # shallow: the columns and checks are shared, never changed
    schema.unique = None
    return schema


# Pandera works on a pandas copy of the table; in slices, a large table is never copied whole.
VALIDATION_SLICE_ROWS = 250_000


def table_failures(
    tables: dict[str, tuple[pa.DataFrameSchema, pyarrow.Table]],
) -> tuple[list[str], list[str]]:
    """Validate every table lazily. Returns (failures, warnings), each a list of one-line messages."""
    failures: list[str] = []
    notices: list[str] = []
    for name, (model, table) in tables.items():
        key = table_key(model)
        schema = _schema_without_key(name, model)
        for start in range(0, max(table.num_rows, 1), VALIDATION_SLICE_ROWS):
            frame = _to_pandas(table.slice(start, VALIDATION_SLICE_ROWS))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    schema.validate(frame, lazy=True)
                except pa.errors.SchemaErrors as error:
                    failures.extend(_format_failures(name, frame, error, key))
            notices.extend(f"{name}: {w.message}" for w in caught if issubclass(w.category, pa.errors.SchemaWarning))
            del frame
        failures.extend(_duplicate_keys(name, table, key))
    return failures, notices


def raise_failures(failures: list[str]) -> None:
    if failures:
        shown = failures[:MAX_REPORTED_FAILURES]
        if len(failures) > len(shown):
            shown.append(f"... and {len(failures) - len(shown)} more")
        raise PipelineError(f"validation failed: {len(failures)} failure(s)", shown)


def validate_tables(tables: dict[str, tuple[pa.DataFrameSchema, pyarrow.Table]]) -> list[str]:
    """Validate every table lazily; raise one PipelineError listing all failures, else return warnings."""
    failures, notices = table_failures(tables)
    raise_failures(failures)
    return notices
