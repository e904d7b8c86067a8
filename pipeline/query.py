"""energy-index sql and estimate: read-only queries against the published database.

The database is opened read-only with file access and extension loading off and the configuration
locked, so DuckDB itself refuses to write, attach, install, load or read files; the statement's type is
checked first, so a refusal is one plain sentence. `sql` runs its statement in a child process that
the operating system holds to bounds (pipeline/bounded_sql.py).
"""

import itertools
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb

from pipeline.database import connect, fetch_dicts
from pipeline.errors import NEXT_STEP, PipelineError, nearest, shown
from pipeline.paths import Paths
from pipeline.private_folders import private_folder
from pipeline.settings import size_bytes

# Why a GPU has no server or facility figures (boundary_multipliers: its multipliers null).
NO_BOUNDARY_FACTORS = "gpu_ratings has no rated board power for it"
LOCKED_DOWN = ("enable_external_access", "autoload_known_extensions", "autoinstall_known_extensions")
# The commands' own questions (estimate, plan, compare, snapshots) read a few thousand rows at most: DuckDB's
# cost-based join ordering and statistics propagation cost more there than running the query (a sixth of
# plan's), and neither changes a result. A statement of the user's (sql) keeps them: it may join anything.
SKIPPED_FOR_OWN_QUESTIONS = "join_order,statistics_propagation"
# An unknown identifier as the table macros report it (sql/macros/checked_name.sql): the name given between
# "unknown KIND '" and "'; the nearest: ".
IDENTIFIER_ERROR = re.compile(r"^Invalid Input Error: (unknown (?:snapshot|task|model|GPU) )'(.*)'(; the nearest: .*)$")


def _memory_message(memory_limit: str) -> str:
    return f"the query needs more memory than its limit of {memory_limit}; --memory-limit SIZE (e.g. 8GB) allows more"


@contextmanager
def session(paths: Paths, *, memory_limit: str | None = None, private: Path | None = None,
            users_statement: bool = False) -> Iterator[Any]:
    """A locked-down read-only connection to the published database, its private folder (`private`, or a
    new one removed afterwards), and a guard that turns DuckDB's refusals and the memory limit into
    one-line PipelineErrors. The commands' own questions run without the optimizers
    SKIPPED_FOR_OWN_QUESTIONS names; a `users_statement` (sql) runs with every one."""
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    with ExitStack() as stack:
        if private is None:
            private = stack.enter_context(private_folder())
        # temp_directory: a read-only database would spill beside itself, into the published build
        config = {"temp_directory": str(private)}
        if memory_limit is not None and (size := size_bytes(memory_limit)) is not None:
            config |= {"memory_limit": f"{size}B", "max_temp_directory_size": f"{size}B"}
        if not users_statement:
            config["disabled_optimizers"] = SKIPPED_FOR_OWN_QUESTIONS
        try:
            connection = connect(str(paths.database), read_only=True, config=config)
        except (duckdb.InvalidInputException, duckdb.ParserException) as error:
            raise PipelineError(f"--memory-limit {memory_limit}: {one_line(error)}") from None
        stack.callback(connection.close)
        # Locked down after the bounds are set: with external access off, DuckDB refuses a temp_directory.
        connection.execute(f"set allowed_directories = ['{sql_quoted(private)}']")
        for setting in LOCKED_DOWN:
            connection.execute(f"set {setting} = false")
        connection.execute("set lock_configuration = true")
        try:
            yield connection, private
        except duckdb.PermissionException:
            raise PipelineError("refused: the query reads or writes files or extensions; energy-index sql reads "
                                "only the database") from None
        except duckdb.InterruptException:
            raise KeyboardInterrupt from None
        except (duckdb.OutOfMemoryException, MemoryError):
            raise PipelineError(_memory_message(memory_limit or "the machine's")) from None
        except duckdb.Error as error:
            if memory_limit is not None and "File too large" in str(error):  # RLIMIT_FSIZE: EFBIG
                raise PipelineError(f"the query writes more than its limit of {memory_limit} (its result or a "
                                    "spill file); --memory-limit SIZE (e.g. 8GB) allows more") from None
            # The table macros' own identifier errors read as the CLI's: without DuckDB's error class, the
            # name echoed short.
            raise PipelineError(IDENTIFIER_ERROR.sub(lambda found: found[1] + shown(found[2], quoted=True) + found[3],
                                                     one_line(error))) from None


def sql_quoted(path: Path) -> str:
    """A path as the text of a SQL string literal: its single quotes doubled."""
    return str(path).replace("'", "''")


def one_line(error: Exception) -> str:
    """DuckDB's message with its hints (did you mean, candidate bindings) on one line, without the
    echoed query and caret that follow them."""
    hints = itertools.takewhile(lambda line: line.strip() and not line.startswith("LINE "), str(error).splitlines())
    return " ".join(line.strip() for line in hints)


# energy_at_concurrency's rows in its order, every energy figure (the estimate, its repeat interval and the
# measured points') at the boundary's central multiplier, the estimate at its low and high multiplier beside
# it (boundary_multipliers: facility is the server factor × the facility factor). One question's
# deployments at a boundary: the GPU's own multipliers scale every figure (the central one, and its low and
# high ends beside the figure). {rows} is the method's table macro; {scaled}
# lists its figures besides wh_per_unit.
ESTIMATE = """
with
deployments as (
    select *, row_number() over () as position
    from {rows}($task, $model, $gpu, $concurrency, gpus := $gpus, precision_name := $precision)
),
multipliers as (
    select multiplier_low as low, multiplier_central as central, multiplier_high as high
    from boundary_multipliers
    where boundary = $boundary and gpu = $gpu
)
select
    d.* exclude (position) replace (wh_per_unit * central as wh_per_unit{scaled}),
    wh_per_unit * low as boundary_wh_per_unit_low, wh_per_unit * high as boundary_wh_per_unit_high,
    {{'low': low, 'central': central, 'high': high}} as boundary_multipliers
from deployments as d, multipliers
order by position
"""
DEPLOYMENT_FIELDS = ("num_gpus", "tensor_parallel", "data_parallel", "expert_parallel", "ulysses_degree",
                     "ring_degree", "precision", "width", "height", "num_frames", "fps", "inference_steps")
# method -> (its table macro, the figures besides wh_per_unit that a boundary scales, what it does, what
# the range at a boundary spans). Interpolation reads energy_at_concurrency's rows without its checks of the
# names (energy_at_concurrency_unchecked): estimate resolves them itself, and the checks in SQL cost half
# of the query.
METHODS = {
    "interpolation": ("energy_at_concurrency_unchecked", ("wh_per_unit_low", "wh_per_unit_high", "lower_wh_per_unit",
                                                "upper_wh_per_unit"),
                      "linear in log concurrency between the two neighbouring measured points, each configuration "
                      "one point with its repeats averaged (token tasks: the measured average running batch; "
                      "diffusion: the batch size); never extrapolated. The interval interpolates the points' lowest "
                      "and highest repeats: it covers the repeat spread only (docs/uncertainty.md)",
                      "the lowest repeat at the boundary's low factor to the highest repeat at its high factor"),
    "fit": ("energy_from_fit", (), "the deployment's logistic fit y = b0 + L * sigmoid(k * (log2(batch limit) - x0)), "
            "as the leaderboard's data toolkit fits it (efficiency_curve_fits), at the batch limit asked (token tasks: "
            "max_num_seqs; diffusion: the batch size); extrapolated by at most one doubling of the batch limit; no "
            "figure where the fit is not fit for use (docs/fits.md)",
            ("the lowest fitted figure at the boundary's low factor to the highest at its high factor; a fit has "
             "no repeats")),
}


def estimate(
    paths: Paths, task: str, model: str, gpu: str, concurrency: float, gpus: int | None, precision: str | None,
    boundary: str = "gpu_only", output_tokens: int | None = None, method: str = "interpolation",
) -> dict[str, Any]:
    """The method's macro's rows (METHODS: energy_at_concurrency, or energy_from_fit) for one question at a
    boundary (ESTIMATE), and their range, as one document naming the snapshot and upstream commit it was
    read from; the task, model and GPU may be written loosely (resolve_question). `output_tokens` (token
    tasks) adds Wh per response of that length."""
    macro, scaled, described, spans = METHODS[method]
    query = ESTIMATE.format(rows=macro, scaled="".join(f", {name} * central as {name}" for name in scaled))
    with session(paths) as (connection, _):
        (snapshot,) = fetch_dicts(connection, "select s.snapshot_id, s.commit from snapshots as s"
                                  " join index_snapshot using (snapshot_id)", {})
        asked = {"task": task, "model": model, "gpu": gpu, "concurrency": concurrency}
        narrowed = {"gpus": gpus, "precision": precision, "boundary": boundary}
        deployments: list[dict[str, Any]] = []
        # Names as the index snapshot spells them need no resolving (they give rows; another gives none, or
        # energy_from_fit refuses it): reading every measured name is left to loosely written ones.
        with suppress(duckdb.InvalidInputException):
            deployments = fetch_dicts(connection, query, asked | narrowed)
        if not deployments:
            # The same names as configuration_points', without grouping every configuration first.
            measured = fetch_dicts(connection, "select distinct task, model_id, slug, gpu from unified_configurations "
                                   "where in_index_snapshot", {})
            task, model, gpu = resolve_question(measured, task, model, gpu)
            asked |= {"task": task, "model": model, "gpu": gpu}
            deployments = fetch_dicts(connection, query, asked | narrowed)
        if not deployments:
            every = fetch_dicts(connection, f"select * from {macro}($task, $model, $gpu, $concurrency)", asked)
            wanted = " and ".join(part for part in (f"{gpus} GPU(s)" if gpus else "", precision or "") if part)
            raise PipelineError(f"no measured deployment of {model} on {gpu} for {task} has {shown(wanted)}; measured: "
                                + "; ".join(deployment_label(row) for row in every))
    # The boundary's multipliers, the same on every row, belong to the document, not to a deployment.
    multipliers = [row.pop("boundary_multipliers") for row in deployments][0]
    if multipliers["central"] is None:
        raise PipelineError(f"no {boundary} boundary factors for GPU {gpu}: {NO_BOUNDARY_FACTORS}")
    estimated = [row for row in deployments if row["wh_per_unit"] is not None]
    unit_label = deployments[0]["unit_label"]
    if output_tokens is not None and unit_label != TOKEN_UNIT_LABEL:
        raise PipelineError(f"--output-tokens applies to token tasks; {task} gives Wh per {unit_label}")
    # The chosen boundary's range (`spans` says what it spans), over the deployments that give a figure.
    scale = {level: multipliers[level] / multipliers["central"] for level in ("low", "high")}
    boundary_range = None if not estimated else {
        "boundary": boundary, "spans": spans,
        "low": min(row.get("wh_per_unit_low", row["wh_per_unit"]) for row in estimated) * scale["low"],
        "high": max(row.get("wh_per_unit_high", row["wh_per_unit"]) for row in estimated) * scale["high"],
    }
    document = {
        "task": task, "model_id": model, "gpu": gpu, "concurrency": concurrency,
        "snapshot_id": snapshot["snapshot_id"], "commit": snapshot["commit"],
        "unit": f"Wh per {unit_label}", "boundary": boundary, "boundary_multipliers": multipliers,
        "range": boundary_range,
        "method": described, "deployments_measured": len(deployments), "deployments_within_range": len(estimated),
        "min_wh_per_unit": min(row["wh_per_unit"] for row in estimated) if estimated else None,
        "max_wh_per_unit": max(row["wh_per_unit"] for row in estimated) if estimated else None,
    }
    if output_tokens is not None:
        per_token = output_tokens / 1e6  # Wh per million output tokens to Wh per response
        document["per_response"] = None if not estimated else {
            "output_tokens": output_tokens, "unit": "Wh per response",
            "min_wh": document["min_wh_per_unit"] * per_token, "max_wh": document["max_wh_per_unit"] * per_token,
            "low": boundary_range["low"] * per_token, "high": boundary_range["high"] * per_token}
    return {**document, "deployments": deployments}


TOKEN_UNIT_LABEL = "million output tokens"


def snapshot_label(result: dict[str, Any]) -> str:
    """Which data an estimate was read from, as its text output names it."""
    commit = f"upstream commit {result['commit']}" if result["commit"] else "upstream commit unknown"
    return f"snapshot {result['snapshot_id']} ({commit})"


def range_lines(result: dict[str, Any]) -> list[str]:
    """The estimate's range at its boundary and, when asked, Wh per response, as text lines."""
    lines = []
    if (spread := result["range"]) is not None:
        low, high = f"{spread['low']:.4g}", f"{spread['high']:.4g}"
        figures = f"{low} to {high} {result['unit']}" if low != high else f"{low} {result['unit']}, no spread"
        lines.append(f"range at the {result['boundary']} boundary: {figures} ({spread['spans']})")
    if response := result.get("per_response"):
        lines.append(f"per response of {response['output_tokens']} output tokens: {response['min_wh']:.4g}"
                     + (f" to {response['max_wh']:.4g}" if response["max_wh"] != response["min_wh"] else "")
                     + f" Wh (range {response['low']:.4g} to {response['high']:.4g} Wh)")
    return lines


def deployment_label(row: dict[str, Any]) -> str:
    """A deployment as people name it: 'num_gpus 2, tensor_parallel 2, precision BF16'."""
    return ", ".join(f"{name} {row[name]}" for name in DEPLOYMENT_FIELDS if row.get(name) is not None)


def resolve_question(measured: list[dict[str, Any]], task: str, model: str,
                     gpu: str | None) -> tuple[str, str, str | None]:
    """The task, model_id and GPU the index snapshot measured (rows of task, model_id, slug and gpu) for
    loosely written ones: a task in any case or by whole hyphen-separated parts of one name ('fim'); a model
    by its id or slug in any case; a GPU in any case (None: none asked, none resolved). Unknown, ambiguous
    or unmeasured names are refused, naming the nearest."""
    tasks = sorted({row["task"] for row in measured})
    wanted = task.casefold().split("-")
    task = _one("task", task, tasks, lambda name: name.casefold() == task.casefold(), lambda name: any(
        parts[start:start + len(wanted)] == wanted
        for parts in [name.casefold().split("-")] for start in range(len(parts))))
    slugs = {row["model_id"]: row["slug"] for row in measured}
    tasks_of = {name: sorted({row["task"] for row in measured if row["model_id"] == name}) for name in slugs}

    def nearest_models(value: str) -> str:
        # Any task's model is known (one measured for another task is refused below, naming its tasks); a
        # misspelt one is shown the nearest measured for the task asked, and apart from them the two nearer
        # still that only other tasks measured, if any (a wrong task would otherwise hide the model meant).
        here = nearest(value, [name for name in sorted(slugs) if task in tasks_of[name]], 5)
        overall = nearest(value, sorted(slugs), 5)
        elsewhere = list(itertools.takewhile(lambda name: task not in tasks_of[name], overall))[:2]
        if not here and not elsewhere:
            return _nearest_hint(value, sorted(slugs))
        return "; ".join([f"nearest measured for {task}: {', '.join(here)}"] * bool(here) + [
            "nearer, measured only for other tasks: " + ", ".join(f"{name} ({', '.join(tasks_of[name])})"
                                                               for name in elsewhere)] * bool(elsewhere))

    model = _one("model", model, sorted(slugs), lambda name: name == model, lambda name: model.casefold() in (
        name.casefold(), slugs[name].casefold(), name.rpartition("/")[2].casefold()), hint=nearest_models)
    if gpu is not None:
        gpu = _one("GPU", gpu, sorted({row["gpu"] for row in measured}), lambda name: name == gpu,
                   lambda name: name.casefold() == gpu.casefold())
    if task not in tasks_of[model]:
        raise PipelineError(f"{model} was not measured for {task}; it was for: {', '.join(tasks_of[model])}")
    if gpu is None:
        return task, model, gpu
    gpus_of_model = sorted({row["gpu"] for row in measured if row["model_id"] == model and row["task"] == task})
    if gpu not in gpus_of_model:
        raise PipelineError(f"{model} was not measured on {gpu} for {task}; only on: {', '.join(gpus_of_model)}")
    return task, model, gpu


def _one(kind: str, value: str, known: list[str], exactly: Callable[[str], bool], loosely: Callable[[str], bool],
         hint: Callable[[str], str] | None = None) -> str:
    """The one known name `value` names, exactly or else loosely; refused when none or several do, naming
    the nearest known names (or what `hint` says of `value`)."""
    matching = [name for name in known if exactly(name)] or [name for name in known if loosely(name)]
    if len(matching) == 1:
        return matching[0]
    if matching:
        raise PipelineError(f"{kind} {shown(value, quoted=True)} is ambiguous: it could be {', '.join(matching)}")
    raise PipelineError(f"unknown {kind} {shown(value, quoted=True)}; "
                        f"{hint(value) if hint else _nearest_hint(value, known)}")


def _nearest_hint(value: str, known: list[str]) -> str:
    close = nearest(value, known, 5)
    return f"nearest: {', '.join(close)}" if close else (
        f"none of the {len(known)} the index snapshot measured is near it (see: energy-index sql "
        '"select distinct task, model_id, gpu from configuration_points")')


def compare(paths: Paths, task: str, model_a: str, model_b: str, gpu: str | None = None,
            boundary: str | None = None) -> dict[str, Any]:
    """"A uses k× B" for two models on one task, per GPU both were measured on and boundary (the view
    model_comparisons), k per unit and per response, each with its interval from both figures' repeat
    ranges, and what differs where two diffusion workloads do (and no k), as one document naming the
    snapshot. Models by model_id or slug in any case; a GPU in any case."""
    with session(paths) as (connection, _):
        (snapshot,) = fetch_dicts(connection, "select s.snapshot_id, s.commit from snapshots as s"
                                  " join index_snapshot using (snapshot_id)", {})
        indexed = fetch_dicts(connection, "select distinct family, task, model_id, slug, gpu from index_rows_v2", {})
        tasks = sorted({row["task"] for row in indexed})
        task = _one("task", task, tasks, lambda name: name == task, lambda name: name.casefold() == task.casefold())
        in_task = [row for row in indexed if row["task"] == task]
        # Any task's model is known, so that one indexed only for other tasks is refused naming them.
        slugs = {row["model_id"]: row["slug"] for row in indexed}
        names = [_one("model", model, sorted(slugs), lambda name, m=model: name == m,
                      lambda name, m=model: m.casefold() in (name.casefold(), slugs[name].casefold()))
                 for model in (model_a, model_b)]
        for name in names:
            if not any(row["model_id"] == name for row in in_task):
                elsewhere = sorted({row["task"] for row in indexed if row["model_id"] == name})
                raise PipelineError(f"{name} is not in the {task} index; it is in: {', '.join(elsewhere)}")
        if names[0] == names[1]:
            raise PipelineError(f"compare: give two different models, not {names[0]} twice")
        if gpu is not None:
            gpu = _one("GPU", gpu, sorted({row["gpu"] for row in in_task}), lambda name: name == gpu,
                       lambda name: name.casefold() == gpu.casefold())
        rows = fetch_dicts(connection, f"""
            select gpu, boundary, unit_label, {', '.join(COMPARISON_COLUMNS)}
            from model_comparisons
            where task = $task and model_a = $a and model_b = $b and ($gpu is null or gpu = $gpu)
                and ($boundary is null or boundary = $boundary)
            order by gpu, boundary_position""",
                           {"task": task, "a": names[0], "b": names[1], "gpu": gpu, "boundary": boundary})
    if not rows:
        gpus = {name: sorted(row["gpu"] for row in in_task if row["model_id"] == name) for name in names}
        raise PipelineError(f"compare: {names[0]} and {names[1]} share no GPU{' ' + gpu if gpu else ''} in the "
                            f"{task} index; " + "; ".join(f"{name}: {', '.join(gpus[name])}" for name in names))
    unit, family = rows[0]["unit_label"], in_task[0]["family"]
    return {"task": task, "family": family, "model_a": names[0], "model_b": names[1],
            "snapshot_id": snapshot["snapshot_id"], "commit": snapshot["commit"], "unit": f"Wh per {unit}",
            "ratios": {"energy_ratio": f"k per {per_unit(family, unit)}: model_a's Wh per {unit} / model_b's",
                       "per_response_ratio": "k per response: model_a's Wh per response / model_b's, each at its "
                                             "own mean output length (avg_output_tokens_a, avg_output_tokens_b)"
                       if family == "token" else
                       f"k per response: one {unit} a response, so the same as energy_ratio"},
            "method": "k = model_a's index figure / model_b's (the lowest-energy configuration within the latency "
                      "limit on each GPU), per unit and per response; interval: model_a's lowest repeat / model_b's "
                      "highest to model_a's highest / model_b's lowest (a figure measured once is its own range). "
                      "Boundary factors are the GPU's for both, so k is the same at every boundary. Diffusion "
                      "configurations of different workloads (steps, resolution, frames, fps) get no k; "
                      "workload_difference names what differs (view model_comparisons).",
            "comparisons": [{key: value for key, value in row.items() if key != "unit_label"} for row in rows]}


# What a compare document gives of each GPU and boundary: model_comparisons' columns, in its order.
COMPARISON_COLUMNS = ("wh_per_unit_a", "wh_per_unit_b", "energy_ratio", "energy_ratio_low", "energy_ratio_high",
                      "n_repeats_a", "n_repeats_b", "avg_output_tokens_a", "avg_output_tokens_b",
                      "per_response_wh_a", "per_response_wh_b", "per_response_ratio", "per_response_ratio_low",
                      "per_response_ratio_high", "is_per_response_reversed", "workload_difference")


def per_unit(family: str, unit_label: str) -> str:
    """What a ratio of two figures per `unit_label` is per: of a token task's, per million output tokens each,
    per output token; of a diffusion task's, per image or video."""
    return "output token" if family == "token" else unit_label


def ratios_text(row: dict[str, Any], per: str, tokens: bool) -> str:
    """"A uses k× B per <per>" (and, for a token task, "and k× B per response"), each with its interval, or
    once that neither has one; or that there is no k, and why."""
    if row["energy_ratio"] is None:
        return f"no k: A and B were measured on different workloads, A's against B's: {row['workload_difference']}"
    once = row["n_repeats_a"] == 1 and row["n_repeats_b"] == 1
    parts = [(row["energy_ratio"], row["energy_ratio_low"], row["energy_ratio_high"], per)] + [
        (row["per_response_ratio"], row["per_response_ratio_low"], row["per_response_ratio_high"], "response")] * tokens
    said = " and ".join(f"{k:.3g}× B per {what}" + ("" if once else f" (interval {low:.3g} to {high:.3g})")
                        for k, low, high, what in parts)
    return f"A uses {said}" + (" (each measured once: no interval)" if once else "")


def reversal_text(row: dict[str, Any]) -> str:
    """In words, how per output token and per response point opposite ways for one row."""
    more, less = ("A", "B") if row["energy_ratio"] > 1 else ("B", "A")
    return (f"per output token and per response point opposite ways: {more} uses more energy per output token, "
            f"{less} more per response, as {less}'s responses are longer ({row['avg_output_tokens_a']:,.0f} "
            f"against {row['avg_output_tokens_b']:,.0f} mean output tokens, A against B)")


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """A compare document as text lines: one per GPU and boundary, each ratio naming what it is per, and
    after a GPU's lines what the figures' ratios cannot say plainly: that per output token and per response
    point opposite ways."""
    tokens = result["family"] == "token"
    per = per_unit(result["family"], result["unit"].removeprefix("Wh per "))
    lines = [f"{result['model_a']} (A) vs {result['model_b']} (B), {result['task']}; data: {snapshot_label(result)}:"]
    for gpu, rows in itertools.groupby(result["comparisons"], key=lambda row: row["gpu"]):
        rows = list(rows)
        for row in rows:
            if row["wh_per_unit_a"] is None:  # the GPU's boundary factors are missing, not its measurements
                figures = f"no {row['boundary']} figures for {gpu}: {NO_BOUNDARY_FACTORS}"
            else:
                figures = f"A {row['wh_per_unit_a']:.4g}, B {row['wh_per_unit_b']:.4g} {result['unit']}"
            if tokens and row["wh_per_unit_a"] is not None:
                figures += f"; A {row['per_response_wh_a']:.4g}, B {row['per_response_wh_b']:.4g} Wh per response"
            lines.append(f"  {gpu}, {row['boundary']}: {ratios_text(row, per, tokens)}; {figures}")
        if rows[0]["is_per_response_reversed"]:
            lines.append(f"  {gpu}: {reversal_text(rows[0])}")
    return lines
