"""The generated sections of the reference pages, written by cog (cogapp, `make docs`: `cog -r`; the test
suite runs `cog --check`): each page's section is a cog block that calls one function here. docs/cli.md's
reference from the CLI's own commands (click), docs/querying.md's list of objects from
schemas/dictionary.toml and the sql/ headers, docs/index-files.md's fields from schemas/dictionary.toml
[exports], and docs/data-dictionary.md's tables from a built database's data_dictionary table (itself made
from schemas/dictionary.toml; the build in `out`, cog's `-D out=OUT`)."""

import io
import itertools
import re
from pathlib import Path

from pipeline import settings
from pipeline.cli import all_commands, cli
from pipeline.database import connect
from pipeline.errors import PROG, PipelineError
from pipeline.paths import PROJECT_ROOT, Paths
from pipeline.sql_objects import is_stored, sql_object, sql_path, view_description, view_files
from schemas import dictionary

DOCS = PROJECT_ROOT / "docs"
# Help is wrapped at this width whatever terminal renders the page, so the page does not depend on it.
CLI_HELP_COLUMNS = 100


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def render_data_dictionary(out: str | Path) -> str:
    """Every table's and view's columns, from the data_dictionary table of the database built in `out`."""
    database = Paths(Path(out)).database
    if not database.is_file():
        raise PipelineError(f"{database}: no database to document; run 'make' first")
    with connect(str(database), read_only=True) as connection:
        rows = connection.execute(
            "select object_name, kind, object_description, column_name, data_type, unit, description, source"
            " from data_dictionary order by kind, object_name, position"
        ).fetchall()
    lines = []
    for (name, kind, object_description), columns in itertools.groupby(rows, key=lambda row: row[:3]):
        lines += ["", f"<details><summary><code>{name}</code> ({kind}): {_cell(object_description)}</summary>", "",
                  "| column | type | unit | description | source |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| `{column}` | {data_type} | {_cell(unit)} | {_cell(description)} | {_cell(source)} |"
                  for *_, column, data_type, unit, description, source in columns]
        lines += ["", "</details>"]
    return "\n".join([*lines, ""]) + "\n"


LAYERS = ("staging", "intermediate", "marts", "macros")  # sql/'s folders, in the order a reader meets them
FIRST_SENTENCE = re.compile(r"^(?:(?:[Tt]able macro|[Mm]acro|View|Staging); )?(.+?\.)(?:\s+[A-Z(]|$)")


def _object_row(name: str, kind: str, description: str, source: str) -> str:
    """A row of the list of objects from a description worded "What. Grain: one row per X. Key: (k)."."""
    what, _, rest = description.partition(" Grain: ")
    grain, _, key = rest.rpartition(". Key: ")
    first = FIRST_SENTENCE.match(what).group(1)
    grain = "(one row in all)" if grain == "one row" else grain.removeprefix("one row per ")
    key = f"`{key.rstrip('.')}`" if key.startswith("(") else _cell(key.rstrip("."))
    return f"| `{name}` | {kind} | {_cell(grain)} | {key} | {_cell(first[0].upper() + first[1:])} | {source} |"


def render_objects() -> str:
    """Every table, view and macro: its grain, key and first sentence, from where each is declared
    (schemas/dictionary.toml for tables, the header of its sql/ file for views and macros)."""
    lines = ["", "| name | kind | one row per | key | what it holds | from |",
             "| --- | --- | --- | --- | --- | --- |"]
    for table, entry in dictionary.entries().tables.items():
        lines.append(_object_row(table, "table", dictionary.table_description(table), _cell(entry.source)))
    for layer in LAYERS:
        for name in sorted(name for name, path in view_files().items() if path.parent.name == layer):
            kind, path = sql_object(name).kind, sql_path(name)
            shown = f"table ({layer}; a view's rows, stored)" if is_stored(name) else f"view ({layer})"
            lines.append(_object_row(name, shown if kind == "view" else kind, view_description(name),
                                     f"[{path}](../{path})"))
    return "\n".join([*lines, ""]) + "\n"


def render_index_fields() -> str:
    """Each kind of index-file row's keys in file order, with the decimals each is rounded to."""
    lines = ["", "| row | keys in order (decimals; 0: an integer; none: as published or computed) |",
             "| --- | --- |"]
    for name in dictionary.entries().exports:
        keys = [f"`{f['key']}`" + (" (as the Wh figure)" if f["decimals"] == dictionary.ENERGY_DECIMALS else
                                   f" ({f['decimals']})" if f["decimals"] is not None else "")
                for f in dictionary.export_fields(name)]
        lines.append(f"| {name.replace('_', ' ')} | {', '.join(keys)} |")
    return "\n".join([*lines, ""]) + "\n"


def render_index_v2() -> str:
    """Version 2's additions field by field (key, meaning, unit, decimals), then its validity codes with
    their tests, thresholds and reasons, and the energy class scale (pipeline/index_v2.toml)."""
    from pipeline.reference_tables import load_index_v2

    lines = ["", "| key | what it holds | unit | decimals |", "| --- | --- | --- | --- |"]
    for field in dictionary.export_fields("index_v2"):
        facts = dictionary.column("index_rows_v2", field["column"])
        decimals = ("as the row's Wh figure" if field["decimals"] == dictionary.ENERGY_DECIMALS
                    else "none" if field["decimals"] is None else str(field["decimals"]))
        lines.append(f"| `{field['key']}` | {_cell(facts.description)} | {_cell(facts.unit)} | {decimals} |")
    validity, classes = load_index_v2()
    lines += ["", "Validity codes, in the order a row lists them:", "",
              "| code | rows | threshold | test | why it matters |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| `{code}` | {applies_to} | {threshold:g} | {_cell(test)} | {_cell(why)} |"
              for _, code, applies_to, threshold, test, why in validity]
    boundary = classes[0][3]
    lines += ["", f"Energy classes (token tasks; Wh per million output tokens at the {boundary} boundary):", "",
              "| class | from (inclusive) | below |", "| --- | --- | --- |"]
    lines += [f"| {letter} | {low:,g} | {'' if high is None else f'{high:,g}'} |" for letter, low, high, _ in classes]
    return "\n".join([*lines, ""]) + "\n"


def render_cli() -> str:
    """The settings with their defaults, then the group's and every command's --help, as a terminal
    CLI_HELP_COLUMNS wide shows them."""
    lines = ["", "Every default, declared once in pipeline/settings.py (`make help` lists them too):", "",
             settings.table(), "", "```"]
    group = cli.make_context(PROG, [], resilient_parsing=True, terminal_width=CLI_HELP_COLUMNS,
                             max_content_width=CLI_HELP_COLUMNS)
    lines += [cli.get_help(group), "```"]
    for name, command in all_commands().items():
        context = command.make_context(name, [], parent=group, resilient_parsing=True)
        lines += ["", f"## `{PROG} {name}`", "", "```", command.get_help(context), "```"]
    return "\n".join([*lines, ""]) + "\n"


def render_fit_errors(out: str | Path) -> str:
    """How well each way of reading between measured points predicts a point left out, on the index
    snapshot of the build in `out`: the logistic fits' leave-one-out errors (efficiency_curve_fits) beside
    the interpolation's, for energy per output, over deployments with at least five points."""
    import numpy as np

    database = Paths(Path(out)).database
    if not database.is_file():
        raise PipelineError(f"{database}: no database to document; run 'make' first")
    deployment = ("task, model_id, gpu, num_gpus, tensor_parallel, data_parallel, expert_parallel, ulysses_degree, "
                  "ring_degree, precision, width, height, num_frames, fps, inference_steps")
    with connect(str(database), read_only=True) as connection:
        snapshot = connection.execute("select snapshot_id from index_snapshot").fetchone()[0]
        fits = connection.execute(
            f"select family, {deployment}, leave_one_out_median_error, in_sample_max_error, is_fit_for_use"
            " from efficiency_curve_fits where snapshot_id = ? and quantity = 'energy' and L is not null", [snapshot]
        ).fetchall()
        points = connection.execute(
            f"select {deployment}, list(log2(batch_limit) order by batch_limit), list(wh_per_unit order by batch_limit)"
            f" from efficiency_curve_points_in(?) group by all", [snapshot]).fetchall()
    # The interpolation's error at each interior point: linear in log batch between its two neighbours.
    interpolated = {}
    for *key, x, y in points:
        x, y = np.array(x), np.array(y)
        predicted = y[:-2] + (y[2:] - y[:-2]) * (x[1:-1] - x[:-2]) / (x[2:] - x[:-2])
        interpolated[tuple(key)] = float(np.median(np.abs(predicted - y[1:-1]) / np.abs(y[1:-1]))) if len(y) > 2 else None
    lines = [f"On snapshot {snapshot}, energy per output, deployments with at least five measured points; each "
             "deployment's median relative error at its interior points, each predicted without it:", "",
             "| family | deployments | fit for use | logistic fit: median (p90) | interpolation: median (p90) "
             "| a fit's largest miss of a measured point |", "| --- | --- | --- | --- | --- | --- |"]
    for family in ("token", "diffusion"):
        rows = [row for row in fits if row[0] == family]
        logistic = [row[-3] for row in rows]
        interpolation = [interpolated[tuple(row[1:-3])] for row in rows]
        lines.append(f"| {family} | {len(rows)} | {sum(row[-1] for row in rows)} | "
                     f"{np.median(logistic):.1%} ({np.percentile(logistic, 90):.1%}) | "
                     f"{np.median(interpolation):.1%} ({np.percentile(interpolation, 90):.1%}) | "
                     f"{max(row[-2] for row in rows):.0%} |")
    return "\n".join([*lines, ""]) + "\n"


def stale(page: Path, out: str | Path | None = None) -> str:
    """What `cog --check --diff` says of a page whose generated sections differ from what the code
    generates now (`out`: the build the data dictionary's section reads); empty when they are the same."""
    from cogapp import Cog

    cog, said = Cog(), io.StringIO()
    cog.set_output(stdout=said, stderr=said)
    defines = ["-D", f"out={out}"] if out is not None else []
    return "" if cog.main(["cog", "--check", "--diff", *defines, str(page)]) == 0 else said.getvalue()
