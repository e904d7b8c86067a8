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


def estimate(
    paths: Paths, task: str, model: str, gpu: str, concurrency: float, gpus: int | None, precision: str | None
) -> dict[str, Any]:
    """The energy_at_concurrency macro's rows for one question, and their range, as one document. The
    task, model and GPU may be written loosely (any case, a model's slug, an unambiguous part of a task
    name); each is resolved against what the index snapshot measured, or refused naming the nearest."""
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
    estimated = [row["wh_per_unit"] for row in deployments if row["wh_per_unit"] is not None]
    return {
        "task": task, "model_id": model, "gpu": gpu, "concurrency": concurrency,
        "unit": f"Wh per {deployments[0]['unit_label']}",
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
