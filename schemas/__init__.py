"""The tables' pandera schemas, generated from the field dictionary (dictionary.toml): for each
column of [tables.<table>.columns], its type ([fields.<name>] type), whether it may be null, the
upstream JSON key it is read from (`upstream`: "required" when every entry carries it, "optional"
when the upstream has added or dropped it over its history; `json_path` when nested), how it is
stored (`stored_as`) and its checks; the table's key and its row checks (schemas/rules.py).

Pandera is imported only when a step asks for the schemas (TABLES), not when fetch reads the rules.
"""

import functools
from typing import Any

from schemas import dictionary

TABLE_NAMES = dictionary.validated_tables()

# Each built-in check of a column entry, in the order pandera reports them.
_BUILT_IN_CHECKS = {
    "ge": "greater_than_or_equal_to", "gt": "greater_than", "le": "less_than_or_equal_to",
    "min_length": "str_length", "isin": "isin", "matches": "str_matches",
}


def _dtype(type_name: str, nullable: bool) -> Any:
    import pandas as pd

    return {"string": str, "int64": pd.Int64Dtype(), "float64": float,
            "bool": pd.BooleanDtype() if nullable else bool}[type_name]


@functools.cache
def _schemas() -> dict[str, Any]:
    import pandera.pandas as pa

    from schemas.rules import COLUMN_CHECKS, ROW_CHECKS

    def check(rule_name: str, rules: dict) -> "pa.Check":
        rule = rules[rule_name]
        return pa.Check(rule.test, name=rule_name, error=rule.error, raise_warning=rule.warning)

    tables = {}
    for table in TABLE_NAMES:
        columns = {}
        for name, entry in dictionary.table_columns(table).items():
            built_in = [getattr(pa.Check, _BUILT_IN_CHECKS[key])(entry[key]) for key in _BUILT_IN_CHECKS
                        if key in entry and key != "min_length"]
            if "min_length" in entry:
                built_in.insert(0, pa.Check.str_length(min_value=entry["min_length"]))
            metadata = {key: entry[key] for key in ("upstream", "json_path", "stored_as") if key in entry}
            columns[name] = pa.Column(
                _dtype(dictionary.field_type(name), entry.get("nullable", False)),
                checks=built_in + [check(rule, COLUMN_CHECKS) for rule in entry.get("checks", [])],
                nullable=entry.get("nullable", False), metadata=metadata or None, name=name,
            )
        tables[table] = pa.DataFrameSchema(
            columns, checks=[check(rule, ROW_CHECKS) for rule in dictionary.table_entry(table).get("row_checks", [])],
            strict=True, coerce=True, unique=dictionary.table_entry(table)["key"], name=table,
        )
    return tables


def __getattr__(name: str) -> Any:
    if name == "TABLES":
        return _schemas()
    raise AttributeError(name)


def measured_key(table: str) -> list[str]:
    """What defines a measured configuration of a task-file table: rows sharing it are repeats."""
    return dictionary.table_entry(table)["measured_key"]
