"""energy-index report: OUT/report/index.html and a page per model, OUT/report/models/<slug>.html.

The index page, per task: the index table (the index files' figures, rounded as they round them), the
best figure of each model on each GPU, the energy-latency frontiers, what a latency requirement costs,
the efficiency curves, how the figures moved across the snapshots, and the latency-tier table of every
latency metric. A model's page, per task it is measured on: its index rows and tiers, its efficiency
curves per GPU, its energy-latency frontier with the GPU marked, its estimate across concurrency and
its figures across the snapshots.

The views compute every figure; this module selects them, rounds them with the export's rules and lays
them out. Charts are Altair (Vega-Lite) specifications drawn by vega-embed, whose JavaScript is inlined
in index.html and shared by the model pages as vega.js beside them: nothing is fetched from a network.
Each chart of the index page is also rendered to PNG by vl-convert.
"""

import datetime
import html
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from pipeline.database import connect, fetch_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.export import FAMILIES, TIER_FIELDS, TaskPlan, energy_decimals, task_plans
from pipeline.files import replace_directory
from pipeline.paths import Paths
from pipeline.progress import progress

# Vega's tableau10: ten colours a reader tells apart. A chart with more models than colours gives each
# model a colour and a shape, the pair unique up to len(MODEL_COLOURS) * len(MODEL_SHAPES) = 70 models
# (10 and 7 share no factor); tests/test_report.py checks every chart against this.
MODEL_COLOURS = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6",
                 "#9d755d", "#bab0ac"]
MODEL_SHAPES = ["circle", "square", "triangle-up", "diamond", "triangle-down", "cross", "triangle-right"]
GPU_COLOURS = ["#1b6ca8", "#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e"]
GPU_SHAPES = ["circle", "square", "triangle-up", "diamond", "cross", "triangle-down"]
FADED_OPACITY = 0.12
# The index page's content width: the page fits a 1280 px window (its scroll bar included).
PAGE_WIDTH = 1180
LATENCY_TITLES = {
    "median_itl_ms": "median inter-token latency (ms)",
    "p90_itl_ms": "p90 inter-token latency (ms)",
    "p99_itl_ms": "p99 inter-token latency (ms)",
    "batch_latency_s": "batch latency (s)",
}
LATENCY_SHORT = {"median_itl_ms": "median ITL", "p90_itl_ms": "p90 ITL", "p99_itl_ms": "p99 ITL",
                 "batch_latency_s": "batch latency"}
# The export's rounding of the figures charts and tables show: latency columns as the index files
# hold them, energy as tiers.json rounds Wh per unit.
LATENCY_DECIMALS = {column: digits for _, column, digits in TIER_FIELDS if column in LATENCY_TITLES}


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    answers: str
    spec: dict[str, Any]


@dataclass
class Task:
    """One task of the index snapshot and what the page says about its figures."""

    task: str
    display_name: str
    family: str
    unit: str | None
    header: dict[str, Any]
    data: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    plan: TaskPlan | None = None

    @property
    def unit_title(self) -> str:
        return str(self.header["unit"])

    @property
    def latency_metric(self) -> str:
        return "median_itl_ms" if self.family == "token" else "batch_latency_s"

    @property
    def latency_metrics(self) -> list[str]:
        return ["median_itl_ms", "p90_itl_ms", "p99_itl_ms"] if self.family == "token" else ["batch_latency_s"]

    @property
    def batch_title(self) -> str:
        return "max_num_seqs (cap on requests in flight)" if self.family == "token" else "batch size"

    @property
    def deadline(self) -> str:
        if self.family == "token":
            return f"median inter-token latency ≤ {self.header['itl_deadline_ms']} ms"
        return f"batch latency ≤ {self.header['batch_latency_ceiling_s']} s"

    def rounded(self, row: dict[str, Any]) -> dict[str, Any]:
        """A view row with its energy and latency columns rounded as the index files round them."""
        energy = energy_decimals(self.plan.unit)
        digits = {"wh_per_unit": energy, "wh_per_unit_low": energy, "wh_per_unit_high": energy,
                  "wh_per_unit_min": energy, "wh_per_unit_max": energy, "unconstrained_wh_per_unit": energy,
                  "latency": LATENCY_DECIMALS[self.latency_metric], **LATENCY_DECIMALS}
        return {key: round(value, digits[key]) if key in digits and isinstance(value, float) else value
                for key, value in row.items()}


def _alt() -> Any:
    import altair as alt

    return alt


def _log_title(title: str) -> str:
    """An axis title with its unit, saying the scale is logarithmic: 'latency (ms)' -> 'latency (ms, log scale)'."""
    return title[:-1] + ", log scale)" if title.endswith(")") else f"{title} (log scale)"


def _decades(low: float = 1, high: float = 1e5) -> list[float]:
    """Tick values for a log axis in small panels: the powers of ten (Vega's default crowds them)."""
    values, value = [], low
    while value <= high:
        values.append(value)
        value *= 10
    return values


def _energy_y(task: Task, column: str = "wh_per_unit", title: str | None = None) -> Any:
    alt = _alt()
    return alt.Y(f"{column}:Q", scale=alt.Scale(type="log", nice=False, padding=8),
                 title=title or f"{task.unit_title} (log scale)", axis=alt.Axis(tickCount=6))


def _energy_tooltip(task: Task, column: str = "wh_per_unit", title: str = "energy") -> Any:
    return _alt().Tooltip(f"{column}:Q", title=f"{title} ({task.unit_title})")


def _latency_tooltip(task: Task, column: str = "latency", metric: str | None = None) -> Any:
    return _alt().Tooltip(f"{column}:Q", title=LATENCY_TITLES[metric or task.latency_metric])


def _gpu_channels(gpus: list[str]) -> dict[str, Any]:
    """A GPU by colour and by shape, in one legend."""
    alt = _alt()
    return {
        "color": alt.Color("gpu:N", title="GPU", scale=alt.Scale(domain=gpus, range=GPU_COLOURS[:len(gpus)]),
                           legend=alt.Legend(symbolOpacity=1)),
        "shape": alt.Shape("gpu:N", title="GPU", scale=alt.Scale(domain=gpus, range=GPU_SHAPES[:len(gpus)]),
                           legend=alt.Legend(symbolOpacity=1)),
    }


def _model_channels(models: list[str], with_shape: bool = True) -> dict[str, Any]:
    """A model by colour and by shape, in one legend whose entries are the full model ids."""
    alt = _alt()
    legend = alt.Legend(title="model (click to highlight)", labelLimit=0, symbolLimit=0, columns=1,
                        labelFontSize=10, symbolSize=60)
    channels = {"color": alt.Color("model_id:N", scale=alt.Scale(domain=models, range=MODEL_COLOURS), legend=legend)}
    if with_shape:
        channels["shape"] = alt.Shape("model_id:N", scale=alt.Scale(domain=models, range=MODEL_SHAPES), legend=legend)
    return channels


def _one_snapshot(snapshots: list[str]) -> str:
    if len(snapshots) > 1:
        return ""
    return " The database holds one snapshot, so each figure is one point; 'make history' builds one with every snapshot."


def _named(name: str) -> Any:
    """A chart's data by name: the rows go into the specification's datasets after Altair has built and
    checked it (checking thousands of inline rows against the Vega-Lite schema took most of a minute)."""
    return _alt().Data(name=name)


def _checked_spec(chart: Any, data: dict[str, list[dict[str, Any]]], validate: bool = True) -> dict[str, Any]:
    """The Vega-Lite specification of `chart`, with the rows of every dataset it names; checked against
    Vega-Lite's schema when `validate` (a model page's charts are checked on the first page that draws
    each kind: checking them all took most of the report's time)."""
    spec = chart.to_dict(validate=validate)
    names: set[str] = set()

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("data"), dict) and "name" in node["data"]:
                names.add(node["data"]["name"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(spec)
    spec["datasets"] = {name: data[name] for name in sorted(names)}
    return spec


def _line_colour(models: list[str], rows: list[dict[str, Any]]) -> Any:
    """The lines' colour: each row's model's colour in _model_channels' scale (an ordinal scale repeats its
    range), given as a value, without a scale or a legend. The legend stays with the points' layer, which
    holds the selection: Vega-Lite merges the legends of one field across layers, and a merged legend
    loses the legend binding's click handling."""
    colour = {model: MODEL_COLOURS[index % len(MODEL_COLOURS)] for index, model in enumerate(models)}
    for row in rows:
        row["line_colour"] = colour[row["model_id"]]
    return _alt().Stroke("line_colour:N", scale=None)


def _model_selection() -> Any:
    alt = _alt()
    # Vega-Lite's defaults (click selects, double-click clears): naming `on` loses the legend's click handling.
    return alt.selection_point(name="model", fields=["model_id"], bind="legend")


def _faded(selection: Any) -> Any:
    return _alt().condition(selection, _alt().value(1.0), _alt().value(FADED_OPACITY))


def _index_charts(task: Task, models: list[str]) -> list[Chart]:
    """The charts of one task on the index page."""
    alt = _alt()
    data = task.data
    gpus = sorted({row["gpu"] for row in data["best"]})
    latency_title = LATENCY_TITLES[task.latency_metric]
    charts = []
    if data["best"]:
        best = (
            alt.Chart(_named("best"))
            .mark_point(filled=True, size=90, opacity=0.9)
            .encode(
                x=alt.X("wh_per_unit:Q", scale=alt.Scale(type="log", nice=False, padding=10),
                        title=f"{task.unit_title} (log scale)"),
                y=alt.Y("model_id:N", title=None, sort=models, axis=alt.Axis(labelLimit=0, labelFontSize=11)),
                href="href:N",
                tooltip=[alt.Tooltip("model_id:N", title="model"), alt.Tooltip("gpu:N", title="GPU"),
                         alt.Tooltip("row_id:N", title="configuration"), alt.Tooltip("num_gpus:Q", title="GPUs"),
                         alt.Tooltip("batch_limit:Q", title=task.batch_title), _latency_tooltip(task),
                         _energy_tooltip(task)],
                **_gpu_channels(gpus),
            )
            .properties(width=520, height=alt.Step(16))
        )
        charts.append(Chart("best", "The index: each model's best figure on each GPU",
                            f"Which model and GPU need the least energy within the deadline ({task.deadline})? "
                            "Models are ordered by their best figure; click a point for the model's page.",
                            _checked_spec(best, data)))
    if data["frontier"]:
        selection = _model_selection()
        base = alt.Chart(_named("frontier")).encode(
            x=alt.X("latency:Q", scale=alt.Scale(type="log", nice=False, padding=8), title=_log_title(latency_title)),
            y=_energy_y(task),
            opacity=_faded(selection),
        )
        tooltip = [alt.Tooltip("model_id:N", title="model"), alt.Tooltip("gpu:N", title="GPU"),
                   alt.Tooltip("row_id:N", title="configuration"), alt.Tooltip("num_gpus:Q", title="GPUs"),
                   alt.Tooltip("batch_limit:Q", title=task.batch_title), _latency_tooltip(task), _energy_tooltip(task)]
        channels = _model_channels(models)
        lines = base.mark_line(strokeWidth=1.6).encode(stroke=_line_colour(models, data["frontier"]),
                                                        detail="model_id:N", order="latency:Q")
        points = base.mark_point(filled=True, size=45).encode(tooltip=tooltip, **channels).add_params(selection)
        frontier = (alt.layer(lines, points).properties(width=360, height=330)
                    .facet(column=alt.Column("gpu:N", title=None, header=alt.Header(labelFontSize=13, labelFontWeight="bold"),
                                             sort=gpus)))
        charts.append(Chart("frontier", "Energy-latency frontier of each model, one panel per GPU",
                            "Which configurations are worth considering: on each GPU, the configurations of a model "
                            "that no other configuration of it beats on both energy and latency. All configurations, "
                            "no deadline. Click a legend entry or a point to highlight a model (double-click clears).",
                            _checked_spec(frontier, data)))
    if data["latency_cost"]:
        tiers = sorted({(row["latency_metric"], row["latency_limit"]) for row in data["latency_cost"]},
                       key=lambda item: (task.latency_metrics.index(item[0]), item[1]))
        tier_labels = [f"≤ {limit:g}" for _, limit in sorted({(0, limit) for _, limit in tiers})]
        base = alt.Chart(_named("latency_cost")).encode(
            x=alt.X("tier:N", title=f"latency tier ({'ms' if task.family == 'token' else 's'})", sort=tier_labels,
                    axis=alt.Axis(labelAngle=0, orient="top")),
            y=alt.Y("model_id:N", title=None, sort=models, axis=alt.Axis(labelLimit=0, labelFontSize=11)),
        )
        cells = base.mark_rect(stroke="white").encode(
            color=alt.Color("relative_to_best:Q", title="energy ÷ unconstrained best",
                            scale=alt.Scale(type="log", scheme="orangered", domainMin=1),
                            legend=alt.Legend(format=".1f", tickCount=4)),
            href="href:N",
            tooltip=[alt.Tooltip("model_id:N", title="model"), alt.Tooltip("gpu:N", title="GPU"),
                     alt.Tooltip("metric_label:N", title="latency metric"), alt.Tooltip("tier:N", title="tier"),
                     alt.Tooltip("row_id:N", title="configuration"), alt.Tooltip("num_gpus:Q", title="GPUs"),
                     alt.Tooltip("batch_limit:Q", title=task.batch_title),
                     _energy_tooltip(task, title="energy within the tier"),
                     _energy_tooltip(task, "unconstrained_wh_per_unit", "unconstrained best"),
                     alt.Tooltip("relative_to_best:Q", title="ratio", format=".2f")],
        )
        labels = base.mark_text(fontSize=9).encode(
            text=alt.Text("relative_to_best:Q", format=".2f"),
            color=alt.condition("datum.relative_to_best > 2.5", alt.value("white"), alt.value("#222")),
        )
        heat = (alt.layer(cells, labels)
                .properties(width=alt.Step(38), height=alt.Step(15))
                .facet(column=alt.Column("metric_label:N", title=None, sort=[LATENCY_SHORT[m] for m in task.latency_metrics],
                                         header=alt.Header(labelFontWeight="bold")),
                       row=alt.Row("gpu:N", title="GPU", sort=gpus, header=alt.Header(labelFontWeight="bold",
                                                                                      labelAngle=0, labelAlign="left")))
                .resolve_scale(x="independent"))
        charts.append(Chart("latency-cost", "What latency costs: energy at each latency tier relative to the "
                            "unconstrained best",
                            "What does a latency requirement cost? Each cell is the model's lowest energy on that GPU "
                            "within the tier, divided by its lowest energy on that GPU with no latency limit (1.00: the "
                            "requirement costs nothing; a blank cell: nothing within the tier; a blank row: the model was not "
                            "measured on that GPU).", _checked_spec(heat, data)))
    if data["curves"]:
        curves = (
            alt.Chart(_named("curves"))
            .mark_line(point=alt.OverlayMarkDef(filled=True, size=22), strokeWidth=1.2)
            .encode(
                x=alt.X("batch_limit:Q", scale=alt.Scale(type="log", nice=False), title=_log_title(task.batch_title),
                        axis=alt.Axis(values=_decades(), format=",~g")),
                y=alt.Y("wh_per_unit:Q", scale=alt.Scale(type="log", nice=False, padding=6),
                        title=f"{task.unit_title} (log scale)", axis=alt.Axis(values=_decades(1e-4, 1e5), format=",~g")),
                detail="deployment:N",
                href="href:N",
                tooltip=[alt.Tooltip("model_id:N", title="model"), alt.Tooltip("gpu:N", title="GPU"),
                         alt.Tooltip("row_id:N", title="configuration"), alt.Tooltip("deployment:N", title="deployment"),
                         alt.Tooltip("num_gpus:Q", title="GPUs"), alt.Tooltip("batch_limit:Q", title=task.batch_title),
                         alt.Tooltip("n_repeats:Q", title="times measured"), _latency_tooltip(task),
                         _energy_tooltip(task, title="energy, mean of the repeats")],
                **_gpu_channels(gpus),
            )
            .properties(width=235, height=150)
            .facet(alt.Facet("model_id:N", title=None, sort=models,
                             header=alt.Header(labelExpr="split(datum.value, '/')[1]", labelFontSize=11, labelLimit=250)),
                   columns=4)
        )
        charts.append(Chart("curves", "Efficiency curves: energy per output against the batch limit, one panel per model",
                            "How does energy per output fall as more requests share the GPUs? One line per deployment "
                            "(GPU count, parallelism, precision); every measured configuration, no deadline.",
                            _checked_spec(curves, data)))
    if data["history"]:
        selection = _model_selection()
        snapshots = [row["snapshot_id"] for row in sorted(data["snapshots"], key=lambda row: row["position"])]
        channels = _model_channels(models)
        base = alt.Chart(_named("history")).encode(
            x=alt.X("snapshot_id:O", title="snapshot, in upstream commit order", sort=snapshots,
                    scale=alt.Scale(domain=snapshots), axis=alt.Axis(labelAngle=-40)),
            y=_energy_y(task),
            opacity=_faded(selection),
        )
        lines = base.mark_line(strokeWidth=1.4).encode(stroke=_line_colour(models, data["history"]), detail="model_id:N")
        points = base.mark_point(filled=True, size=45).encode(
            tooltip=[alt.Tooltip("snapshot_id:N", title="snapshot"), alt.Tooltip("model_id:N", title="model"),
                     alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("row_id:N", title="configuration"),
                     alt.Tooltip("num_gpus:Q", title="GPUs"), alt.Tooltip("batch_limit:Q", title=task.batch_title),
                     _latency_tooltip(task), _energy_tooltip(task)],
            **channels,
        ).add_params(selection)
        history = (alt.layer(lines, points).properties(width=max(220, 34 * len(snapshots)), height=260)
                   .facet(column=alt.Column("gpu:N", title=None, sort=gpus,
                                            header=alt.Header(labelFontSize=13, labelFontWeight="bold"))))
        charts.append(Chart("history", "The index figures across the snapshots in the database, one panel per GPU",
                            f"How has each best figure moved from one snapshot to the next (deadline: {task.deadline})? "
                            "Click a legend entry or a point to highlight a model." + _one_snapshot(snapshots),
                            _checked_spec(history, data)))
    return charts


def _model_charts(task: Task, model: dict[str, list[dict[str, Any]]], validated: set[str]) -> list[Chart]:
    """The charts of one model on one task, for its page; `validated` names the kinds of chart already
    checked against Vega-Lite's schema (this adds the ones it checks)."""
    alt = _alt()

    def _spec(chart: Any, data: dict[str, list[dict[str, Any]]], name: str) -> dict[str, Any]:
        kind = f"{task.family} {name}"
        spec = _checked_spec(chart, data, validate=kind not in validated)
        validated.add(kind)
        return spec

    gpus = sorted({row["gpu"] for rows in model.values() for row in rows if "gpu" in row})
    charts = []
    if model["curves"]:
        deployments = sorted({row["deployment"] for row in model["curves"]})
        title = "deployment (GPUs, precision, parallelism)"
        legend = alt.Legend(labelLimit=0, titleLimit=0, orient="bottom", columns=2, symbolOpacity=1)
        base = alt.Chart(_named("curves")).encode(
            x=alt.X("batch_limit:Q", scale=alt.Scale(type="log", nice=False), title=_log_title(task.batch_title)),
            color=alt.Color("deployment:N", title=title, scale=alt.Scale(domain=deployments, range=MODEL_COLOURS),
                            legend=legend),
            detail="deployment:N",
        )
        tooltip = [alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("row_id:N", title="configuration"),
                   alt.Tooltip("deployment:N", title="deployment"), alt.Tooltip("num_gpus:Q", title="GPUs"),
                   alt.Tooltip("batch_limit:Q", title=task.batch_title), _latency_tooltip(task),
                   _energy_tooltip(task, title="energy, mean of the repeats"),
                   alt.Tooltip("n_repeats:Q", title="times measured"),
                   _energy_tooltip(task, "wh_per_unit_min", "lowest repeat"),
                   _energy_tooltip(task, "wh_per_unit_max", "highest repeat")]
        spread = base.transform_filter("datum.n_repeats > 1").mark_rule(strokeWidth=2).encode(
            y=_energy_y(task, "wh_per_unit_min"), y2="wh_per_unit_max:Q", tooltip=tooltip)
        line = base.mark_line(strokeWidth=1.5).encode(y=_energy_y(task))
        points = base.mark_point(filled=True, size=40).encode(
            y=_energy_y(task), tooltip=tooltip,
            shape=alt.Shape("deployment:N", title=title, scale=alt.Scale(domain=deployments, range=MODEL_SHAPES),
                            legend=legend))
        repeated = sum(1 for row in model["curves"] if row["n_repeats"] > 1)
        # The spread's layer only where there is a spread: an empty layer leaves its scales without extent.
        curves = (alt.layer(*([spread] if repeated else []), line, points).properties(width=330, height=240)
                  .facet(column=alt.Column("gpu:N", title=None, sort=gpus,
                                           header=alt.Header(labelFontSize=13, labelFontWeight="bold"))))
        charts.append(Chart("curves", "Efficiency curves, one panel per GPU",
                            "How does energy per output fall as the batch limit rises, for each deployment? Every "
                            "measured configuration, no deadline; a configuration measured more than once is the mean "
                            "of its repeats, with a bar from the lowest to the highest "
                            + (f"({repeated} such configuration(s) here)." if repeated else "(each was measured once here)."),
                            _spec(curves, model, f"curves {bool(repeated)}")))
    if model["frontier"]:
        metrics = [m for m in task.latency_metrics if any(row["latency_metric"] == m for row in model["frontier"])]
        metric = alt.param(name="metric", value=metrics[0],
                           bind=alt.binding_select(options=metrics, labels=[LATENCY_TITLES[m] for m in metrics],
                                                   name="latency metric: "))
        tooltip = [alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("row_id:N", title="configuration"),
                   alt.Tooltip("num_gpus:Q", title="GPUs"), alt.Tooltip("batch_limit:Q", title=task.batch_title),
                   alt.Tooltip("latency:Q", title="latency (the chosen metric)"), _energy_tooltip(task)]
        x = alt.X("latency:Q", scale=alt.Scale(type="log", nice=False, padding=8),
                  title=f"latency ({'ms' if task.family == 'token' else 's'}, log scale; metric chosen below)")
        everything = (
            alt.Chart(_named("points"))
            .transform_filter(f"datum.latency_metric == metric")
            .mark_point(size=30, opacity=0.35)
            .encode(x=x, y=_energy_y(task), tooltip=tooltip, **_gpu_channels(gpus))
        )
        frontier_base = alt.Chart(_named("frontier")).transform_filter("datum.latency_metric == metric")
        line = frontier_base.mark_line(color="#333", strokeWidth=1.2).encode(x=x, y=_energy_y(task), order="latency:Q")
        points = frontier_base.mark_point(filled=True, size=80).encode(x=x, y=_energy_y(task), tooltip=tooltip,
                                                                        **_gpu_channels(gpus))
        frontier = alt.layer(everything, line, points).add_params(metric).properties(width=640, height=320)
        charts.append(Chart("frontier", "Energy-latency frontier across GPUs",
                            "Which configurations are worth considering? Filled points joined by the line: those no "
                            "other configuration of the model beats on both energy and latency, on any GPU; hollow: "
                            "every other measured configuration. No deadline.", _spec(frontier, model, "frontier")))
    if model["latency_cost"]:
        cost = (
            alt.Chart(_named("latency_cost"))
            .mark_line(point=alt.OverlayMarkDef(filled=True, size=60), strokeWidth=1.5)
            .encode(
                x=alt.X("latency_limit:O", title=f"latency tier, at most ({'ms' if task.family == 'token' else 's'})",
                        axis=alt.Axis(labelAngle=0)),
                y=alt.Y("relative_to_best:Q", title="energy ÷ the GPU's unconstrained best", scale=alt.Scale(zero=False)),
                detail="gpu:N",
                tooltip=[alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("metric_label:N", title="latency metric"),
                         alt.Tooltip("tier:N", title="tier"), alt.Tooltip("row_id:N", title="configuration"),
                         alt.Tooltip("num_gpus:Q", title="GPUs"), alt.Tooltip("batch_limit:Q", title=task.batch_title),
                         _energy_tooltip(task, title="energy within the tier"),
                         _energy_tooltip(task, "unconstrained_wh_per_unit", "unconstrained best"),
                         alt.Tooltip("relative_to_best:Q", title="ratio", format=".2f")],
                **_gpu_channels(gpus),
            )
            .properties(width=220 if task.family == "token" else 320, height=200)
            .facet(column=alt.Column("metric_label:N", title=None, sort=[LATENCY_SHORT[m] for m in task.latency_metrics],
                                     header=alt.Header(labelFontWeight="bold")))
        )
        charts.append(Chart("latency-cost", "What latency costs",
                            "How much more energy does each latency requirement need than the lowest-energy "
                            "configuration on that GPU with no limit? Tiers with nothing within them have no point.",
                            _spec(cost, model, "latency-cost")))
    if model["estimates"]:
        estimate_tooltip = [alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("deployment:N", title="deployment"),
                            alt.Tooltip("concurrency:Q", title="concurrency", format=".3g"),
                            alt.Tooltip("method:N", title="method"), _latency_tooltip(task), _energy_tooltip(task)]
        estimate_tooltip += [_energy_tooltip(task, "wh_per_unit_low", "interval low"),
                             _energy_tooltip(task, "wh_per_unit_high", "interval high")]
        base = alt.Chart(_named("estimates")).encode(
            x=alt.X("concurrency:Q", scale=alt.Scale(type="log", nice=False),
                    title=("requests in flight (average running batch, log scale)" if task.family == "token"
                           else "batch size (log scale)")),
            detail="deployment:N",
        )
        layers = [base.mark_area(opacity=0.18).encode(
            y=_energy_y(task, "wh_per_unit_low"), y2="wh_per_unit_high:Q", color=_gpu_channels(gpus)["color"])]
        deployments = sorted({row["deployment"] for row in model["estimates"]})
        dashes = [[1, 0], [6, 3], [2, 2], [8, 3, 2, 3], [1, 3], [10, 2]]
        layers.append(base.mark_line(strokeWidth=1.5).encode(
            y=_energy_y(task), color=_gpu_channels(gpus)["color"],
            strokeDash=alt.StrokeDash("deployment:N", title="deployment (GPUs, precision, parallelism)",
                                      scale=alt.Scale(domain=deployments, range=dashes),
                                      legend=alt.Legend(orient="bottom", columns=2, labelLimit=0, titleLimit=0,
                                                        symbolType="stroke", symbolStrokeWidth=1.5))))
        layers.append(base.mark_point(filled=True, size=18).encode(y=_energy_y(task), tooltip=estimate_tooltip,
                                                                    **_gpu_channels(gpus)))
        estimate = alt.layer(*layers).properties(width=640, height=300)
        charts.append(Chart("estimate", "Estimate across concurrency",
                            "What does the model need per output at the concurrency you run? The energy_at_concurrency "
                            "estimate per deployment: linear in log concurrency between measured points, never "
                            "extrapolated; the band is its interval, from the lowest and highest repeat of the "
                            "neighbouring measured points (no band: each was measured once).",
                            _spec(estimate, model, "estimate")))
    if model["history"]:
        snapshots = [row["snapshot_id"] for row in sorted(task.data["snapshots"], key=lambda row: row["position"])]
        base = alt.Chart(_named("history")).encode(
            x=alt.X("snapshot_id:O", title="snapshot, in upstream commit order", sort=snapshots,
                    scale=alt.Scale(domain=snapshots), axis=alt.Axis(labelAngle=-40)),
            y=_energy_y(task),
        )
        lines = base.mark_line(strokeWidth=1.5).encode(color=_gpu_channels(gpus)["color"], detail="gpu:N")
        points = base.mark_point(filled=True, size=60).encode(
            tooltip=[alt.Tooltip("snapshot_id:N", title="snapshot"), alt.Tooltip("gpu:N", title="GPU"),
                     alt.Tooltip("row_id:N", title="configuration"), alt.Tooltip("num_gpus:Q", title="GPUs"),
                     alt.Tooltip("batch_limit:Q", title=task.batch_title), _latency_tooltip(task), _energy_tooltip(task)],
            **_gpu_channels(gpus),
        )
        history = alt.layer(lines, points).properties(width=max(160, 40 * len(snapshots)), height=240)
        charts.append(Chart("history", "The index figures across the snapshots",
                            f"How has the model's best figure on each GPU (deadline: {task.deadline}) moved from one "
                            "snapshot to the next?" + _one_snapshot(snapshots), _spec(history, model, "history")))
    return charts


TOKEN_DEPLOYMENT = ("concat(num_gpus, ' GPU', case when num_gpus > 1 then 's' else '' end, ', ', coalesce(precision, '?'), "
                    "', TP', tensor_parallel, ' DP', data_parallel, ' EP', expert_parallel)")
DIFFUSION_DEPLOYMENT = ("concat(num_gpus, ' GPU', case when num_gpus > 1 then 's' else '' end, ', ', coalesce(precision, '?'), "
                        "', ', width, 'x', height, coalesce(', ' || num_frames || ' frames', ''), ', ', inference_steps, "
                        "' steps, Ulysses ', ulysses_degree, ' ring ', ring_degree)")


def _gather(connection: duckdb.DuckDBPyConnection, task: Task) -> dict[str, list[dict[str, Any]]]:
    """Every row the task's charts and tables show, from the views."""
    parameters = {"task": task.task}
    deployment = TOKEN_DEPLOYMENT if task.family == "token" else DIFFUSION_DEPLOYMENT
    href = "'models/' || slug || '.html' as href"
    latency = "median_itl_ms" if task.family == "token" else "batch_latency_s"
    batch_limit = "max_num_seqs" if task.family == "token" else "batch_size"
    configurations = FAMILIES[task.family].configurations_view
    metric_columns = ("median_itl_ms, p90_itl_ms, p99_itl_ms" if task.family == "token" else "batch_latency_s")
    data = {
        "index": fetch_dicts(connection, """
            select b.*, u.n_repeats, u.wh_repeat_min, u.wh_repeat_max, u.runner_up_row_id, u.runner_up_wh_per_unit,
                   u.choice_basis
            from best_configurations as b
            left join index_uncertainty as u on u.task = b.task and u.model_id = b.model_id and u.gpu = b.gpu
            where b.task = $task
            order by b.wh_per_unit, lower(b.model_id), b.model_id, b.gpu""", parameters),
        "best": fetch_dicts(connection, f"""
            select model_id, slug, gpu, row_id, num_gpus, {batch_limit} as batch_limit, {latency} as latency,
                   wh_per_unit, {href}
            from best_configurations where task = $task order by wh_per_unit""", parameters),
        "frontier": fetch_dicts(connection, f"""
            select f.model_id, f.slug, f.gpu, f.row_id, f.num_gpus, c.batch_limit, f.n_repeats, f.latency, f.wh_per_unit
            from energy_latency_frontier as f
            join configuration_points as c using (snapshot_id, task, row_id)
            where f.task = $task and f.scope = 'model_gpu' and f.latency_metric = '{task.latency_metric}'
            order by lower(f.model_id), f.gpu, f.latency""", parameters),
        "model_frontier": fetch_dicts(connection, """
            select f.model_id, f.gpu, f.row_id, f.num_gpus, c.batch_limit, f.n_repeats, f.latency_metric, f.latency,
                   f.wh_per_unit
            from energy_latency_frontier as f
            join configuration_points as c using (snapshot_id, task, row_id)
            where f.task = $task and f.scope = 'model'
            order by f.model_id, f.latency_metric, f.latency""", parameters),
        "points": fetch_dicts(connection, f"""
            select model_id, gpu, row_id, num_gpus, batch_limit, n_repeats, wh_per_unit, {metric_columns}
            from configuration_points where task = $task order by model_id, gpu, row_id""", parameters),
        "latency_cost": fetch_dicts(connection, f"""
            with unconstrained as (
                select model_id, gpu, min(wh_per_unit) as unconstrained_wh_per_unit
                from efficiency_curves where task = $task group by model_id, gpu
            )
            select t.model_id, t.slug, t.gpu, t.latency_metric, t.latency_limit, t.row_id, t.num_gpus, t.batch_limit,
                   t.wh_per_unit, u.unconstrained_wh_per_unit,
                   t.wh_per_unit / u.unconstrained_wh_per_unit as relative_to_best, {href}
            from tiered_best_configurations as t join unconstrained as u using (model_id, gpu)
            where t.task = $task order by lower(t.model_id), t.gpu, t.latency_metric, t.latency_limit""", parameters),
        "curves": fetch_dicts(connection, f"""
            select model_id, slug, gpu, row_id, num_gpus, {deployment} as deployment, batch_limit, n_repeats,
                   {latency} as latency, wh_per_unit, wh_per_unit_min, wh_per_unit_max, {href}
            from configuration_points where task = $task
            order by lower(model_id), gpu, deployment, batch_limit""", parameters),
        "estimates": fetch_dicts(connection, f"""
            with pairs as (
                select distinct task, model_id, gpu from efficiency_curves where task = $task
            ),
            -- Each measured concurrency (so the line has the measured points as its corners) and a
            -- half-octave grid between them.
            measured as (
                select distinct model_id, gpu, {'avg_batch_size' if task.family == 'token' else 'batch_size::double'} as x
                from {configurations} where task = $task
            ),
            grid as (
                select p.task, p.model_id, p.gpu, pow(2, k / 2) as x from pairs as p cross join range(0, 27) as r(k)
                union
                select $task as task, model_id, gpu, x from measured
            )
            select g.model_id, g.gpu, {deployment} as deployment, e.*
            from grid as g, lateral energy_at_concurrency(g.task, g.model_id, g.gpu, g.x) as e
            where e.method in ('measured', 'interpolated')
            order by g.model_id, g.gpu, deployment, e.concurrency""", parameters),
        "history": fetch_dicts(connection, f"""
            select h.snapshot_id, h.model_id, h.slug, h.gpu, h.row_id, h.num_gpus, h.{batch_limit} as batch_limit,
                   h.{latency} as latency, h.wh_per_unit
            from best_configuration_history as h join snapshot_history as s using (snapshot_id)
            where h.task = $task order by s.position, lower(h.model_id), h.gpu""", parameters),
        "snapshots": fetch_dicts(connection, "select snapshot_id, position from snapshot_history order by position", {}),
        "tiers": fetch_dicts(connection, """
            select * from tiered_best_configurations where task = $task
            order by lower(model_id), model_id, gpu, latency_metric, latency_limit""", parameters),
    }
    unit_symbol = "ms" if task.family == "token" else "s"
    for row in data["latency_cost"]:
        row["metric_label"] = LATENCY_SHORT[row["latency_metric"]]
        row["tier"] = f"≤ {row['latency_limit']:g}"
        row["tier_label"] = f"≤ {row['latency_limit']:g} {unit_symbol}"
    chart_keys = ("best", "frontier", "model_frontier", "latency_cost", "curves", "estimates", "history")
    for key in chart_keys:
        data[key] = [task.rounded(row) for row in data[key]]
    # One point per configuration and latency metric: the model frontier's metric choice filters them.
    data["points"] = [
        task.rounded({**{k: v for k, v in row.items() if k not in task.latency_metrics},
                      "latency_metric": metric, "latency": row[metric]})
        for row in data["points"] for metric in task.latency_metrics if row[metric] is not None
    ]
    return data


@dataclass(frozen=True)
class Cell:
    text: str
    sort_value: str | float | None = None
    link: str | None = None
    hover: str | None = None
    numeric: bool = False

    def html(self) -> str:
        sort = "" if self.sort_value is None else f' data-value="{html.escape(str(self.sort_value))}"'
        hover = "" if self.hover is None else f' title="{html.escape(self.hover)}"'
        numeric = ' class="number"' if self.numeric else ""
        text = html.escape(self.text)
        if self.link:
            text = f'<a href="{html.escape(self.link)}">{text}</a>'
        return f"<td{numeric}{sort}{hover}>{text}</td>"


def _number_cell(value: Any, hover: str | None = None) -> Cell:
    """A figure as the index file holds it (already rounded by the export's rule), sorted as a number."""
    if value is None:
        return Cell("", "", hover=hover, numeric=True)
    return Cell(f"{value:,}" if isinstance(value, int) else repr(value), value, hover=hover, numeric=True)


def _table(headers: list[str], rows: list[list[Cell]], groups: list[tuple[str, int]] | None = None,
           css_class: str = "") -> str:
    """A table sortable by any column (click its heading); `groups` adds a heading row above spanning columns."""
    group_row = ""
    if groups:
        group_row = "<tr>" + "".join(
            f'<th colspan="{span}" class="group">{html.escape(title)}</th>' for title, span in groups) + "</tr>"
    head = "<tr>" + "".join(
        f'<th data-column="{index}" title="click to sort">{html.escape(title)}</th>' for index, title in enumerate(headers)
    ) + "</tr>"
    body = "".join("<tr>" + "".join(cell.html() for cell in row) + "</tr>" for row in rows)
    return f'<table class="sortable {css_class}"><thead>{group_row}{head}</thead><tbody>{body}</tbody></table>'


def _model_link(model_id: str, slug: str, prefix: str) -> Cell:
    return Cell(model_id, model_id.lower(), link=f"{prefix}models/{slug}.html")


def _index_table(task: Task, rows: list[dict[str, Any]], prefix: str = "", with_model: bool = True) -> str:
    """The index rows as index.json holds them, ordered by the figure."""
    if not rows:
        return "<p>No configuration within the deadline.</p>"
    formatted = task.plan.configuration
    energy_key = "wh_per_million_output_tokens" if task.family == "token" else f"wh_per_{task.unit}"
    latency_key = task.latency_metric
    batch_key = "max_num_seqs" if task.family == "token" else "batch_size"
    headers = (["model"] if with_model else []) + [
        "GPU", "configuration", "GPUs", task.batch_title, LATENCY_TITLES[latency_key], task.unit_title,
        "times measured", "runner-up within the deadline"]
    energy_digits = energy_decimals(task.plan.unit)
    table_rows = []
    for row in rows:
        figures = formatted(row)
        runner_up = row["runner_up_wh_per_unit"]
        table_rows.append(
            ([_model_link(row["model_id"], row["slug"], prefix)] if with_model else []) + [
                Cell(figures["gpu"]), Cell(figures["row_id"]), _number_cell(figures["num_gpus"]),
                _number_cell(figures[batch_key]), _number_cell(figures[latency_key]), _number_cell(figures[energy_key]),
                _number_cell(row["n_repeats"], hover=_repeat_range(row, energy_digits)),
                _number_cell(None if runner_up is None else round(runner_up, energy_digits),
                             hover=f"{row['runner_up_row_id'] or 'none'}; the index row: {row['choice_basis']}")])
    return _table(headers, table_rows, css_class="index-table")


def _repeat_range(row: dict[str, Any], digits: int) -> str:
    if (row["n_repeats"] or 0) < 2:
        return "measured once"
    return f"repeats from {round(row['wh_repeat_min'], digits)} to {round(row['wh_repeat_max'], digits)}"


def _tier_table(task: Task, rows: list[dict[str, Any]], prefix: str = "", with_model: bool = True) -> str:
    """Model × GPU rows, a column per tier of every latency metric, each the tier's figure as tiers.json holds it."""
    if not rows:
        return "<p>No configuration within any tier.</p>"
    tiers = sorted({(row["latency_metric"], row["latency_limit"]) for row in rows},
                   key=lambda item: (task.latency_metrics.index(item[0]), item[1]))
    cells: dict[tuple[str, str, str], dict[tuple[str, float], dict[str, Any]]] = {}
    for row in rows:
        figures = task.plan.tier(row)
        cells.setdefault((row["model_id"].lower(), row["model_id"], row["gpu"]), {})[
            (row["latency_metric"], row["latency_limit"])] = {**figures, "slug": row["slug"]}
    unit = "ms" if task.family == "token" else "s"
    headers = (["model"] if with_model else []) + ["GPU"] + [f"≤ {limit:g} {unit}" for _, limit in tiers]
    groups = [("", 2 if with_model else 1)] + [
        (LATENCY_TITLES[metric], sum(1 for m, _ in tiers if m == metric))
        for metric in task.latency_metrics if any(m == metric for m, _ in tiers)]
    table_rows = []
    for (_, model_id, gpu), values in sorted(cells.items()):
        slug = next(iter(values.values()))["slug"]
        table_rows.append(
            ([_model_link(model_id, slug, prefix)] if with_model else []) + [Cell(gpu)] + [
                _number_cell(values[tier]["wh_per_unit"], hover=values[tier]["row_id"]) if tier in values
                else Cell("", "") for tier in tiers])
    return _table(headers, table_rows, groups, css_class="tier-table")


STYLE = """
body { font-family: system-ui, sans-serif; margin: 1rem auto; padding: 0 1rem; color: #222; max-width: %dpx; }
h1 { margin-bottom: 0.2rem; } h2 { margin-top: 0.4rem; } h3 { margin: 1.6rem 0 0.2rem; }
p.answers { margin: 0.2rem 0 0.4rem; color: #444; font-size: 0.9rem; max-width: 60rem; }
.facts { font-size: 0.85rem; background: #f5f5f2; border-left: 4px solid #888; padding: 0.4rem 0.8rem; }
.facts dt { font-weight: 600; float: left; clear: left; width: 7.5rem; }
.facts dd { margin: 0 0 0.2rem 8rem; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.8rem; }
th, td { border: 1px solid #ccc; padding: 0.15rem 0.4rem; text-align: left; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f0f0f0; cursor: pointer; } th.group { cursor: default; text-align: center; }
th[data-order="ascending"]::after { content: " ▲"; } th[data-order="descending"]::after { content: " ▼"; }
section { border-top: 2px solid #444; margin-top: 2rem; }
.chart { margin: 0.4rem 0 1rem; max-width: 100%%; overflow-x: auto; }
nav a { margin-right: 0.6rem; }
""" % PAGE_WIDTH

SCRIPT = """
const charts = %s;
window.reportViews = {};
for (const [id, spec] of Object.entries(charts)) {
  vegaEmbed("#" + id, spec, {actions: false, renderer: "svg"})
    .then(result => { window.reportViews[id] = result.view; document.getElementById(id).dataset.drawn = "true"; })
    .catch(error => console.error("chart " + id + ": " + error));
}
for (const heading of document.querySelectorAll("table.sortable th[data-column]")) {
  heading.addEventListener("click", () => {
    const table = heading.closest("table"), column = Number(heading.dataset.column);
    const ascending = heading.dataset.order !== "ascending";
    for (const other of table.querySelectorAll("th[data-column]")) delete other.dataset.order;
    heading.dataset.order = ascending ? "ascending" : "descending";
    const key = row => row.cells[column].dataset.value ?? row.cells[column].textContent;
    const rows = [...table.tBodies[0].rows].sort((a, b) => {
      const [x, y] = [key(a), key(b)];
      if (x === "" || y === "") return (x === "") - (y === "");  // empty cells last either way
      const [p, q] = [Number(x), Number(y)];
      const order = isNaN(p) || isNaN(q) ? x.localeCompare(y) : p - q;
      return ascending ? order : -order;
    });
    table.tBodies[0].append(...rows);
  });
}
"""


def _page(title: str, body: str, charts: dict[str, dict[str, Any]], script: str) -> str:
    specs = json.dumps(charts).replace("</", "<\\/")  # no "</script>" inside the script
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style>{script}</head><body>\n{body}\n"
            f"<script>{SCRIPT % specs}</script>\n</body></html>\n")


def _facts(task: Task, snapshot: dict[str, Any]) -> str:
    """What every figure of a task's section rests on: snapshot, unit, deadline, boundary."""
    header = task.header
    items = [
        ("snapshot", f"{snapshot['snapshot_id']} (upstream commit of {snapshot['commit_time'] or 'unknown time'}; "
                     f"compiled {header['source']['compiled']}; retrieved {header['source']['retrieved']})"),
        ("unit", f"{task.unit_title}: steady-state GPU energy per output"),
        ("deadline", f"{task.deadline}. {header['source']['selection']}"),
        ("boundary", f"{header['boundary']}: {header['caveat']}"),
        ("other figures", "the efficiency curves, frontiers and estimates show every measured configuration, with no "
                          "deadline; each latency tier shows the lowest energy within that tier's limit alone."),
    ]
    return '<dl class="facts">' + "".join(
        f"<dt>{html.escape(name)}</dt><dd>{html.escape(text)}</dd>" for name, text in items) + "</dl>"


def _chart_block(chart_id: str, chart: Chart) -> str:
    problems = ambiguous_encodings(chart.spec)
    if problems:
        raise PipelineError(f"report: chart {chart_id} would not tell its categories apart", problems)
    return (f"<h3>{html.escape(chart.title)}</h3><p class=\"answers\">{html.escape(chart.answers)}</p>"
            f'<div class="chart" id="{html.escape(chart_id)}"></div>')


def progress_over(items: list[Any], label: str, unit: str = "task") -> Any:
    with progress(len(items), label, unit=unit) as bar:
        for item in items:
            yield item
            bar.update(1)


def _tasks(connection: duckdb.DuckDBPyConnection, snapshot: dict[str, Any]) -> list[Task]:
    names = dict(connection.execute("select task, display_name from tasks where snapshot_id = $id",
                                    {"id": snapshot["snapshot_id"]}).fetchall())
    return [Task(plan.task, names[plan.task] or plan.task, plan.family, plan.unit if plan.family == "diffusion" else None,
                 plan.header, plan=plan) for plan in task_plans(connection, snapshot, snapshot["retrieved"], snapshot["retrieved"])]


def _check_slugs(tasks: list[Task]) -> dict[str, str]:
    """Each model page's slug and its model id; two models of one slug would share a page."""
    models: dict[str, set[str]] = {}
    for task in tasks:
        for row in task.data["index"] + task.data["curves"]:
            models.setdefault(row["slug"], set()).add(row["model_id"])
    clashes = [f"{slug}: {' and '.join(sorted(ids))}" for slug, ids in sorted(models.items()) if len(ids) > 1]
    if clashes:
        raise PipelineError("model ids that would share one report page (slug)", clashes)
    return {slug: next(iter(ids)) for slug, ids in models.items()}


def _models_of(task: Task) -> list[str]:
    """The task's models in the order its charts list them: by best figure, then the rest by name."""
    ordered = []
    for row in sorted(task.data["best"], key=lambda row: row["wh_per_unit"]):
        if row["model_id"] not in ordered:
            ordered.append(row["model_id"])
    rest = sorted({row["model_id"] for row in task.data["curves"]} - set(ordered), key=str.lower)
    return ordered + rest


def write_report(paths: Paths) -> tuple[Path, int]:
    """Write OUT/report (replaced whole); return its index.html and the number of charts of the index page."""
    import vl_convert

    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    with connect(str(paths.database), read_only=True) as connection:
        snapshot_id = connection.execute("select snapshot_id from index_snapshot").fetchone()[0]
        snapshot = {
            name: value.isoformat() if isinstance(value, (datetime.date, datetime.datetime)) else value
            for name, value in fetch_dicts(connection, "select * from snapshots where snapshot_id = $id",
                                           {"id": snapshot_id})[0].items()
        }
        snapshot_count = connection.execute("select count(*) from snapshots").fetchone()[0]
        tasks = _tasks(connection, snapshot)
        for task in progress_over(tasks, "report: reading"):
            task.data = _gather(connection, task)
    slugs = _check_slugs(tasks)
    staging = paths.out / f".report-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "models").mkdir(parents=True)
    try:
        bundle = vl_convert.javascript_bundle()
        (staging / "vega.js").write_text(bundle, encoding="utf-8")
        specs: dict[str, dict[str, Any]] = {}
        sections = []
        for task in progress_over(tasks, "report: index page"):
            models = _models_of(task)
            parts = [f'<section id="{task.task}"><h2>{html.escape(task.display_name)} ({task.task})</h2>',
                     _facts(task, snapshot),
                     f"<h3>The index: the lowest-energy configuration of each model on each GPU</h3>"
                     f'<p class="answers">{len(models)} models. Ordered by the figure; click a heading to sort, '
                     f"a model for its page.</p>", _index_table(task, task.data["index"])]
            for chart in _index_charts(task, models):
                chart_id = f"{task.task}-{chart.name}"
                specs[chart_id] = chart.spec
                (staging / f"{chart_id}.png").write_bytes(vl_convert.vegalite_to_png(chart.spec, scale=1.5))
                parts.append(_chart_block(chart_id, chart))
            parts.append("<h3>Latency tiers: the lowest energy within each latency limit</h3>"
                         '<p class="answers">Each cell: the lowest-energy configuration of the model on the GPU whose '
                         "latency is within the tier (hover a cell for its configuration; empty: nothing within it).</p>"
                         + _tier_table(task, task.data["tiers"]) + "</section>")
            sections.append("".join(parts))
        nav = "".join(f'<a href="#{task.task}">{html.escape(task.display_name)}</a>' for task in tasks)
        body = (f"<h1>energy-index report</h1><p>Index snapshot <b>{html.escape(snapshot_id)}</b>; "
                f"{snapshot_count} snapshot(s) in the database. Energy is steady-state GPU energy per output (token, "
                f"image or video) from the ML.ENERGY Leaderboard's measurements; every figure is the index's, rounded "
                f"as the index files round it. Each model has its own page (click its name).</p><nav>{nav}</nav>"
                + "\n".join(sections))
        page = _page(f"energy-index report: {snapshot_id}", body, specs, f"<script>{bundle}</script>")
        (staging / "index.html").write_text(page, encoding="utf-8")
        validated: set[str] = set()
        for slug in progress_over(sorted(slugs), "report: model pages", unit="model"):
            (staging / "models" / f"{slug}.html").write_text(
                _model_page(slugs[slug], slug, tasks, snapshot, validated), encoding="utf-8")
        replace_directory(staging, paths.out / "report")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths.out / "report" / "index.html", len(specs)


def _model_page(model_id: str, slug: str, tasks: list[Task], snapshot: dict[str, Any], validated: set[str]) -> str:
    specs: dict[str, dict[str, Any]] = {}
    sections = []
    measured_on = [task for task in tasks if any(row["model_id"] == model_id for row in task.data["curves"])]
    for task in measured_on:
        model = {key: [row for row in task.data[key] if row.get("model_id") == model_id]
                 for key in ("index", "curves", "latency_cost", "estimates", "history", "tiers", "points")}
        model["frontier"] = [row for row in task.data["model_frontier"] if row["model_id"] == model_id]
        parts = [f'<section id="{task.task}"><h2>{html.escape(task.display_name)} ({task.task})</h2>',
                 _facts(task, snapshot),
                 f'<h3>Index rows</h3><p class="answers">The model\'s lowest-energy configuration on each GPU within the '
                 f'deadline, as the index holds it (<a href="../index.html#{task.task}">the task\'s index</a>).</p>',
                 _index_table(task, model["index"], with_model=False)]
        for chart in _model_charts(task, model, validated):
            chart_id = f"{task.task}-{chart.name}"
            specs[chart_id] = chart.spec
            parts.append(_chart_block(chart_id, chart))
        parts.append("<h3>Latency tiers</h3><p class=\"answers\">The lowest energy within each latency limit (hover a "
                     "cell for its configuration; empty: nothing within it).</p>"
                     + _tier_table(task, model["tiers"], with_model=False) + "</section>")
        sections.append("".join(parts))
    nav = "".join(f'<a href="#{task.task}">{html.escape(task.display_name)}</a>' for task in measured_on)
    body = (f'<p><a href="../index.html">← energy-index report</a></p><h1>{html.escape(model_id)}</h1>'
            f"<p>Index snapshot <b>{html.escape(snapshot['snapshot_id'])}</b>. Measured on: {nav}</p>"
            + "\n".join(sections))
    return _page(f"{model_id}: energy-index report", body, specs, '<script src="../vega.js"></script>')


# Vega's named colour schemes a chart here may use for a categorical field, and how many colours each has.
SCHEME_SIZES = {"category10": 10, "tableau10": 10, "tableau20": 20, "category20": 20}
IDENTIFYING_CHANNELS = ("shape", "strokeDash", "text", "x", "y", "row", "column", "facet")


def ambiguous_encodings(spec: dict[str, Any]) -> list[str]:
    """What makes a chart's categories (models, GPUs, deployments) hard to tell apart: a field coloured with
    more values than its palette has colours, and no other channel (shape, stroke dash, text label,
    position or facet) on the same field; or colour and shape pairs that repeat."""
    colours: dict[str, list[str]] = {}
    shapes: dict[str, list[str]] = {}
    other_channels: dict[str, set[str]] = {}
    domains: dict[str, list[Any]] = {}

    def channel_field(definition: Any) -> str | None:
        return definition.get("field") if isinstance(definition, dict) else None

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            for channel, definition in (node.get("encoding") or {}).items():
                name = channel_field(definition)
                if name is None:
                    continue
                scale = definition.get("scale") or {}
                if scale.get("domain") is not None and isinstance(scale["domain"], list):
                    domains.setdefault(name, scale["domain"])
                if channel in ("color", "fill", "stroke"):
                    palette = scale.get("range")
                    colours[name] = palette if isinstance(palette, list) else [
                        f"{scale.get('scheme', 'category10')}-{index}"
                        for index in range(SCHEME_SIZES.get(scale.get("scheme", "category10"), 10))]
                elif channel == "shape" and isinstance(scale.get("range"), list):
                    shapes[name] = scale["range"]
                elif channel in IDENTIFYING_CHANNELS:
                    other_channels.setdefault(name, set()).add(channel)
            facet = node.get("facet")
            if isinstance(facet, dict):
                for definition in [facet, *facet.values()]:
                    if channel_field(definition):
                        other_channels.setdefault(channel_field(definition), set()).add("facet")
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit({key: value for key, value in spec.items() if key != "datasets"})
    problems = []
    for name, palette in colours.items():
        values = domains.get(name)
        if values is None:
            values = sorted({row.get(name) for rows in spec.get("datasets", {}).values() for row in rows} - {None},
                            key=str)
        if len(values) <= len(palette) or other_channels.get(name):
            continue
        if name not in shapes:
            problems.append(f"{name}: {len(values)} values coloured with {len(palette)} colours and no other channel")
            continue
        pairs = {(palette[index % len(palette)], shapes[name][index % len(shapes[name])]) for index in range(len(values))}
        if len(pairs) < len(values):
            problems.append(f"{name}: {len(values)} values but only {len(pairs)} distinct colour and shape pairs")
    return problems
