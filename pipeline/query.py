"""energy-index sql: one read-only query against the published database, for ad-hoc questions.

The database is opened read-only with file system access and extension loading off and the
configuration locked, so DuckDB itself refuses to write, attach, install, load or read files; the
statement's type is also checked first, so a refusal is one plain sentence. Results are formatted by
DuckDB: a box table on a terminal, CSV, JSON lines or Parquet on request.
"""

import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow

from pipeline.database import connect
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.paths import Paths

FORMATS = ("table", "csv", "jsonl", "parquet")
ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
LOCKED_DOWN = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "lock_configuration": True,
}


def parse_parameter(text: str) -> tuple[str, Any]:
    """NAME=VALUE; a value that reads as a whole or decimal number is bound as one, else as text."""
    name, equals, value = text.partition("=")
    if not equals or not name.isidentifier():
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value


def run_query(paths: Paths, sql: str, parameters: dict[str, Any]) -> pyarrow.Table:
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    connection = connect(str(paths.database), read_only=True, config=LOCKED_DOWN)
    try:
        try:
            statements = connection.extract_statements(sql)
        except duckdb.ParserException as error:
            raise PipelineError(f"the query does not parse: {str(error).splitlines()[0]}") from None
        if len(statements) != 1:
            raise PipelineError(f"give exactly one statement (got {len(statements)})")
        kind = statements[0].type
        if kind not in ALLOWED:
            raise PipelineError(
                f"refused: a {kind.name} statement. energy-index sql runs read-only queries (select, with, from, "
                "describe, show, summarize, explain); it never writes, attaches, installs, loads or reads files"
            )
        try:
            relation = connection.sql(sql, params=parameters or None)
            # DuckDB 2 renamed a relation's arrow() to to_arrow_table().
            return (getattr(relation, "to_arrow_table", None) or relation.arrow)()
        except duckdb.PermissionException:
            raise PipelineError(
                "refused: the query reads or writes files or extensions; energy-index sql reads only the database"
            ) from None
        except duckdb.Error as error:
            raise PipelineError(str(error).splitlines()[0]) from None
    finally:
        connection.close()


def write_result(result: pyarrow.Table, output_format: str, output: Path | None) -> None:
    """Format with DuckDB's own writers, on a private in-memory connection that may write files."""
    formatter = connect()
    formatter.register("result", result)
    if output_format == "table":
        formatter.sql("from result").show(max_width=10_000, max_rows=10_000)
        return
    if output is None and output_format == "parquet":
        raise PipelineError("--format parquet needs --output FILE")
    if output is not None:
        options = {"csv": "(format csv, header true)", "jsonl": "(format json)", "parquet": "(format parquet)"}
        from pipeline.files import atomic_path

        with atomic_path(output) as tmp:
            formatter.execute(f"copy (from result) to '{_quoted(tmp)}' {options[output_format]}")
        return
    if output_format == "csv":
        import pyarrow.csv

        pyarrow.csv.write_csv(result, sys.stdout.buffer)
    else:
        for (line,) in formatter.execute("select to_json(r)::varchar from result as r").fetchall():
            sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


# Where energy is counted: the GPUs as measured, the whole server, the server in its data centre.
BOUNDARIES = ("gpu_only", "server", "facility")


def boundary_multipliers(paths: Paths, boundary: str) -> dict[str, float]:
    """What multiplies GPU energy at `boundary`, low, central and high (boundary_factor_ranges): 1 for
    gpu_only, the server factor for server, the server factor times the facility factor for facility."""
    if boundary not in BOUNDARIES:
        raise PipelineError(f"unknown boundary {boundary!r}; one of: {', '.join(BOUNDARIES)}")
    multipliers = {"low": 1.0, "central": 1.0, "high": 1.0}
    counted = BOUNDARIES[1:BOUNDARIES.index(boundary) + 1]
    if not counted:
        return multipliers
    for row in run_query(paths, "select * from boundary_factor_ranges", {}).to_pylist():
        if row["boundary"] in counted:
            multipliers = {level: multipliers[level] * row[f"factor_{level}"] for level in multipliers}
    return multipliers


def estimate(
    paths: Paths, task: str, model: str, gpu: str, concurrency: float, gpus: int | None, precision: str | None,
    boundary: str = "gpu_only",
) -> dict[str, Any]:
    """The energy_at_concurrency macro's rows for one question, and their range, as one document; at a
    boundary wider than gpu_only each figure is scaled by the boundary's central factor, with its low
    and high beside it."""
    multipliers = boundary_multipliers(paths, boundary)
    arguments = {"task": task, "model": model, "gpu": gpu, "concurrency": concurrency, "gpus": gpus,
                 "precision": precision}
    call = "energy_at_concurrency($task, $model, $gpu, $concurrency, gpus := $gpus, precision_name := $precision)"
    deployments = run_query(paths, f"select * from {call}", arguments).to_pylist()
    if not deployments:
        known = run_query(paths, "select count(*) as n from configurations where task = $task and model_id = $model"
                          " and gpu = $gpu union all select count(*) from diffusion_configurations_current"
                          " where task = $task and model_id = $model and gpu = $gpu",
                          {"task": task, "model": model, "gpu": gpu}).to_pylist()
        hint = "" if sum(row["n"] for row in known) else " (see: energy-index sql \"select distinct task, model_id, gpu from best_configurations\")"
        raise PipelineError(f"no measured deployment of {model} on {gpu} for {task} matches{hint}")
    for row in deployments:
        measured = row["wh_per_unit"]
        row.update({f"wh_per_unit_{level}": None if measured is None else measured * multipliers[level]
                    for level in ("low", "high")})
        row["wh_per_unit"] = None if measured is None else measured * multipliers["central"]
    estimated = [row["wh_per_unit"] for row in deployments if row["wh_per_unit"] is not None]
    return {
        "task": task, "model_id": model, "gpu": gpu, "concurrency": concurrency,
        "unit": f"Wh per {deployments[0]['unit_label']}",
        "boundary": boundary, "boundary_multipliers": multipliers,
        "method": "linear in log concurrency between neighbouring measured points (token tasks: the measured "
                  "average running batch; diffusion: the batch size); never extrapolated",
        "deployments_measured": len(deployments),
        "deployments_within_range": len(estimated),
        "min_wh_per_unit": min(estimated) if estimated else None,
        "max_wh_per_unit": max(estimated) if estimated else None,
        "deployments": deployments,
    }
