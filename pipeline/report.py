"""energy-index report: OUT/report/index.html, a section per task, and a page per model, OUT/report/models/<slug>.html.

The views compute every figure, latency metric, title and unit; this module selects the rows, rounds them
to the field dictionary's decimals (the index files' rounding) and lays them out with the words of
report.toml. Charts are Altair (Vega-Lite) specifications drawn by vega-embed, whose JavaScript is inlined
in index.html and shared by the model pages as vega.js: nothing is fetched from a network. Each chart of
the index page is also a PNG (vl-convert); ENERGY_INDEX_REPORT_PNGS, when set, names the only ones to draw
(comma-separated chart ids), for a test that checks one.
"""

import datetime
import functools
import html
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import msgspec

try:
    import altair as alt
    import vl_convert
except ImportError:  # the report extra is not installed: write_report says how to install it
    alt = vl_convert = None

from pipeline.database import connect, fetch_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.export import diffusion_task_header, task_header
from pipeline.files import replace_directory
from pipeline.paths import Paths
from pipeline.progress import each
from pipeline.source_card import load_source_card
from schemas import dictionary

# Vega's tableau10: ten colours a reader tells apart. A chart with more models than colours gives each
# model a colour and a shape, the pair unique up to len(MODEL_COLOURS) * len(MODEL_SHAPES) = 70 models
# (10 and 7 share no factor); tests/test_report.py checks every chart against this.
MODEL_COLOURS = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6",
                 "#9d755d", "#bab0ac"]
MODEL_SHAPES = ["circle", "square", "triangle-up", "diamond", "triangle-down", "cross", "triangle-right"]
GPU_COLOURS = ["#1b6ca8", "#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e"]
GPU_SHAPES = ["circle", "square", "triangle-up", "diamond", "cross", "triangle-down"]
DASHES = [[1, 0], [6, 3], [2, 2], [8, 3, 2, 3], [1, 3], [10, 2]]
FADED_OPACITY = 0.12
# Tick values for a log axis in small panels: the powers of ten (Vega's default crowds them).
DECADES = [10.0 ** power for power in range(-4, 6)]
BATCH_TITLES = {"token": "max_num_seqs (cap on requests in flight)", "diffusion": "batch size"}
CONCURRENCY_TITLES = {"token": "requests in flight (average running batch, log scale)",
                      "diffusion": "batch size (log scale)"}
ENERGY_COLUMNS = ("wh_per_unit", "wh_per_unit_low", "wh_per_unit_high", "wh_per_unit_min", "wh_per_unit_max",
                  "unconstrained_wh_per_unit", "wh_repeat_min", "wh_repeat_max", "runner_up_wh_per_unit")
# Tooltip entries by column: title, Vega-Lite type and number format.
TIPS = {"snapshot_id": ("snapshot", "N", None), "model_id": ("model", "N", None), "gpu": ("GPU", "N", None),
        "metric_label": ("latency metric", "N", None), "tier": ("tier", "N", None), "method": ("method", "N", None),
        "row_id": ("configuration", "N", None), "deployment": ("deployment", "N", None),
        "num_gpus": ("GPUs", "Q", None), "n_repeats": ("times measured", "Q", None),
        "concurrency": ("concurrency", "Q", ".3g"), "relative_to_best": ("ratio", "Q", ".2f")}
# A deployment: what stays fixed along an efficiency curve (the other family's columns are null).
DEPLOYMENT = ("concat(num_gpus, ' GPU', case when num_gpus > 1 then 's' else '' end, ', ', coalesce(precision, '?'), "
              "coalesce(', TP' || tensor_parallel || ' DP' || data_parallel || ' EP' || expert_parallel, ''), "
              "coalesce(', ' || width || 'x' || height, ''), coalesce(', ' || num_frames || ' frames', ''), "
              "coalesce(', ' || inference_steps || ' steps, Ulysses ' || ulysses_degree || ' ring ' || ring_degree, ''))")


class Metric(msgspec.Struct, frozen=True):
    """A latency metric of a family (the latency_metrics view) with its unit (the field dictionary)."""

    latency_metric: str
    title: str
    short_title: str
    unit: str


class ChartText(msgspec.Struct, frozen=True):
    title: str
    answers: str
    tooltip: list[str] = []
    repeated: str = ""
    once: str = ""


class PageText(msgspec.Struct, frozen=True):
    title: str
    intro: str
    index_table: tuple[str, str]
    tier_table: tuple[str, str]
    charts: dict[str, ChartText]


class Texts(msgspec.Struct, frozen=True):
    one_snapshot: str
    facts: dict[str, str]
    index: PageText
    model: PageText


@functools.cache
def _texts() -> Texts:
    path = Path(__file__).with_name("report.toml")
    try:
        return msgspec.toml.decode(path.read_bytes(), type=Texts)
    except msgspec.ValidationError as error:
        raise PipelineError(f"{path}: {error}") from None


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    answers: str
    spec: dict[str, Any]


@dataclass
class Task:
    """One task of the index snapshot, what the page says about its figures and the rows it shows."""

    task: str
    display_name: str
    family: str
    header: dict[str, Any]
    metrics: list[Metric]
    data: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def unit_title(self) -> str:
        return str(self.header["unit"])

    @property
    def metric(self) -> Metric:
        """The metric of the index's latency limit and of the index page's charts: the family's first."""
        return self.metrics[0]

    @property
    def batch_title(self) -> str:
        return BATCH_TITLES[self.family]

    @property
    def deadline(self) -> str:
        limit = self.header.get("itl_deadline_ms", self.header.get("batch_latency_ceiling_s"))
        return f"{self.metric.title.rsplit(' (', 1)[0]} ≤ {limit} {self.metric.unit}"

    @functools.cached_property
    def decimals(self) -> dict[str, int]:
        """The index files' rounding (the field dictionary's [exports]): the family's Wh figure's decimals for
        every energy column, each latency metric's for its column."""
        energy = next(f["decimals"] for f in dictionary.export_fields(f"{self.family}_configuration")
                      if f["key"].startswith("wh_per_"))
        latency = {f["column"]: f["decimals"] for f in dictionary.export_fields("tier") if f.get("decimals") is not None}
        return {**latency, **dict.fromkeys(ENERGY_COLUMNS, energy)}

    def rounded(self, row: dict[str, Any]) -> dict[str, Any]:
        digits = {**self.decimals, "latency": self.decimals[row.get("latency_metric", self.metric.latency_metric)]}
        return {key: round(value, digits[key]) if key in digits and isinstance(value, float) else value
                for key, value in row.items()}


def _log(title: str) -> str:
    """An axis title saying the scale is logarithmic: 'latency (ms)' -> 'latency (ms, log scale)'."""
    return title[:-1] + ", log scale)" if title.endswith(")") else f"{title} (log scale)"


def _energy_y(task: Task, column: str = "wh_per_unit", padding: int = 8, **axis: Any) -> Any:
    return alt.Y(f"{column}:Q", scale=alt.Scale(type="log", nice=False, padding=padding),
                 title=f"{task.unit_title} (log scale)", axis=alt.Axis(**(axis or {"tickCount": 6})))


def _tooltip(task: Task, columns: list[str]) -> list[Any]:
    """Tooltip entries: a column of TIPS, batch_limit or latency, or column=title (an energy column's with its unit)."""
    tips = {**TIPS, "batch_limit": (task.batch_title, "Q", None), "latency": (task.metric.title, "Q", None)}
    entries = []
    for entry in columns:
        column, _, title = entry.partition("=")
        title, kind, number_format = (title + f" ({task.unit_title})" * (column in ENERGY_COLUMNS), "Q", None) \
            if title else tips[column]
        entries.append(alt.Tooltip(f"{column}:{kind}", title=title, **({"format": number_format} if number_format else {})))
    return entries


def _series(column: str, domain: list[str], colours: list[str], shapes: list[str], heading: str | None = None,
            **legend: Any) -> dict[str, Any]:
    """A category by colour and by shape, in one legend."""
    titled = {"legend": alt.Legend(**legend), **({"title": heading} if heading else {})}
    return {"color": alt.Color(f"{column}:N", scale=alt.Scale(domain=domain, range=colours), **titled),
            "shape": alt.Shape(f"{column}:N", scale=alt.Scale(domain=domain, range=shapes), **titled)}


def _gpu_series(gpus: list[str]) -> dict[str, Any]:
    return _series("gpu", gpus, GPU_COLOURS[:len(gpus)], GPU_SHAPES[:len(gpus)], "GPU", symbolOpacity=1)


def _by_series(base: Any, series: str, domain: list[str], rows: list[dict[str, Any]], tooltip: list[Any],
               line: dict[str, Any], size: int, **line_encoding: Any) -> Any:
    """A line and points per model (a legend click highlights one, the legend's entries the full model ids)
    or per GPU."""
    if series == "gpu":
        channels = _gpu_series(domain)
        return alt.layer(base.mark_line(**line).encode(color=channels["color"], detail="gpu:N"),
                         base.mark_point(filled=True, size=size).encode(tooltip=tooltip, **channels))
    # Vega-Lite's defaults (click selects, double-click clears): naming `on` loses the legend's click handling.
    selection = alt.selection_point(name="model", fields=["model_id"], bind="legend")
    base = base.encode(opacity=alt.condition(selection, alt.value(1.0), alt.value(FADED_OPACITY)))
    # The lines take each model's colour as a value, without a scale or a legend: Vega-Lite merges one
    # field's legends across layers, and a merged legend loses the legend binding's click handling.
    colour = {model: MODEL_COLOURS[index % len(MODEL_COLOURS)] for index, model in enumerate(domain)}
    for row in rows:
        row["line_colour"] = colour[row["model_id"]]
    lines = base.mark_line(**line).encode(stroke=alt.Stroke("line_colour:N", scale=None), detail="model_id:N",
                                          **line_encoding)
    channels = _series("model_id", domain, MODEL_COLOURS, MODEL_SHAPES, None, title="model (click to highlight)",
                       labelLimit=0, symbolLimit=0, columns=1, labelFontSize=10, symbolSize=60)
    return alt.layer(lines, base.mark_point(filled=True, size=size).encode(tooltip=tooltip, **channels)
                     .add_params(selection))


def _by_gpu(chart: Any, gpus: list[str]) -> Any:
    return chart.facet(column=alt.Column("gpu:N", title=None, sort=gpus,
                                         header=alt.Header(labelFontSize=13, labelFontWeight="bold")))


def _charts(task: Task, data: dict[str, list[dict[str, Any]]], models: list[str] | None,
            validated: set[str]) -> list[Chart]:
    """The charts of one task: the index page's (`models` lists the task's models in order) or, when
    `models` is None, one model's page's, whose rows `data` holds. `validated` names the kinds of chart
    already checked against Vega-Lite's schema (checking every model page's took most of the report's time)."""
    index_page = models is not None
    page, series = ("index", "model_id") if index_page else ("model", "gpu")
    gpus = sorted({row["gpu"] for rows in ([data["best"]] if index_page else data.values()) for row in rows if "gpu" in row})
    domain = models if index_page else gpus
    repeated = 0 if index_page else sum(1 for row in data["curves"] if row["n_repeats"] > 1)
    snapshots = [row["snapshot_id"] for row in data["snapshots"]]
    texts = getattr(_texts(), page).charts
    charts = []

    def hover(name: str) -> list[Any]:
        return _tooltip(task, texts[name].tooltip)

    def add(name: str, chart: Any) -> None:
        kind = f"{page} {task.family} {name} {bool(repeated)}"
        spec = chart.to_dict(validate=kind not in validated)
        validated.add(kind)
        # Data by name: the rows go in after Altair has checked the specification (checking thousands of
        # inline rows against the Vega-Lite schema took most of a minute).
        spec["datasets"] = {node["data"]["name"]: data[node["data"]["name"]] for node in _nodes(spec)
                            if isinstance(node, dict) and isinstance(node.get("data"), dict) and "name" in node["data"]}
        text = texts[name]
        answers = text.answers.format(deadline=task.deadline, repeated=(text.repeated if repeated else text.once)
                                      .format(count=repeated))
        if name == "history" and len(snapshots) == 1:
            answers += _texts().one_snapshot
        charts.append(Chart(name, text.title, answers, spec))

    if index_page and data["best"]:
        add("best", alt.Chart(alt.Data(name="best")).mark_point(filled=True, size=90, opacity=0.9).encode(
            x=alt.X("wh_per_unit:Q", scale=alt.Scale(type="log", nice=False, padding=10),
                    title=f"{task.unit_title} (log scale)"),
            y=alt.Y("model_id:N", title=None, sort=models, axis=alt.Axis(labelLimit=0, labelFontSize=11)), href="href:N",
            tooltip=hover("best"),
            **_gpu_series(gpus)).properties(width=520, height=alt.Step(16)))
    if data["curves"]:
        curve_series = _gpu_series(gpus) if index_page else _series(
            "deployment", sorted({row["deployment"] for row in data["curves"]}), MODEL_COLOURS, MODEL_SHAPES,
            "deployment (GPUs, precision, parallelism)", labelLimit=0, titleLimit=0, orient="bottom", columns=2,
            symbolOpacity=1)
        curves = alt.Chart(alt.Data(name="curves")).encode(
            x=alt.X("batch_limit:Q", scale=alt.Scale(type="log", nice=False), title=_log(task.batch_title),
                    **({"axis": alt.Axis(values=DECADES[4:], format=",~g")} if index_page else {})),
            color=curve_series["color"], detail="deployment:N")
        tip = hover("curves")
        if index_page:
            add("curves", curves.mark_line(point=alt.OverlayMarkDef(filled=True, size=22), strokeWidth=1.2).encode(
                y=_energy_y(task, padding=6, values=DECADES, format=",~g"), href="href:N", tooltip=tip,
                shape=curve_series["shape"]).properties(width=235, height=150).facet(
                alt.Facet("model_id:N", title=None, sort=models, header=alt.Header(
                    labelExpr="split(datum.value, '/')[1]", labelFontSize=11, labelLimit=250)), columns=4))
        else:
            # The spread's layer only where there is a spread: an empty layer leaves its scales without extent.
            spread = curves.transform_filter("datum.n_repeats > 1").mark_rule(strokeWidth=2).encode(
                y=_energy_y(task, "wh_per_unit_min"), y2="wh_per_unit_max:Q", tooltip=tip)
            add("curves", _by_gpu(alt.layer(
                *([spread] if repeated else []), curves.mark_line(strokeWidth=1.5).encode(y=_energy_y(task)),
                curves.mark_point(filled=True, size=40).encode(y=_energy_y(task), tooltip=tip,
                                                               shape=curve_series["shape"])
            ).properties(width=330, height=240), gpus))
    if index_page and data["frontier"]:
        base = alt.Chart(alt.Data(name="frontier")).encode(
            x=alt.X("latency:Q", scale=alt.Scale(type="log", nice=False, padding=8), title=_log(task.metric.title)),
            y=_energy_y(task))
        tip = hover("frontier")
        add("frontier", _by_gpu(_by_series(base, series, domain, data["frontier"], tip, {"strokeWidth": 1.6}, 45,
                                           order="latency:Q").properties(width=360, height=330), gpus))
    elif data["frontier"]:
        metrics = [m for m in task.metrics if any(row["latency_metric"] == m.latency_metric for row in data["frontier"])]
        metric = alt.param(name="metric", value=metrics[0].latency_metric, bind=alt.binding_select(
            options=[m.latency_metric for m in metrics], labels=[m.title for m in metrics], name="latency metric: "))
        tip = hover("frontier")
        encoding = {"x": alt.X("latency:Q", scale=alt.Scale(type="log", nice=False, padding=8),
                               title=f"latency ({task.metric.unit}, log scale; metric chosen below)"),
                    "y": _energy_y(task)}
        everything = alt.Chart(alt.Data(name="points")).transform_filter("datum.latency_metric == metric").mark_point(
            size=30, opacity=0.35).encode(tooltip=tip, **encoding, **_gpu_series(gpus))
        best = alt.Chart(alt.Data(name="frontier")).transform_filter("datum.latency_metric == metric").encode(**encoding)
        add("frontier", alt.layer(everything, best.mark_line(color="#333", strokeWidth=1.2).encode(order="latency:Q"),
                                  best.mark_point(filled=True, size=80).encode(tooltip=tip, **_gpu_series(gpus)))
            .add_params(metric).properties(width=640, height=320))
    if data["latency_cost"]:
        tip = hover("latency-cost")
        by_metric = alt.Column("metric_label:N", title=None, sort=[m.short_title for m in task.metrics],
                               header=alt.Header(labelFontWeight="bold"))
        if index_page:
            tiers = sorted({row["latency_limit"] for row in data["latency_cost"]})
            base = alt.Chart(alt.Data(name="latency_cost")).encode(
                x=alt.X("tier:N", title=f"latency tier ({task.metric.unit})", sort=[f"≤ {limit:g}" for limit in tiers],
                        axis=alt.Axis(labelAngle=0, orient="top")),
                y=alt.Y("model_id:N", title=None, sort=models, axis=alt.Axis(labelLimit=0, labelFontSize=11)))
            cells = base.mark_rect(stroke="white").encode(
                color=alt.Color("relative_to_best:Q", title="energy ÷ unconstrained best",
                                scale=alt.Scale(type="log", scheme="orangered", domainMin=1),
                                legend=alt.Legend(format=".1f", tickCount=4)), href="href:N", tooltip=tip)
            labels = base.mark_text(fontSize=9).encode(
                text=alt.Text("relative_to_best:Q", format=".2f"),
                color=alt.condition("datum.relative_to_best > 2.5", alt.value("white"), alt.value("#222")))
            add("latency-cost", alt.layer(cells, labels).properties(width=alt.Step(38), height=alt.Step(15)).facet(
                column=by_metric, row=alt.Row("gpu:N", title="GPU", sort=gpus, header=alt.Header(
                    labelFontWeight="bold", labelAngle=0, labelAlign="left"))).resolve_scale(x="independent"))
        else:
            add("latency-cost", alt.Chart(alt.Data(name="latency_cost")).mark_line(
                point=alt.OverlayMarkDef(filled=True, size=60), strokeWidth=1.5).encode(
                x=alt.X("latency_limit:O", title=f"latency tier, at most ({task.metric.unit})", axis=alt.Axis(labelAngle=0)),
                y=alt.Y("relative_to_best:Q", title="energy ÷ the GPU's unconstrained best", scale=alt.Scale(zero=False)),
                detail="gpu:N", tooltip=tip, **_gpu_series(gpus),
            ).properties(width=220 if len(task.metrics) > 1 else 320, height=200).facet(column=by_metric))
    if not index_page and data["estimates"]:
        base = alt.Chart(alt.Data(name="estimates")).encode(
            x=alt.X("concurrency:Q", scale=alt.Scale(type="log", nice=False), title=CONCURRENCY_TITLES[task.family]),
            detail="deployment:N", color=_gpu_series(gpus)["color"])
        dashes = alt.StrokeDash("deployment:N", title="deployment (GPUs, precision, parallelism)", scale=alt.Scale(
            domain=sorted({row["deployment"] for row in data["estimates"]}), range=DASHES), legend=alt.Legend(
            orient="bottom", columns=2, labelLimit=0, titleLimit=0, symbolType="stroke", symbolStrokeWidth=1.5))
        tip = hover("estimate")
        add("estimate", alt.layer(
            base.mark_area(opacity=0.18).encode(y=_energy_y(task, "wh_per_unit_low"), y2="wh_per_unit_high:Q"),
            base.mark_line(strokeWidth=1.5).encode(y=_energy_y(task), strokeDash=dashes),
            base.mark_point(filled=True, size=18).encode(y=_energy_y(task), tooltip=tip, **_gpu_series(gpus)),
        ).properties(width=640, height=300))
    if data["history"]:
        base = alt.Chart(alt.Data(name="history")).encode(
            x=alt.X("snapshot_id:O", title="snapshot, in upstream commit order", sort=snapshots,
                    scale=alt.Scale(domain=snapshots), axis=alt.Axis(labelAngle=-40)), y=_energy_y(task))
        tip = hover("history")
        chart = _by_series(base, series, domain, data["history"], tip, {"strokeWidth": 1.4 if index_page else 1.5},
                           45 if index_page else 60)
        add("history", _by_gpu(chart.properties(width=max(220, 34 * len(snapshots)), height=260), gpus) if index_page
            else chart.properties(width=max(160, 40 * len(snapshots)), height=240))
    order = list(texts)
    return sorted(charts, key=lambda chart: order.index(chart.name))


def _nodes(node: Any) -> Any:
    """Every dict and list inside a specification, depth first."""
    yield node
    for value in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
        yield from _nodes(value)


def _gather(connection: duckdb.DuckDBPyConnection, task: Task) -> dict[str, list[dict[str, Any]]]:
    """Every row the task's charts and tables show, from the views, rounded as the index files round them."""
    metric = task.metric.latency_metric
    metrics = ", ".join(m.latency_metric for m in task.metrics)
    def href(table: str = "") -> str:
        return f"'models/' || {table}slug || '.html' as href"

    queries = {
        "best": f"""
            select b.model_id, b.slug, b.gpu, b.row_id, b.num_gpus, c.batch_limit, b.{metric} as latency, b.wh_per_unit,
                   {href("b.")}, u.n_repeats, u.wh_repeat_min, u.wh_repeat_max, u.runner_up_row_id, u.runner_up_wh_per_unit,
                   u.choice_basis
            from best_configurations as b
            join configuration_points as c using (snapshot_id, task, row_id)
            left join index_uncertainty as u on u.task = b.task and u.model_id = b.model_id and u.gpu = b.gpu
            where b.task = $task order by b.wh_per_unit, lower(b.model_id), b.model_id, b.gpu""",
        "frontier": f"""
            select f.model_id, f.slug, f.gpu, f.row_id, f.num_gpus, c.batch_limit, f.n_repeats, f.latency_metric,
                   f.latency, f.wh_per_unit, f.scope
            from energy_latency_frontier as f join configuration_points as c using (snapshot_id, task, row_id)
            where f.task = $task and (f.scope = 'model' or f.latency_metric = '{metric}')
            order by lower(f.model_id), f.latency_metric, if(f.scope = 'model', '', f.gpu), f.latency""",
        "points": f"""
            select model_id, gpu, row_id, num_gpus, batch_limit, n_repeats, wh_per_unit, latency_metric, latency
            from (unpivot (select model_id, gpu, row_id, num_gpus, batch_limit, n_repeats, wh_per_unit, {metrics}
                           from configuration_points where task = $task)
                  on {metrics} into name latency_metric value latency)
            join latency_metrics using (latency_metric) order by model_id, gpu, row_id, metric_order""",
        "latency_cost": f"""
            select c.*, m.short_title as metric_label, {href("c.")}
            from latency_tier_costs as c join latency_metrics as m using (latency_metric)
            where c.task = $task order by lower(c.model_id), c.model_id, c.gpu, m.metric_order, c.latency_limit""",
        "curves": f"""
            select model_id, slug, gpu, row_id, num_gpus, {DEPLOYMENT} as deployment, batch_limit, n_repeats,
                   {metric} as latency, wh_per_unit, wh_per_unit_min, wh_per_unit_max, {href()}
            from configuration_points where task = $task order by lower(model_id), gpu, deployment, batch_limit""",
        # Each measured concurrency (the line's corners are the measured points) and a half-octave grid between.
        "estimates": f"""
            with grid as (
                select distinct model_id, gpu, pow(2, k / 2) as x
                from configuration_points cross join range(0, 27) as r(k) where task = $task
                union
                select model_id, gpu, measured_concurrency as x from configuration_points where task = $task
            )
            select g.model_id, g.gpu, {DEPLOYMENT} as deployment, e.*
            from grid as g, lateral energy_at_concurrency($task, g.model_id, g.gpu, g.x) as e
            where e.method in ('measured', 'interpolated') order by g.model_id, g.gpu, deployment, e.concurrency""",
        "history": f"""
            select h.snapshot_id, h.model_id, h.slug, h.gpu, h.row_id, h.num_gpus,
                   coalesce(h.max_num_seqs, h.batch_size) as batch_limit, h.{metric} as latency, h.wh_per_unit
            from best_configuration_history as h join snapshot_history as s using (snapshot_id)
            where h.task = $task order by s.position, lower(h.model_id), h.gpu""",
    }
    data = {name: [task.rounded(row) for row in fetch_dicts(connection, query, {"task": task.task})]
            for name, query in queries.items()}
    data["model_frontier"] = [row for row in data["frontier"] if row["scope"] == "model"]
    data["frontier"] = [row for row in data["frontier"] if row["scope"] == "model_gpu"]
    data["snapshots"] = fetch_dicts(connection, "select snapshot_id from snapshot_history order by position", {})
    for row in data["latency_cost"]:
        row["tier"] = f"≤ {row['latency_limit']:g}"
    return data


def _cell(value: Any, hover: str | None = None, link: str | None = None, sort: Any = None) -> str:
    """A table cell; a number is shown as the index file holds it and sorts as a number (empty cells last)."""
    number = isinstance(value, (int, float)) or (value is None and sort is None)
    text = "" if value is None else f"{value:,}" if isinstance(value, int) else repr(value) if number else str(value)
    sort = ("" if value is None else value) if number else sort
    text = html.escape(text) if link is None else f'<a href="{html.escape(link)}">{html.escape(text)}</a>'
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
    return [_cell(row["model_id"], link=f"models/{row['slug']}.html", sort=row["model_id"].lower())] if with_model else []


def _index_table(task: Task, rows: list[dict[str, Any]], with_model: bool = True) -> str:
    """The index rows as index.json holds them, ordered by the figure."""
    if not rows:
        return "<p>No configuration within the deadline.</p>"
    headers = ["model"] * with_model + ["GPU", "configuration", "GPUs", task.batch_title, task.metric.title,
                                        task.unit_title, "times measured", "runner-up within the deadline"]
    once = "measured once"
    return _table("index-table", headers, [_model_cell(row, with_model) + [
        _cell(row["gpu"]), _cell(row["row_id"]), _cell(row["num_gpus"]), _cell(row["batch_limit"]), _cell(row["latency"]),
        _cell(row["wh_per_unit"]),
        _cell(row["n_repeats"], hover=once if (row["n_repeats"] or 0) < 2 else
              f"repeats from {row['wh_repeat_min']} to {row['wh_repeat_max']}"),
        _cell(row["runner_up_wh_per_unit"], hover=f"{row['runner_up_row_id'] or 'none'}; the index row: {row['choice_basis']}"),
    ] for row in rows])


def _tier_table(task: Task, rows: list[dict[str, Any]], with_model: bool = True) -> str:
    """Model × GPU rows, a column per tier of every latency metric, each the tier's figure as tiers.json holds it."""
    if not rows:
        return "<p>No configuration within any tier.</p>"
    metrics = [m for m in task.metrics if any(row["latency_metric"] == m.latency_metric for row in rows)]
    tiers = [(m, limit) for m in metrics
             for limit in sorted({row["latency_limit"] for row in rows if row["latency_metric"] == m.latency_metric})]
    cells: dict[tuple[str, str, str], dict[tuple[str, float], dict[str, Any]]] = {}
    for row in rows:
        cells.setdefault((row["model_id"].lower(), row["model_id"], row["gpu"]), {})[
            (row["latency_metric"], row["latency_limit"])] = row
    headers = ["model"] * with_model + ["GPU"] + [f"≤ {limit:g} {m.unit}" for m, limit in tiers]
    groups = [("", 1 + with_model)] + [(m.title, sum(1 for other, _ in tiers if other == m)) for m in metrics]
    return _table("tier-table", headers, [
        _model_cell(next(iter(values.values())), with_model) + [_cell(gpu)] + [
            _cell(values[m.latency_metric, limit]["wh_per_unit"], hover=values[m.latency_metric, limit]["row_id"])
            if (m.latency_metric, limit) in values else _cell("", sort="") for m, limit in tiers]
        for (_, _, gpu), values in sorted(cells.items())], groups)


def _heading(title: str, answers: str) -> str:
    return f'<h3>{title}</h3><p class="answers">{answers}</p>'


def _section(task: Task, snapshot: dict[str, Any], rows: dict[str, list[dict[str, Any]]], models: list[str] | None,
             validated: set[str]) -> tuple[str, dict[str, dict[str, Any]]]:
    """A task's section of the index page (`models`: the task's models in order) or of a model's page: what its
    figures rest on, the index table, the charts and the tier table; and the charts' specifications by id."""
    text, header = _texts().index if models else _texts().model, task.header
    facts = {**snapshot, **header, **header["source"], "unit": task.unit_title, "deadline": task.deadline,
             "commit_time": snapshot["commit_time"] or "unknown time"}
    parts = [f'<section id="{task.task}"><h2>{html.escape(task.display_name)} ({task.task})</h2><dl class="facts">',
             *(f"<dt>{html.escape(name)}</dt><dd>{html.escape(fact.format(**facts))}</dd>"
               for name, fact in _texts().facts.items()), "</dl>",
             _heading(*(part.format(models=len(models or ()), task=task.task) for part in text.index_table)),
             _index_table(task, rows["best"], with_model=bool(models))]
    specs = {}
    for chart in _charts(task, rows, models, validated):
        chart_id = f"{task.task}-{chart.name}"
        if problems := ambiguous_encodings(chart.spec):
            raise PipelineError(f"report: chart {chart_id} would not tell its categories apart", problems)
        specs[chart_id] = chart.spec
        parts.append(_heading(html.escape(chart.title), html.escape(chart.answers))
                     + f'<div class="chart" id="{html.escape(chart_id)}"></div>')
    parts += [_heading(*text.tier_table), _tier_table(task, rows["latency_cost"], with_model=bool(models)), "</section>"]
    return "".join(parts), specs


def _page(text: PageText, sections: list[tuple[Task, str]], charts: dict[str, dict[str, Any]], script: str,
          **values: Any) -> str:
    """A whole page: its opening with a link to each task's section, the sections, the charts drawn."""
    assets = Path(__file__).parent
    nav = "".join(f'<a href="#{task.task}">{html.escape(task.display_name)}</a>' for task, _ in sections)
    specs = msgspec.json.encode(charts).decode().replace("</", "<\\/")  # no "</script>" inside the script
    escaped = {name: html.escape(str(value)) for name, value in values.items()}
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(text.title.format(**values))}</title>"
            f"<style>\n{(assets / 'report.css').read_text(encoding='utf-8')}</style>{script}</head><body>\n"
            + text.intro.format(nav=nav, **escaped) + "\n".join(section for _, section in sections)
            + f"\n<script>\nconst charts = {specs};\n{(assets / 'report.js').read_text(encoding='utf-8')}</script>\n"
            "</body></html>\n")


def _tasks(connection: duckdb.DuckDBPyConnection, snapshot: dict[str, Any]) -> list[Task]:
    card, retrieved = load_source_card(), snapshot["retrieved"]
    deadline = connection.execute("select itl_deadline_ms from build_parameters").fetchone()[0]
    metrics = fetch_dicts(connection, "select * from latency_metrics order by metric_order", {})
    tasks = []
    for row in fetch_dicts(connection, """
            select t.task, t.display_name, t.workload_label, s.family, s.configuration_count, s.over_latency_limit_count
            from task_summaries as s join tasks as t using (snapshot_id, task)
            where s.snapshot_id = $snapshot_id order by t.task""", {"snapshot_id": snapshot["snapshot_id"]}):
        header = (task_header(card, row, snapshot, deadline, retrieved, retrieved) if row["family"] == "token"
                  else diffusion_task_header(card, row, snapshot, retrieved, retrieved))
        tasks.append(Task(row["task"], row["display_name"] or row["task"], row["family"], header, [
            msgspec.convert({**m, "unit": dictionary.column("configuration_points", m["latency_metric"]).unit}, Metric)
            for m in metrics if m["family"] == row["family"]]))
    return tasks


def write_report(paths: Paths) -> tuple[Path, int]:
    """Write OUT/report (replaced whole); return its index.html and the number of charts of the index page."""
    if alt is None:
        raise PipelineError("energy-index report needs the report extra: pip install 'energy-index[report]'")
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    with connect(str(paths.database), read_only=True) as connection:
        snapshot = {name: value.isoformat() if isinstance(value, (datetime.date, datetime.datetime)) else value
                    for name, value in fetch_dicts(connection, "select * from snapshots where snapshot_id = "
                                                   "(select snapshot_id from index_snapshot)", {})[0].items()}
        snapshot_count = connection.execute("select count(*) from snapshots").fetchone()[0]
        tasks = _tasks(connection, snapshot)
        for task in each(tasks, "report: reading", unit="task"):
            task.data = _gather(connection, task)
    slugs: dict[str, set[str]] = {}
    for task in tasks:
        for row in task.data["curves"]:
            slugs.setdefault(row["slug"], set()).add(row["model_id"])
    if clashes := [f"{slug}: {' and '.join(sorted(ids))}" for slug, ids in sorted(slugs.items()) if len(ids) > 1]:
        raise PipelineError("model ids that would share one report page (slug)", clashes)
    staging = paths.out / f".report-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "models").mkdir(parents=True)
    try:
        bundle = vl_convert.javascript_bundle()
        (staging / "vega.js").write_text(bundle, encoding="utf-8")
        specs: dict[str, dict[str, Any]] = {}
        sections, validated = [], set()
        for task in each(tasks, "report: index page", unit="task"):
            # The task's models in the order its charts list them: by best figure, then the rest by name.
            models = list(dict.fromkeys(row["model_id"] for row in sorted(task.data["best"], key=lambda r: r["wh_per_unit"])))
            models += sorted({row["model_id"] for row in task.data["curves"]} - set(models), key=str.lower)
            section, charts = _section(task, snapshot, task.data, models, validated)
            sections.append((task, section))
            specs.update(charts)
        chosen = os.environ.get("ENERGY_INDEX_REPORT_PNGS")
        for name in each([name for name in specs if chosen is None or name in chosen.split(",")], "report: PNGs",
                         unit="chart"):
            (staging / f"{name}.png").write_bytes(vl_convert.vegalite_to_png(specs[name], scale=1.5))
        (staging / "index.html").write_text(_page(_texts().index, sections, specs, f"<script>{bundle}</script>",
                                                  snapshot_id=snapshot["snapshot_id"], snapshot_count=snapshot_count),
                                            encoding="utf-8")
        for slug in each(sorted(slugs), "report: model pages", unit="model"):
            (staging / "models" / f"{slug}.html").write_text(
                _model_page(next(iter(slugs[slug])), tasks, snapshot, validated), encoding="utf-8")
        replace_directory(staging, paths.out / "report")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths.out / "report" / "index.html", len(specs)


def _model_page(model_id: str, tasks: list[Task], snapshot: dict[str, Any], validated: set[str]) -> str:
    specs: dict[str, dict[str, Any]] = {}
    sections = []
    for task in tasks:
        if not any(row["model_id"] == model_id for row in task.data["curves"]):
            continue
        rows = {key: [row for row in value if row.get("model_id") == model_id] if key != "snapshots" else value
                for key, value in task.data.items()}
        rows["frontier"] = rows.pop("model_frontier")
        section, charts = _section(task, snapshot, rows, None, validated)
        sections.append((task, section))
        specs.update(charts)
    return _page(_texts().model, sections, specs, '<script src="../vega.js"></script>', model_id=model_id,
                 snapshot_id=snapshot["snapshot_id"])


# Vega's named colour schemes a chart here may use for a categorical field, and how many colours each has.
SCHEME_SIZES = {"category10": 10, "tableau10": 10, "tableau20": 20, "category20": 20}
IDENTIFYING_CHANNELS = ("shape", "strokeDash", "text", "x", "y", "row", "column", "facet")


def ambiguous_encodings(spec: dict[str, Any]) -> list[str]:
    """What makes a chart's categories (models, GPUs, deployments) hard to tell apart: a field coloured with
    more values than its palette has colours, and no other channel (shape, stroke dash, text label,
    position or facet) on the same field; or colour and shape pairs that repeat."""
    colours: dict[str, list[str]] = {}
    shapes: dict[str, list[str]] = {}
    identified: set[str] = set()
    domains: dict[str, list[Any]] = {}
    for node in _nodes({key: value for key, value in spec.items() if key != "datasets"}):
        if not isinstance(node, dict):
            continue
        channels = list((node.get("encoding") or {}).items())
        if isinstance(node.get("facet"), dict):
            channels += [("facet", definition) for definition in [node["facet"], *node["facet"].values()]]
        for channel, definition in channels:
            name = definition.get("field") if isinstance(definition, dict) else None
            if name is None:
                continue
            scale = definition.get("scale") or {}
            if isinstance(scale.get("domain"), list):
                domains.setdefault(name, scale["domain"])
            if channel in ("color", "fill", "stroke"):
                scheme = scale.get("scheme", "category10")
                colours[name] = scale["range"] if isinstance(scale.get("range"), list) else [
                    f"{scheme}-{index}" for index in range(SCHEME_SIZES.get(scheme, 10))]
            elif channel == "shape" and isinstance(scale.get("range"), list):
                shapes[name] = scale["range"]
            elif channel in IDENTIFYING_CHANNELS:
                identified.add(name)
    problems = []
    for name, palette in colours.items():
        values = domains.get(name) or sorted(
            {row.get(name) for rows in spec.get("datasets", {}).values() for row in rows} - {None}, key=str)
        if len(values) <= len(palette) or name in identified:
            continue
        if name not in shapes:
            problems.append(f"{name}: {len(values)} values coloured with {len(palette)} colours and no other channel")
            continue
        pairs = {(palette[index % len(palette)], shapes[name][index % len(shapes[name])]) for index in range(len(values))}
        if len(pairs) < len(values):
            problems.append(f"{name}: {len(values)} values but only {len(pairs)} distinct colour and shape pairs")
    return problems
