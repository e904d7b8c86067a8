"""energy-index sql: one read-only query against the published database, for ad-hoc questions.

The database is opened read-only with file system access and extension loading off and the
configuration locked, so DuckDB itself refuses to write, attach, install, load or read files; the
statement's type is also checked first, so a refusal is one plain sentence. A query is bounded in time
(interrupted after `timeout_s`) and memory (DuckDB's memory_limit; what it spills goes to a private
folder in the system's temporary directory, never under OUT). Results are formatted by DuckDB: a box
table fitted to the terminal on a terminal, CSV, JSON lines or Parquet on request.
"""

import re
import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow

from pipeline.database import connect
from pipeline.errors import NEXT_STEP, PipelineError, command_name, out_option
from pipeline.paths import Paths

from pipeline.settings import DEFAULT_SQL_MEMORY_LIMIT as DEFAULT_MEMORY_LIMIT
from pipeline.settings import DEFAULT_SQL_TIMEOUT_S as DEFAULT_TIMEOUT_S
from pipeline.settings import SQL_FORMATS as FORMATS
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


# An unknown identifier as the table macros report it (sql/macros/checked_name.sql).
IDENTIFIER_ERROR = re.compile(r"^Invalid Input Error: (?=unknown (snapshot|task|model|GPU) ')")


def run_query(
    paths: Paths, sql: str, parameters: dict[str, Any], *, timeout_s: float | None = None,
    memory_limit: str | None = None,
) -> pyarrow.Table:
    """The result of one read-only statement; stopped with a PipelineError after `timeout_s` seconds or
    beyond `memory_limit` (a DuckDB size, e.g. 4GB) when given."""
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    import tempfile
    import threading

    with tempfile.TemporaryDirectory(prefix="energy-index-sql-") as spill:
        # A read-only database would spill beside itself, into the published build.
        bounds = {"temp_directory": spill} if memory_limit is None else {
            "temp_directory": spill, "memory_limit": memory_limit, "max_temp_directory_size": memory_limit,
        }
        try:
            connection = connect(str(paths.database), read_only=True, config=bounds)
        except (duckdb.InvalidInputException, duckdb.ParserException) as error:
            raise PipelineError(f"--memory-limit {memory_limit}: {_one_line(error)}") from None
        # Locked down after the bounds are set: with external access off, DuckDB refuses a temp_directory.
        for setting, value in LOCKED_DOWN.items():
            connection.execute(f"set {setting} = {str(value).lower()}")
        timer = threading.Timer(timeout_s, connection.interrupt) if timeout_s is not None else None
        try:
            _check_one_read_only_statement(connection, sql)
            if timer is not None:
                timer.start()
            try:
                relation = connection.sql(sql, params=parameters or None)
                # DuckDB 2 renamed a relation's arrow() to to_arrow_table().
                return (getattr(relation, "to_arrow_table", None) or relation.arrow)()
            except duckdb.PermissionException:
                raise PipelineError(
                    "refused: the query reads or writes files or extensions; energy-index sql reads only the database"
                ) from None
            except duckdb.InterruptException:
                if timer is None or timer.is_alive():
                    raise KeyboardInterrupt from None  # Ctrl-C, not the time limit
                raise PipelineError(
                    f"the query was stopped at its time limit of {timeout_s:g} s; --timeout SECONDS allows more"
                ) from None
            except duckdb.OutOfMemoryException:
                raise PipelineError(
                    f"the query needs more memory than its limit of {memory_limit}; --memory-limit SIZE "
                    "(e.g. 8GB) allows more"
                ) from None
            except duckdb.Error as error:
                # The table macros' own identifier errors read as the CLI's: without DuckDB's error class.
                raise PipelineError(IDENTIFIER_ERROR.sub("", _one_line(error))) from None
        finally:
            if timer is not None:
                timer.cancel()
            connection.close()


def _check_one_read_only_statement(connection: duckdb.DuckDBPyConnection, sql: str) -> None:
    """A PipelineError saying why, unless `sql` is one read-only statement."""
    try:
        statements = connection.extract_statements(sql)
    except duckdb.ParserException as error:
        raise PipelineError(f"the query does not parse: {_one_line(error)}") from None
    if len(statements) != 1:
        raise PipelineError(f"give exactly one statement (got {len(statements)})")
    kind = statements[0].type
    if kind not in ALLOWED:
        raise PipelineError(
            f"refused: a {kind.name} statement. energy-index sql runs read-only queries (select, with, from, "
            "describe, show, summarize, explain); it never writes, attaches, installs, loads or reads files"
        )


def _one_line(error: Exception) -> str:
    """DuckDB's message with its hints (did you mean, candidate bindings) on one line, without the
    echoed query and caret that follow them."""
    kept = []
    for line in str(error).splitlines():
        if not line.strip() or line.startswith("LINE "):
            break
        kept.append(line.strip())
    return " ".join(kept)


def write_result(result: pyarrow.Table, output_format: str, output: Path | None) -> None:
    """Format with DuckDB's own writers, on a private in-memory connection that may write files."""
    formatter = connect()
    formatter.register("result", result)
    if output_format == "table":
        import shutil

        if sys.stdout.isatty():  # fitted to the terminal, for reading
            formatter.sql(f"select {_rounded_columns(result.schema)} from result").show(
                max_width=shutil.get_terminal_size().columns, max_rows=10_000)
        else:
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


def _rounded_columns(schema: pyarrow.Schema) -> str:
    """The result's columns for reading on a terminal: floating-point numbers rounded to 4 significant
    digits (whole numbers kept whole); everything else as it is. Piped output keeps full precision."""
    columns = []
    for field in schema:
        name = '"' + field.name.replace('"', '""') + '"'
        if pyarrow.types.is_floating(field.type):
            columns.append(
                f"case when {name} = 0 or not isfinite({name}) then {name} "
                f"else round({name}, greatest(0, 3 - floor(log10(abs({name})))::int)) end as {name}"
            )
        else:
            columns.append(name)
    return ", ".join(columns) or "*"


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


# Where energy is counted: the GPUs as measured, the whole server, the server in its data centre.
BOUNDARIES = ("gpu_only", "server", "facility")
# energy_at_concurrency's energy columns: the figure, its repeat interval and the measured points'.
ENERGY_FIELDS = ("wh_per_unit", "wh_per_unit_low", "wh_per_unit_high", "lower_wh_per_unit", "upper_wh_per_unit")


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


def _at_boundary(row: dict[str, Any], multipliers: dict[str, float]) -> None:
    """Every energy figure of a deployment times the boundary's central factor, and the figure with the
    low and the high factor beside it (boundary_wh_per_unit_low, _high)."""
    measured = row["wh_per_unit"]
    for level in ("low", "high"):
        row[f"boundary_wh_per_unit_{level}"] = None if measured is None else measured * multipliers[level]
    for field in ENERGY_FIELDS:
        if row.get(field) is not None:
            row[field] *= multipliers["central"]


def estimate(
    paths: Paths, task: str, model: str, gpu: str, concurrency: float, gpus: int | None, precision: str | None,
    boundary: str = "gpu_only",
) -> dict[str, Any]:
    """The energy_at_concurrency macro's rows for one question, and their range, as one document. The
    task, model and GPU may be written loosely (any case, a model's slug, an unambiguous part of a task
    name); each is resolved against what the index snapshot measured, or refused naming the nearest. At
    a boundary wider than gpu_only every energy figure is scaled by the boundary's central factor, with
    the figure at its low and high factor beside it."""
    multipliers = boundary_multipliers(paths, boundary)
    measured = run_query(paths, "select distinct task, model_id, slug, gpu from configuration_points", {}).to_pylist()
    task, model, gpu = resolve_question(measured, task, model, gpu)
    arguments = {"task": task, "model": model, "gpu": gpu, "concurrency": concurrency, "gpus": gpus,
                 "precision": precision}
    call = "energy_at_concurrency($task, $model, $gpu, $concurrency, gpus := $gpus, precision_name := $precision)"
    deployments = run_query(paths, f"select * from {call}", arguments).to_pylist()
    if not deployments:
        every = run_query(paths, "select * from energy_at_concurrency($task, $model, $gpu, $concurrency)",
                          {name: arguments[name] for name in ("task", "model", "gpu", "concurrency")}).to_pylist()
        wanted = " and ".join(part for part in (f"{gpus} GPU(s)" if gpus else "", precision or "") if part)
        raise PipelineError(f"no measured deployment of {model} on {gpu} for {task} has {wanted}; measured: "
                            + "; ".join(deployment_label(row) for row in every))
    for row in deployments:
        _at_boundary(row, multipliers)
    estimated = [row["wh_per_unit"] for row in deployments if row["wh_per_unit"] is not None]
    return {
        "task": task, "model_id": model, "gpu": gpu, "concurrency": concurrency,
        "unit": f"Wh per {deployments[0]['unit_label']}",
        "boundary": boundary, "boundary_multipliers": multipliers,
        "method": "linear in log concurrency between the two neighbouring measured points, each configuration one "
                  "point with its repeats averaged (token tasks: the measured average running batch; diffusion: the "
                  "batch size); never extrapolated. The interval interpolates the points' lowest and highest repeats: "
                  "it covers the repeat spread only (docs/uncertainty.md)",
        "deployments_measured": len(deployments),
        "deployments_within_range": len(estimated),
        "min_wh_per_unit": min(estimated) if estimated else None,
        "max_wh_per_unit": max(estimated) if estimated else None,
        "deployments": deployments,
    }


DEPLOYMENT_FIELDS = ("num_gpus", "tensor_parallel", "data_parallel", "expert_parallel", "ulysses_degree",
                     "ring_degree", "precision", "width", "height", "num_frames", "fps", "inference_steps")


def deployment_label(row: dict[str, Any]) -> str:
    """A deployment as people name it: 'num_gpus 2, tensor_parallel 2, precision BF16'."""
    return ", ".join(f"{name} {row[name]}" for name in DEPLOYMENT_FIELDS if row.get(name) is not None)


def resolve_question(measured: list[dict[str, Any]], task: str, model: str, gpu: str) -> tuple[str, str, str]:
    """The task, model_id and GPU the index snapshot knows for loosely written ones (rows of task,
    model_id, slug and gpu it measured); an unknown, ambiguous or unmeasured combination is refused
    with the nearest valid values."""
    task = _resolve_task(task, sorted({row["task"] for row in measured}))
    slugs = {row["model_id"]: row["slug"] for row in measured}
    model = _resolve_model(model, slugs)
    gpu = _resolve_exact("GPU", gpu, sorted({row["gpu"] for row in measured}))
    tasks_of_model = sorted({row["task"] for row in measured if row["model_id"] == model})
    if task not in tasks_of_model:
        raise PipelineError(f"{model} was not measured for {task}; it was for: {', '.join(tasks_of_model)}")
    gpus_of_model = sorted({row["gpu"] for row in measured if row["model_id"] == model and row["task"] == task})
    if gpu not in gpus_of_model:
        raise PipelineError(f"{model} was not measured on {gpu} for {task}; only on: {', '.join(gpus_of_model)}")
    return task, model, gpu


def _resolve_exact(kind: str, value: str, known: list[str]) -> str:
    if value in known:
        return value
    same = [name for name in known if name.casefold() == value.casefold()]
    if len(same) == 1:
        return same[0]
    raise _unknown(kind, value, known)


def _resolve_task(value: str, known: list[str]) -> str:
    """A task by its name in any case, or by whole hyphen-separated parts of one name ('fim', 'lm-arena')."""
    same = [name for name in known if name.casefold() == value.casefold()]
    if same:
        return same[0]
    wanted = value.casefold().split("-")

    def has_the_parts(name: str) -> bool:
        parts = name.casefold().split("-")
        return any(parts[start:start + len(wanted)] == wanted for start in range(len(parts)))

    containing = [name for name in known if has_the_parts(name)]
    if len(containing) == 1:
        return containing[0]
    if len(containing) > 1:
        raise PipelineError(f"task {value!r} is ambiguous: it could be {', '.join(containing)}")
    raise _unknown("task", value, known)


def _resolve_model(value: str, slugs: dict[str, str]) -> str:
    """A model by its Hugging Face id or its slug (the part after the last '/'), in any case."""
    if value in slugs:
        return value
    folded = value.casefold()
    matching = sorted({model_id for model_id, slug in slugs.items()
                       if folded in (model_id.casefold(), slug.casefold(), model_id.rpartition("/")[2].casefold())})
    if len(matching) == 1:
        return matching[0]
    if len(matching) > 1:
        raise PipelineError(f"model {value!r} is ambiguous: it could be {', '.join(matching)}")
    raise _unknown("model", value, sorted(slugs), also=slugs)


def _unknown(kind: str, value: str, known: list[str], also: dict[str, str] | None = None) -> PipelineError:
    """'unknown model 'X'; nearest: A, B' (matched on the names, and on the slugs given in also)."""
    import difflib

    folded = value.casefold()
    names = {name.casefold(): name for name in known}
    names.update({slug.casefold(): name for name, slug in (also or {}).items()})
    containing = [names[name] for name in sorted(names) if folded and (folded in name or name in folded)]
    close = [names[name] for name in difflib.get_close_matches(folded, list(names), n=5, cutoff=0.5)]
    nearest = list(dict.fromkeys(close + containing))[:5]
    if nearest:
        return PipelineError(f"unknown {kind} {value!r}; nearest: {', '.join(nearest)}")
    if len(known) <= 12:
        return PipelineError(f"unknown {kind} {value!r}; the index snapshot measured: {', '.join(known)}")
    return PipelineError(f"unknown {kind} {value!r}; none of the {len(known)} the index snapshot measured is near it "
                         "(see: energy-index sql \"select distinct task, model_id, gpu from configuration_points\")")
