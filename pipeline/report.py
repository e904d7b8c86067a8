"""energy-index report: OUT/report/index.html, a section per task, and a page per model, OUT/report/models/<slug>.html.

The views compute every figure, latency metric, title and unit; this module selects the rows, rounds them
to the field dictionary's decimals (the index files' rounding) and lays them out with the words of
report.toml. Charts are Altair (Vega-Lite) specifications drawn by vega-embed, whose JavaScript is inlined
in index.html and shared by the model pages as vega.js: nothing is fetched from a network. Beside each
table and chart, a CSV of its rows (OUT/report/csv/<page>/<id>.csv, linked relatively). Each chart of
the index page is also a PNG (vl-convert); ENERGY_INDEX_REPORT_PNGS, when set, names the only ones to draw
(comma-separated chart ids), for a test that checks one.
"""

import csv
import functools
import html
import io
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import msgspec

try:
    import vl_convert
except ImportError:  # the report extra is not installed: write_report says how to install it
    vl_convert = None

from pipeline.charts import ENERGY_COLUMNS, ChartText, Metric, alt, ambiguous_encodings, series_styles, task_charts
from pipeline.database import connect, fetch_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.export import TIER_FIELDS, energy_decimals, index_snapshot, task_plans
from pipeline.files import read_toml, staged_directory
from pipeline.paths import Paths
from pipeline.progress import each
from pipeline.report_fits import FIT_TABLE_TEXT, fit_chart, fit_table
from pipeline.report_fits import gather as gather_fits
from schemas import dictionary

# A deployment: what stays fixed along an efficiency curve (the other family's columns are null).
DEPLOYMENT = ("concat(num_gpus, ' GPU', case when num_gpus > 1 then 's' else '' end, ', ', coalesce(precision, '?'), "
              "coalesce(', TP' || tensor_parallel || ' DP' || data_parallel || ' EP' || expert_parallel, ''), "
              "coalesce(', ' || width || 'x' || height, ''), coalesce(', ' || num_frames || ' frames', ''), "
              "coalesce(', ' || inference_steps || ' steps, Ulysses ' || ulysses_degree || ' ring ' || ring_degree, "
              "''))")


class PageText(msgspec.Struct, frozen=True):
    title: str
    intro: str
    index_table: tuple[str, str]
    tier_table: tuple[str, str]
    comparison_table: tuple[str, str]
    diffusion_comparison_table: tuple[str, str]
    no_comparison: str
    charts: dict[str, ChartText]


class Texts(msgspec.Struct, frozen=True):
    batch_titles: dict[str, str]
    concurrency_titles: dict[str, str]
    one_snapshot: str
    page: str
    facts: dict[str, str]
    index: PageText
    model: PageText


@functools.cache
def _texts() -> Texts:
    return read_toml(Path(__file__).with_name("report.toml"), Texts)


@dataclass
class Task:
    """One task of the index snapshot, what the page says about its figures and the rows it shows."""

    task: str
    display_name: str
    family: str
    unit_label: str
    header: dict[str, Any]
    metrics: list[Metric]
    data: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Its model pages' charts, made once by Altair with slots (pipeline/charts.py: chart_template).
    chart_templates: dict[tuple[Any, ...], tuple[type, dict[str, Any]]] = field(default_factory=dict)

    @property
    def unit_title(self) -> str:
        return str(self.header["unit"])

    @property
    def metric(self) -> Metric:
        """The metric of the index's latency limit and of the index page's charts: the family's first."""
        return self.metrics[0]

    @property
    def batch_title(self) -> str:
        return _texts().batch_titles[self.family]

    @property
    def concurrency_title(self) -> str:
        return _texts().concurrency_titles[self.family]

    @property
    def deadline(self) -> str:
        limit = self.header.get("itl_deadline_ms", self.header.get("batch_latency_ceiling_s"))
        return f"{self.metric.title.rsplit(' (', 1)[0]} ≤ {limit} {self.metric.unit}"

    @functools.cached_property
    def decimals(self) -> dict[str, int]:
        """The index files' rounding: the task's Wh figure's decimals for every energy column, each latency
        metric's for its column."""
        latency = {column: digits for _, column, digits in TIER_FIELDS if digits is not None}
        return {**latency, **dict.fromkeys(ENERGY_COLUMNS, energy_decimals(self.unit_label))}

    def rounded(self, row: dict[str, Any]) -> dict[str, Any]:
        digits = {**self.decimals, "latency": self.decimals[row.get("latency_metric", self.metric.latency_metric)],
                  "latency_ms": self.decimals["median_itl_ms"], "latency_s": self.decimals["batch_latency_s"]}
        return {key: round(value, digits[key]) if key in digits and isinstance(value, float) else value
                for key, value in row.items()}


def _queries(task: Task) -> dict[str, str]:
    """The SQL of every row the task's charts and tables show, from the views, for every task in $tasks that
    shares the task's latency metrics (so one query serves a family's tasks): each row names its task in
    `report_task`, and rows are ordered by it first, then as the charts and tables show them. A task's rows are
    of one family, so a latency (the views' latency_ms or latency_s) and a tier's limit (latency_limit_ms or
    latency_limit_s) are one column each here, latency and latency_limit, in the unit its metric's title names."""
    metric = task.metric.latency_metric
    metrics = ", ".join(m.latency_metric for m in task.metrics)
    return {
        "best": f"""
            select b.task as report_task, b.model_id, b.slug, b.gpu, b.row_id, b.num_gpus,
                   coalesce(b.max_num_seqs, b.batch_size) as batch_limit, b.{metric} as latency, b.wh_per_unit,
                   'models/' || b.slug || '.html' as href, u.n_repeats, u.wh_repeat_min, u.wh_repeat_max,
                   u.runner_up_row_id, u.runner_up_wh_per_unit, u.choice_basis,
                   v.range_low, v.range_high, v.validity_codes as validity, v.energy_class,
                   v.energy_class_span, v.energy_class_reason
            from best_configurations as b
            left join index_uncertainty as u on u.task = b.task and u.model_id = b.model_id and u.gpu = b.gpu
            left join index_rows_v2 as v on v.task = b.task and v.model_id = b.model_id and v.gpu = b.gpu
            where list_contains($tasks, b.task)
            order by b.task, b.wh_per_unit, lower(b.model_id), b.model_id, b.gpu""",
        "frontier": f"""
            select f.task as report_task, f.model_id, f.slug, f.gpu, f.row_id, f.num_gpus, c.batch_limit,
                   f.n_repeats, f.latency_metric, coalesce(f.latency_ms, f.latency_s) as latency, f.wh_per_unit, f.scope
            from energy_latency_frontier as f join configuration_points as c using (snapshot_id, task, row_id)
            where list_contains($tasks, f.task) and (f.scope = 'model' or f.latency_metric = '{metric}')
            order by f.task, lower(f.model_id), f.latency_metric, if(f.scope = 'model', '', f.gpu), latency""",
        "points": f"""
            select task as report_task, model_id, gpu, row_id, num_gpus, batch_limit, n_repeats, wh_per_unit,
                   latency_metric, latency
            from (unpivot (select task, model_id, gpu, row_id, num_gpus, batch_limit, n_repeats, wh_per_unit, {metrics}
                           from configuration_points where list_contains($tasks, task))
                  on {metrics} into name latency_metric value latency)
            join latency_metrics using (latency_metric) order by task, model_id, gpu, row_id, metric_order""",
        "latency_cost": f"""
            select c.task as report_task, c.*, coalesce(c.latency_limit_ms, c.latency_limit_s) as latency_limit,
                   m.short_title as metric_label, 'models/' || c.slug || '.html' as href
            from latency_tier_costs as c join latency_metrics as m using (latency_metric)
            where list_contains($tasks, c.task)
            order by c.task, lower(c.model_id), c.model_id, c.gpu, m.metric_order, latency_limit""",
        "curves": f"""
            select task as report_task, model_id, slug, gpu, row_id, num_gpus, {DEPLOYMENT} as deployment,
                   batch_limit, n_repeats, {metric} as latency, wh_per_unit, wh_per_unit_min, wh_per_unit_max,
                   'models/' || slug || '.html' as href
            from configuration_points where list_contains($tasks, task)
            order by task, lower(model_id), gpu, deployment, batch_limit""",
        # "A uses k× B" at the gpu_only boundary (k is the same at every boundary); on_index_page:
        # each pair once, A the higher figure per unit, and of a token task only where the ratios disagree.
        "comparisons": """
            select task as report_task, model_a, slug_a, model_b, slug_b, gpu,
                   round(energy_ratio, 3) as energy_ratio, round(energy_ratio_low, 3) as energy_ratio_low,
                   round(energy_ratio_high, 3) as energy_ratio_high, round(per_response_ratio, 3) as per_response_ratio,
                   round(per_response_ratio_low, 3) as per_response_ratio_low,
                   round(per_response_ratio_high, 3) as per_response_ratio_high, avg_output_tokens_a,
                   avg_output_tokens_b, is_per_response_reversed, workload_difference,
                   (wh_per_unit_a > wh_per_unit_b or (wh_per_unit_a = wh_per_unit_b and model_a > model_b))
                       and (is_per_response_reversed or avg_output_tokens_a is null) as on_index_page,
                   'models/' || slug_b || '.html' as href_b
            from model_comparisons
            where list_contains($tasks, task) and boundary = 'gpu_only'
            order by task, lower(model_a), model_a, gpu, lower(model_b), model_b""",
        "history": f"""
            select h.task as report_task, h.snapshot_id, h.model_id, h.slug, h.gpu, h.row_id, h.num_gpus,
                   coalesce(h.max_num_seqs, h.batch_size) as batch_limit, h.{metric} as latency, h.wh_per_unit
            from best_configuration_history as h join snapshot_history as s using (snapshot_id)
            where list_contains($tasks, h.task) order by h.task, s.position, lower(h.model_id), h.gpu""",
    }


# Each measured concurrency (the line's corners are the measured points) and a half-octave grid between. Run a task
# at a time: energy_at_concurrency given the task as a constant reads only that task's curves (twice as fast as
# the same grid over every task with the task as a column).
ESTIMATES_QUERY = f"""
    with grid as (
        select distinct model_id, gpu, pow(2, k / 2) as x
        from configuration_points cross join range(0, 27) as r(k) where task = $task
        union
        select model_id, gpu, measured_concurrency as x from configuration_points where task = $task
    )
    select g.model_id, g.gpu, {DEPLOYMENT} as deployment, e.*
    from grid as g, lateral energy_at_concurrency($task, g.model_id, g.gpu, g.x) as e
    where e.method in ('measured', 'interpolated') order by g.model_id, g.gpu, deployment, e.concurrency"""


def _gather(connection: duckdb.DuckDBPyConnection, tasks: list[Task]) -> None:
    """Fill each task's `data`: the rows of _queries, rounded as the index files round them, then the fleet
    table's, the estimates' and the fit charts' rows (their macros read one task's rows when given it as a
    constant). Each of _queries runs once for all the tasks it serves rather than once a task: the views under
    it (index_rows_v2, model_comparisons) are computed per query, and per task they took 4 of a report's 9 s
    of queries on the newest snapshot."""
    sharing: dict[tuple[str, str], list[Task]] = {}
    for task in tasks:
        task.data = {}
        for name, query in _queries(task).items():
            sharing.setdefault((name, query), []).append(task)
    for (name, query), served in sharing.items():
        by_name = {task.task: task for task in served}
        for task in served:
            task.data[name] = []
        for row in fetch_dicts(connection, query, {"tasks": list(by_name)}):
            task = by_name[row.pop("report_task")]
            task.data[name].append(task.rounded(row))
    for task in each(tasks, "report: reading", unit="task"):
        data = task.data
        data["estimates"] = [task.rounded(row) for row in fetch_dicts(connection, ESTIMATES_QUERY, {"task": task.task})]
        data["fleet"] = fetch_dicts(connection, FLEET_QUERY, {"task": task.task}) if task.family == "token" else []
        data.update({name: [task.rounded(row) for row in rows]
                     for name, rows in gather_fits(connection, task.task, DEPLOYMENT).items()})
        data["model_frontier"] = [row for row in data["frontier"] if row["scope"] == "model"]
        data["frontier"] = [row for row in data["frontier"] if row["scope"] == "model_gpu"]
        data["snapshots"] = fetch_dicts(connection, "select snapshot_id from snapshot_history order by position", {})
        for row in data["latency_cost"]:
            row["tier"] = f"≤ {row['latency_limit']:g}"


# The index page's "plan a fleet" table (token tasks): at each latency tier of the build and each of
# FLEET_VOLUMES output tokens a day, the plan with the least energy a day over the task's models and GPUs at
# the gpu_only boundary (the table macro fleet_plan; docs/planning.md).
FLEET_VOLUMES = (1e8, 1e9, 1e10)
_VOLUME_ROWS = ", ".join(f"({volume:.0f})" for volume in FLEET_VOLUMES)
FLEET_QUERY = f"""
    with tiers as (
        select t.latency_metric, t.latency_limit_ms as latency_limit, v.per_day
        from latency_tiers as t cross join (values {_VOLUME_ROWS}) as v(per_day)
        where t.family = 'token'
    )
    select t.latency_metric, t.latency_limit, t.per_day, p.model_id, p.slug, p.gpu, p.row_id, p.replicas, p.gpus,
           p.kwh_per_day_central, p.power_kw_central, p.method
    from tiers as t, lateral fleet_plan($task, null, t.per_day, t.latency_metric, t.latency_limit) as p
    where p.boundary = 'gpu_only' and p.plan_status = 'planned'
    qualify row_number() over (partition by t.latency_metric, t.latency_limit, t.per_day
                               order by p.kwh_per_day_central, p.gpus, p.model_id, p.gpu) = 1
    order by t.latency_metric, t.latency_limit, t.per_day"""
FLEET_TABLE_TEXT = (
    "Plan a fleet: the least energy that serves 10⁸, 10⁹ or 10¹⁰ output tokens a day within each latency tier",
    "Each cell: kWh a day at the gpu_only boundary of the plan with the least energy over the task's models and GPUs "
    "(the table macro fleet_plan: replicas of the configuration within the tier, each at the load it carries on its "
    "measured curve), and under it the model, the GPU and how many GPUs; empty: no plan within the tier. Per model "
    "and GPU, with the server and facility boundaries: energy-index plan (docs/planning.md).")


def _fleet_table(task: Task, rows: list[dict[str, Any]]) -> str:
    """Latency tiers × FLEET_VOLUMES, each cell the least energy a day of a plan within the tier."""
    if not rows:
        return "<p>No plan within any tier.</p>"
    cells: dict[tuple[str, float], dict[float, dict[str, Any]]] = {}
    for row in rows:
        cells.setdefault((row["latency_metric"], row["latency_limit"]), {})[row["per_day"]] = row
    titles = {metric.latency_metric: metric.title for metric in task.metrics}
    headers = ["latency limit"] + [f"10{str(round(math.log10(volume))).translate(SUPERSCRIPTS)} tokens a day: kWh a day"
                                   for volume in FLEET_VOLUMES]
    return _table("fleet-table", headers, [
        [_cell(f"{titles[metric].rsplit(' (', 1)[0]} ≤ {limit:g} ms", sort=f"{metric} {limit:08.1f}")] + [
            _cell(float(f"{plan['kwh_per_day_central']:.4g}"), hover=f"{plan['row_id']}, {plan['replicas']:,} "
                  f"replica(s), {plan['power_kw_central']:.4g} kW on average ({plan['method']})",
                  note=f"{plan['model_id']} on {plan['gpus']:,} {plan['gpu']}")
            if (plan := by_volume.get(volume)) else _cell("", sort="") for volume in FLEET_VOLUMES]
        for (metric, limit), by_volume in cells.items()])


SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def _configuration(row_id: str | None) -> str | None:
    """A configuration as a tier cell prints it under its figure: the row_id less the model slug and the GPU
    (the row's), e.g. 8/32 (GPU count, batch limit) of qwen3-8b/H100/8/32."""
    return None if row_id is None else row_id.split("/", 2)[-1]


def _cell(value: Any, hover: str | None = None, link: str | None = None, sort: Any = None,
          note: str | None = None) -> str:
    """A table cell; a number is shown as the index file holds it and sorts as a number (empty cells last);
    `note`, printed under the value in small type, says what gives it (the configuration of a figure)."""
    number = not isinstance(value, str)  # None too: an empty number, which sorts last
    text = "" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
    sort = ("" if value is None else value) if number else sort
    text = html.escape(text) if link is None else f'<a href="{html.escape(link)}">{html.escape(text)}</a>'
    text += "" if note is None else f'<span class="config">{html.escape(note)}</span>'
    return ("<td" + ' class="number"' * number + ("" if sort is None else f' data-value="{html.escape(str(sort))}"')
            + ("" if hover is None else f' title="{html.escape(hover)}"') + f">{text}</td>")


def _table(css_class: str, headers: list[str], rows: list[list[str]], groups: list[tuple[str, int]] = ()) -> str:
    """A table sortable by any column (click its heading); `groups` adds a heading row above spanning columns."""
    group_row = "".join(f'<th colspan="{span}" class="group">{html.escape(title)}</th>' for title, span in groups)
    head = "".join(f'<th data-column="{index}" title="click to sort">{html.escape(title)}</th>'
                   for index, title in enumerate(headers))
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return (f'<table class="sortable {css_class}"><thead>{f"<tr>{group_row}</tr>" if groups else ""}<tr>{head}</tr>'
            f"</thead><tbody>{body}</tbody></table>")


def _model_cell(row: dict[str, Any], with_model: bool) -> list[str]:
    link = f"models/{row['slug']}.html"
    return [_cell(row["model_id"], link=link, sort=row["model_id"].lower())] if with_model else []


def _index_table(task: Task, rows: list[dict[str, Any]], with_model: bool = True) -> str:
    """The index rows as index.json holds them, ordered by the figure."""
    if not rows:
        return "<p>No configuration within the deadline.</p>"
    digits = task.decimals["wh_per_unit"]
    headers = ["model"] * with_model + ["GPU", "configuration", "GPUs", task.batch_title, task.metric.title,
                                        task.unit_title, "range (repeats)", "validity", "class", "times measured",
                                        "runner-up within the deadline", "runner-up configuration"]
    return _table("index-table", headers, [_model_cell(row, with_model) + [
        *(_cell(row[column]) for column in ("gpu", "row_id", "num_gpus", "batch_limit", "latency", "wh_per_unit")),
        # the index format's version 2 range, validity codes and class beside the figure (docs/index-files.md)
        _cell("measured once" if row["range_low"] is None else f"{round(row['range_low'], digits)} to "
              f"{round(row['range_high'], digits)}"),
        _cell(row["validity"] or "", hover="validity codes: docs/index-files.md"),
        _cell(row["energy_class"] or "", hover=f"ComparIA's scale, Wh per million output tokens at the facility "
              "boundary (central factors): A < 100, B < 300, C < 1,000, D < 3,000, E < 10,000, F from 10,000; "
              f"low to high factors: {row['energy_class_span']}" if row["energy_class"] else
              row["energy_class_reason"] or ""),
        _cell(row["n_repeats"], hover="measured once" if (row["n_repeats"] or 0) < 2 else
              f"repeats from {row['wh_repeat_min']} to {row['wh_repeat_max']}"),
        _cell(row["runner_up_wh_per_unit"],
              hover=f"{row['runner_up_row_id'] or 'none'}; the index row: {row['choice_basis']}"),
        _cell(row["runner_up_row_id"] or "", hover=row["choice_basis"]),
    ] for row in rows])


def _comparison_table(task: Task, rows: list[dict[str, Any]], with_model: bool = True) -> str:
    """The pairs "A uses k× B", each ratio with its interval in the next column and, where k is withheld or
    the two ratios point opposite ways, a sentence saying so."""
    tokens = task.family == "token"
    per = "output token" if tokens else task.unit_label

    def interval(row: dict[str, Any], ratio: str) -> str:
        if row[ratio] is None:
            return ""
        once = row[f"{ratio}_low"] == row[f"{ratio}_high"]
        return "measured once: none" if once else f"{row[f'{ratio}_low']} to {row[f'{ratio}_high']}"

    def note(row: dict[str, Any]) -> str:
        if row["workload_difference"] is not None:
            return f"no k: different workloads ({row['workload_difference']})"
        if row["is_per_response_reversed"]:
            longer = "B" if row["energy_ratio"] > 1 else "A"
            return (f"opposite ways: A uses {'more' if longer == 'B' else 'less'} energy per output token, "
                    f"{'less' if longer == 'B' else 'more'} per response ({longer}'s responses are longer)")
        return ""

    headers = (["model (A)"] * with_model + ["B", "GPU", f"A uses k× B per {per}", "interval (repeats)"]
               + ["A uses k× B per response", "interval (repeats)", "mean output tokens, A",
                  "mean output tokens, B"] * tokens + ["what the ratios say"])
    return _table("comparison-table", headers, [
        _model_cell({"model_id": row["model_a"], "slug": row["slug_a"]}, with_model) + [
            _cell(row["model_b"], link=row["href_b"] if with_model else row["href_b"].removeprefix("models/"),
                  sort=row["model_b"].lower()),
            _cell(row["gpu"]), _cell(row["energy_ratio"]), _cell(interval(row, "energy_ratio")),
            *([_cell(row["per_response_ratio"]), _cell(interval(row, "per_response_ratio")),
               _cell(round(row["avg_output_tokens_a"])), _cell(round(row["avg_output_tokens_b"]))] if tokens else []),
            _cell(note(row))]
        for row in rows])


def _tier_table(task: Task, rows: list[dict[str, Any]], with_model: bool = True) -> str:
    """Model × GPU rows, a column per tier of every latency metric, each the tier's figure as tiers.json holds it."""
    if not rows:
        return "<p>No configuration within any tier.</p>"
    metrics = [m for m in task.metrics if any(row["latency_metric"] == m.latency_metric for row in rows)]
    tiers = [(m, limit) for m in metrics
             for limit in sorted({row["latency_limit"] for row in rows if row["latency_metric"] == m.latency_metric})]
    cells: dict[tuple[str, str], dict[tuple[str, float], dict[str, Any]]] = {}
    for row in rows:  # in the table's order: by model without regard to case, then GPU
        cells.setdefault((row["model_id"], row["gpu"]), {})[row["latency_metric"], row["latency_limit"]] = row
    headers = ["model"] * with_model + ["GPU"] + [f"≤ {limit:g} {m.unit}" for m, limit in tiers]
    groups = [("", 1 + with_model)] + [(m.title, sum(1 for other, _ in tiers if other == m)) for m in metrics]
    return _table("tier-table", headers, [
        _model_cell(next(iter(values.values())), with_model) + [_cell(gpu)] + [
            _cell(values[m.latency_metric, limit]["wh_per_unit"], hover=values[m.latency_metric, limit]["row_id"],
                  note=_configuration(values[m.latency_metric, limit]["row_id"]))
            if (m.latency_metric, limit) in values else _cell("", sort="") for m, limit in tiers]
        for (_, gpu), values in cells.items()], groups)


# Columns a CSV download leaves out: links and drawing aids, not data.
NOT_IN_CSV = {"href", "href_b", "slug", "slug_a", "slug_b", "line_colour", "on_index_page"}


def _csv(rows: list[dict[str, Any]]) -> str:
    """Rows as CSV, the columns of the first row (less NOT_IN_CSV), numbers as the page shows them."""
    if not rows:
        return ""
    columns = [column for column in rows[0] if column not in NOT_IN_CSV]
    written = io.StringIO()
    writer = csv.writer(written, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([row.get(column) for column in columns] for row in rows)
    return written.getvalue()


@dataclass
class Downloads:
    """The CSV files of a page, by name, in the folder `folder` (relative to OUT/report) that `link` reaches
    from the page."""

    folder: str
    link: str
    files: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, datasets: dict[str, list[dict[str, Any]]]) -> str:
        """A CSV of each dataset under `name`; the links to them, for beside a heading."""
        links = []
        for dataset, rows in datasets.items():
            file = name if len(datasets) == 1 else f"{name}-{dataset}"
            self.files[f"{file}.csv"] = _csv(rows)
            label = "CSV" if len(datasets) == 1 else f"CSV: {dataset}"
            links.append(f'<a class="csv" href="{html.escape(self.link)}/{html.escape(file)}.csv" '
                         f'download>{html.escape(label)}</a>')
        return f'<span class="downloads">{" ".join(links)}</span>'


def _section(task: Task, snapshot: dict[str, Any], rows: dict[str, list[dict[str, Any]]],
             models: list[str] | None, styles: dict[str, tuple[str, str]],
             downloads: Downloads) -> tuple[str, dict[str, dict[str, Any]]]:
    """A task's section of the index page (`models`: the task's models in order) or of a model's page: what its
    figures rest on, the index table, the tier table, then the charts, each with a CSV of its rows beside it;
    and the charts' specifications by id."""
    text, header = _texts().index if models else _texts().model, task.header
    facts = {**snapshot, **header, **header["source"], "unit": task.unit_title, "deadline": task.deadline,
             "commit_time": snapshot["commit_time"] or "unknown time"}
    heading = '<h3>{}</h3><p class="answers">{} {}</p>'.format
    parts = [f'<section id="{task.task}"><h2>{html.escape(task.display_name)} ({task.task})</h2><dl class="facts">',
             *(f"<dt>{html.escape(name)}</dt><dd>{html.escape(fact.format(**facts))}</dd>"
               for name, fact in _texts().facts.items()), "</dl>",
             heading(*(part.format(models=len(models or ()), task=task.task) for part in text.index_table),
                     downloads.add(f"{task.task}-index", {"best": rows["best"]})),
             _index_table(task, rows["best"], with_model=bool(models)),
             heading(*text.tier_table, downloads.add(f"{task.task}-tiers", {"latency_cost": rows["latency_cost"]})),
             _tier_table(task, rows["latency_cost"], bool(models))]
    comparisons = [row for row in rows["comparisons"] if row["on_index_page"] or not models]
    table_text = text.comparison_table if task.family == "token" else text.diffusion_comparison_table
    # No rows, no table: a sentence says why (no heading, which would stand over nothing).
    parts += [heading(*(part.format(unit=task.unit_label) for part in table_text),
                      downloads.add(f"{task.task}-comparisons", {"comparisons": comparisons})),
              _comparison_table(task, comparisons, bool(models))] if comparisons else [
        '<p class="answers">{}</p>'.format(text.no_comparison if models and task.family == "token"
                                           else _texts().model.no_comparison)]
    if models and task.family == "token":  # the index page: plans over every model of the task
        parts += [heading(*map(html.escape, FLEET_TABLE_TEXT),
                          downloads.add(f"{task.task}-fleet", {"fleet": rows["fleet"]})),
                  _fleet_table(task, rows["fleet"])]
    specs = {}
    for chart in task_charts(task, rows, models, text.charts, _texts().one_snapshot, styles):
        chart_id = f"{task.task}-{chart.name}"
        if problems := ambiguous_encodings(chart.spec):
            raise PipelineError(f"report: chart {chart_id} would not tell its categories apart", problems)
        specs[chart_id] = chart.spec
        parts.append(heading(html.escape(chart.title), html.escape(chart.answers),
                             downloads.add(chart_id, chart.spec["datasets"]))
                     + f'<div class="chart" id="{html.escape(chart_id)}"></div>')
    if models is None and (chart := fit_chart(task, rows, styles)):  # a model's page: its fitted curves, their status
        specs[chart_id := f"{task.task}-{chart.name}"] = chart.spec
        headings, values = fit_table(task, rows["fits"], task.decimals["wh_per_unit"])
        fits = [{key: value for key, value in row.items() if key != "panel"} for row in rows["fits"]]
        charts_from = next((i for i, part in enumerate(parts) if 'class="chart"' in part), len(parts))
        parts[charts_from:charts_from] = [  # the table with the other tables, before the charts
            heading(*map(html.escape, FIT_TABLE_TEXT), downloads.add(f"{task.task}-fit-table", {"fits": fits})),
            _table("fit-table", headings, [[_cell(value) for value in row] for row in values])]
        parts.append(heading(html.escape(chart.title), html.escape(chart.answers),
                             downloads.add(chart_id, chart.spec["datasets"]))
                     + f'<div class="chart" id="{html.escape(chart_id)}"></div>')
    parts.append("</section>")
    return "".join(parts), specs


def _page(text: PageText, snapshot: dict[str, Any], sections: Iterable[tuple[Task, dict[str, Any], list[str] | None]],
          script: str, styles: dict[str, tuple[str, str]], downloads: Downloads,
          **values: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    """A whole page of (task, rows, models) sections, each task's linked from the page's opening; and its charts'
    specifications by id."""
    assets, specs, nav, bodies = Path(__file__).parent, {}, [], []
    for task, rows, models in sections:
        body, charts = _section(task, snapshot, rows, models, styles, downloads)
        nav.append(f'<a href="#{task.task}">{html.escape(task.display_name)}</a>')
        bodies.append(body)
        specs.update(charts)
    escaped = {name: html.escape(str(value)) for name, value in values.items()}
    return _texts().page.format(
        title=html.escape(text.title.format(**values)), intro=text.intro.format(nav="".join(nav), **escaped),
        style=(assets / "report.css").read_text(encoding="utf-8"), script=script, sections="\n".join(bodies),
        charts=msgspec.json.encode(specs).decode().replace("</", "<\\/"),  # no "</script>" inside the script
        code=(assets / "report.js").read_text(encoding="utf-8")), specs


def _tasks(connection: duckdb.DuckDBPyConnection, snapshot: dict[str, Any]) -> list[Task]:
    metrics = fetch_dicts(connection, "select * from latency_metrics order by metric_order", {})
    names = dict(connection.execute("select task, display_name from tasks where snapshot_id = ?",
                                    [snapshot["snapshot_id"]]).fetchall())
    return [Task(plan.task, names[plan.task] or plan.task, plan.family, plan.unit, plan.header, [
        msgspec.convert({**m, "unit": dictionary.column("configuration_points", m["latency_metric"]).unit}, Metric)
        for m in metrics if m["family"] == plan.family])
        for plan in task_plans(connection, snapshot, snapshot["retrieved"], snapshot["stated_retrieved"])]


def _models(task: Task) -> list[str]:
    """The task's models in the order its charts list them: by best figure (the order of the best rows), then
    the rest by name."""
    models = list(dict.fromkeys(row["model_id"] for row in task.data["best"]))
    return models + sorted({row["model_id"] for row in task.data["curves"]} - set(models), key=str.lower)


def _model_rows(task: Task, model_id: str) -> dict[str, list[dict[str, Any]]]:
    """The rows of the task that a model's page shows: the model's, its frontier across GPUs as the frontier."""
    rows = {key: value if key == "snapshots" else [row for row in value
                                                   if row.get("model_id", row.get("model_a")) == model_id]
            for key, value in task.data.items()}
    rows["frontier"] = rows.pop("model_frontier")
    return rows


def _write_downloads(staging: Path, downloads: Downloads) -> None:
    folder = staging / downloads.folder
    folder.mkdir(parents=True)
    for name, text in downloads.files.items():
        (folder / name).write_text(text, encoding="utf-8")


def write_report(paths: Paths) -> tuple[Path, int]:
    """Write OUT/report (replaced whole); return its index.html and the number of charts of the index page."""
    if alt is None or vl_convert is None:
        raise PipelineError("report: its libraries are not installed: "
                            "pip install 'energy-index[report]' (make installs them)")
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    with connect(str(paths.database), read_only=True) as connection:
        snapshot = index_snapshot(connection)
        snapshot_count = connection.execute("select count(*) from snapshots").fetchone()[0]
        tasks = _tasks(connection, snapshot)
        _gather(connection, tasks)
        pages = connection.execute("select slug, list(distinct model_id order by model_id) from configuration_points "
                                   "group by slug order by slug").fetchall()
    if clashes := [f"{slug}: {' and '.join(ids)}" for slug, ids in pages if len(ids) > 1]:
        raise PipelineError("model ids that would share one report page (slug)", clashes)
    # A GPU's (and a model's) colour and shape on every page: by its place among the snapshot's GPUs (models).
    styles = series_styles((row["gpu"] for task in tasks for row in task.data["curves"]),
                           (row["model_id"] for task in tasks for row in task.data["curves"]))
    # Altair validates every object it makes against the Vega-Lite schema as it makes it, and every copy a
    # layer or concatenation makes: four fifths of a report's time (160 s on the newest snapshot). One chart
    # of each kind is still validated whole, as a dict (pipeline/charts.py: _VALIDATED).
    with staged_directory(paths.out / "report") as staging, alt.utils.schemapi.debug_mode(False):
        (staging / "models").mkdir()
        bundle = vl_convert.javascript_bundle()
        (staging / "vega.js").write_text(bundle, encoding="utf-8")
        downloads = Downloads("csv/index", "csv/index")
        index, specs = _page(_texts().index, snapshot, ((task, task.data, _models(task)) for task in
                                                         each(tasks, "report: index page", unit="task")),
                             f"<script>{bundle}</script>", styles, downloads, snapshot_id=snapshot["snapshot_id"],
                             snapshot_count=snapshot_count)
        _write_downloads(staging, downloads)
        chosen = os.environ.get("ENERGY_INDEX_REPORT_PNGS")
        for name in each([name for name in specs if chosen is None or name in chosen.split(",")], "report: PNGs",
                         unit="chart"):
            (staging / f"{name}.png").write_bytes(vl_convert.vegalite_to_png(specs[name], scale=1.5))
        (staging / "index.html").write_text(index, encoding="utf-8")
        for slug, (model_id,) in each(pages, "report: model pages", unit="model"):
            sections = [(task, _model_rows(task, model_id), None) for task in tasks
                        if any(row["model_id"] == model_id for row in task.data["curves"])]
            downloads = Downloads(f"csv/{slug}", f"../csv/{slug}")
            page, _ = _page(_texts().model, snapshot, sections, '<script src="../vega.js"></script>', styles,
                            downloads, model_id=model_id, snapshot_id=snapshot["snapshot_id"])
            (staging / "models" / f"{slug}.html").write_text(page, encoding="utf-8")
            _write_downloads(staging, downloads)
    return paths.out / "report" / "index.html", len(specs)
