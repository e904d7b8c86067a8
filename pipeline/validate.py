"""Run the pandera schemas (schemas/, generated from the field dictionary) over Arrow tables and report
every failure, each naming its row, in one message."""

import re
import warnings
from collections import Counter
from typing import Any

import pandas as pd
import pandera.pandas as pa
import pyarrow

import schemas
from pipeline.errors import PipelineError
from schemas import dictionary

# How many failures one message lists before it summarises the rest.
MAX_REPORTED_FAILURES = 200
# Pandera works on a pandas copy of the table; in slices, a large table is never copied whole. Pandera
# checks the key (DataFrameSchema unique) within a slice, 0.13 s for 250,000 histogram rows' six-column
# key (0.20 s with it, 0.07 s without); the keys that span slices end in a position (source_ordinal,
# detail_ordinal, bin_index), so rows of two slices cannot share one.
VALIDATION_SLICE_ROWS = 250_000


def _plain(value: Any) -> Any:
    """A numpy or pandas scalar as the Python value it holds, so messages show 1.5, not np.float64(1.5)."""
    return value.item() if hasattr(value, "item") else value


def _format_failures(table_name: str, frame: pd.DataFrame, error: pa.errors.SchemaErrors) -> list[str]:
    key = dictionary.table_entry(table_name).key
    # A row is named by its key and, for a reader, the model and GPU it measured.
    named_by = [c for c in dict.fromkeys([*key, "model_id", "gpu_model", "num_gpus"])
                if c in frame and c != "snapshot_id"]
    lines, shared = [], Counter()
    for (check, index), group in error.failure_cases.groupby(["check", "index"], sort=False, dropna=False):
        row = frame.loc[index] if isinstance(index, int) and index in frame.index else None
        label = "table" if row is None else ", ".join(f"{c}={_plain(row[c])}" for c in named_by) or f"row {index}"
        if check == "multiple_fields_uniqueness":
            shared[label] += 1
            continue
        columns = list(group["column"].dropna().unique())
        # A row-wide check names the columns it compares; show only those values.
        named = [c for c in columns if re.search(rf"\b{re.escape(str(c))}\b", str(check))] or columns
        values = ", ".join(f"{c}={_plain(row[c])!r}" for c in named if c in frame.columns) if row is not None else \
            ", ".join(f"{c}: {_plain(v)!r}" for c, v in zip(group["column"], group["failure_case"]))
        lines.append(f"{table_name} [{label}] column {', '.join(map(str, named)) or '-'}: {values} fails check {check}")
    return lines + [f"{table_name} [{label}] column {', '.join(key)}: {count} rows share this key; fails check unique"
                    for label, count in shared.items()]


def table_failures(tables: dict[str, pyarrow.Table]) -> tuple[list[str], list[str]]:
    """Validate every table lazily. Returns (failures, warnings), each a list of one-line messages: a
    warning rule some rows fail is one line per table, over every slice (_warning_line)."""
    failures: list[str] = []
    notices: list[str] = []
    for name, table in tables.items():
        warned: dict[str, tuple[int, set[str]]] = {}  # warning rule -> failing rows, their distinct values
        for start in range(0, max(table.num_rows, 1), VALIDATION_SLICE_ROWS):
            frame = table.slice(start, VALIDATION_SLICE_ROWS).to_pandas(
                types_mapper={pyarrow.int64(): pd.Int64Dtype()}.get)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    schemas.pandera_schema(name).validate(frame, lazy=True)
                except pa.errors.SchemaErrors as error:
                    failures.extend(_format_failures(name, frame, error))
            if any(issubclass(w.category, pa.errors.SchemaWarning) for w in caught):
                for rule_name, (rows, values) in _warned_rows(name, frame).items():
                    counted, seen = warned.get(rule_name, (0, set()))
                    warned[rule_name] = (counted + rows, seen | values)
        notices.extend(_warning_line(name, rule_name, rows, values) for rule_name, (rows, values) in warned.items())
    return failures, notices


def _warned_rows(table_name: str, frame: pd.DataFrame) -> dict[str, tuple[int, set[str]]]:
    """Per warning rule of the table (only row checks warn: schemas.pandera_schema), how many rows of `frame`
    fail it and the distinct values of the columns its wording names. Pandera's own warning lists every
    value of every failing row: thousands for one new GPU."""
    from schemas.rules import ROW_CHECKS

    found = {}
    for rule_name in dictionary.table_entry(table_name).row_checks:
        rule = ROW_CHECKS[rule_name]
        if not rule.warning or (passed := rule.test(frame)).all():
            continue
        failing = frame[~passed]
        named = [c for c in frame.columns if re.search(rf"\b{re.escape(c)}\b", rule.error)] or list(frame.columns[:1])
        found[rule_name] = (len(failing), {", ".join(f"{c}={_plain(v)!r}" for c, v in zip(named, row))
                                           for row in failing[named].itertuples(index=False)})
    return found


def _warning_line(table_name: str, rule_name: str, rows: int, values: set[str]) -> str:
    from schemas.rules import ROW_CHECKS

    shown = sorted(values)
    more = f" and {len(shown) - 5} more" if len(shown) > 5 else ""
    return (f"{table_name}: {rows} row(s) fail {rule_name} ({ROW_CHECKS[rule_name].error}): "
            f"{'; '.join(shown[:5])}{more}")


def raise_failures(failures: list[str]) -> None:
    if failures:
        shown = failures[:MAX_REPORTED_FAILURES]
        if len(failures) > len(shown):
            shown.append(f"... and {len(failures) - len(shown)} more")
        raise PipelineError(f"validation failed: {len(failures)} failure(s)", shown)
