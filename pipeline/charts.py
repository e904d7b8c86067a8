"""The report's charts: Altair (Vega-Lite) specifications of one task's figures, for the index page (a
colour and a shape per model, the GPU a panel or a dash) or for a model's page (a colour and a shape per
GPU, the same on every model page; a deployment a dash), and the check that a chart tells its categories
apart. Colour means one thing on a page: the model on the index page, the GPU on a model's page."""

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

try:
    import altair as alt
except ImportError:  # the report extra is not installed: write_report says how to install it
    alt = None


class Metric(msgspec.Struct, frozen=True):
    """A latency metric of a family (the latency_metrics view) with its unit (the field dictionary)."""

    latency_metric: str
    title: str
    short_title: str
    unit: str


class ChartedTask(Protocol):
    """What a chart reads of a task (pipeline/report.py: Task), so that the charts need not import the report."""

    family: str
    metrics: list[Metric]
    # Its model pages' charts as Altair made them once, with slots (chart_template), for the report run.
    chart_templates: dict[tuple[Any, ...], tuple[type, dict[str, Any]]]

    @property
    def metric(self) -> Metric: ...

    @property
    def unit_title(self) -> str: ...

    @property
    def batch_title(self) -> str: ...

    @property
    def concurrency_title(self) -> str: ...

    @property
    def deadline(self) -> str: ...


# Vega's tableau10: ten colours a reader tells apart. A chart with more models than colours gives each
# model a colour and a shape, the pair unique up to len(MODEL_COLOURS) * len(MODEL_SHAPES) = 70 models
# (10 and 7 share no factor); tests/test_report.py checks every chart against this.
MODEL_COLOURS = ["#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6",
                 "#9d755d", "#bab0ac"]
MODEL_SHAPES = ["circle", "square", "triangle-up", "diamond", "triangle-down", "cross", "triangle-right"]
# A GPU's colour and shape, by its place among every GPU of the index snapshot (gpu_styles): the same on
# every page and chart that colours GPUs.
GPU_COLOURS = ["#1b6ca8", "#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e"]
GPU_SHAPES = ["circle", "square", "triangle-up", "diamond", "cross", "triangle-down"]
NEUTRAL = "#444"
# Ten dash patterns a reader tells apart: a model's page has up to ten deployments on one GPU.
DASHES = [[1, 0], [6, 3], [2, 2], [8, 3, 2, 3], [1, 3], [10, 2], [4, 4, 1, 4], [12, 3, 2, 3, 2, 3], [3, 6],
          [8, 2, 1, 2, 1, 2, 1, 2]]
FADED_OPACITY = 0.12
# The kinds of chart this process has checked against Vega-Lite's schema: one of each kind is enough, and
# checking every model page's took most of the report's time.
_VALIDATED: set[str] = set()
# A model's page shows the charts every other model's page of its task shows, differing only in values: the
# model's GPUs and their colours and shapes, its deployments, its axes' ticks, its latency metrics. Altair
# makes each of those charts once per task (chart_template), with a slot (a string no title or row holds) in
# place of each such value, and each page's chart is that dict with the page's values in the slots (filled;
# tests/test_report.py checks it is byte for byte Altair's chart of those values). Made by Altair page by
# page, the model pages' 372 charts took 9.8 s of the report's 27 s on the newest snapshot (46 pages, 62
# task sections; Altair copies the whole chart at every .encode, .properties, layer and facet); 1.6 s filled,
# most of it Altair making the 52 templates.
SLOT = "\x00slot:"
ENERGY_COLUMNS = ("wh_per_unit", "wh_per_unit_low", "wh_per_unit_high", "wh_per_unit_min", "wh_per_unit_max",
                  "unconstrained_wh_per_unit", "wh_repeat_min", "wh_repeat_max", "runner_up_wh_per_unit")
# Tooltip entries by column: title, Vega-Lite type and number format.
TIPS = {"snapshot_id": ("snapshot", "N", None), "model_id": ("model", "N", None), "gpu": ("GPU", "N", None),
        "metric_label": ("latency metric", "N", None), "tier": ("tier", "N", None), "method": ("method", "N", None),
        "row_id": ("configuration", "N", None), "deployment": ("deployment", "N", None),
        "num_gpus": ("GPUs", "Q", None), "n_repeats": ("times measured", "Q", None),
        "concurrency": ("concurrency", "Q", ".3g"), "relative_to_best": ("ratio", "Q", ".2f")}


class ChartText(msgspec.Struct, frozen=True):
    title: str
    answers: str
    tooltip: list[str] = []
    repeated: str = ""
    once: str = ""


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    answers: str
    spec: dict[str, Any]


def _log(title: str) -> str:
    """An axis title saying the scale is logarithmic: 'latency (ms)' -> 'latency (ms, log scale)'."""
    return title[:-1] + ", log scale)" if title.endswith(")") else f"{title} (log scale)"


def log_ticks(values: Iterable[float | None]) -> list[float]:
    """Labelled ticks for a log axis across the whole range of `values`: 1, 2 and 5 times the powers of ten
    within it, or 1, 2, 3 and 5 times, or every digit's, the first that gives three, and else the range's
    ends (and middle) at two significant digits, so that a range inside one decade (12 to 17 Wh) is labelled
    too. Every digit's only when the others give too few: eight labels within one decade of a small panel
    overlap, and the chart then hides every other one (21 to 108 Wh is labelled 30, 50 and 100, not 30 to
    100 with 80 and 100 hidden)."""
    numbers = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not numbers:
        return []
    low, high = min(numbers), max(numbers)
    decades = range(math.floor(math.log10(low)), math.floor(math.log10(high)) + 1)

    def two_digits(value: float, up: bool) -> float:
        scale = 10.0 ** (math.floor(math.log10(value)) - 1)
        return float(f"{(math.ceil if up else math.floor)(value / scale) * scale:.3g}")

    for mantissas in ((1, 2, 5), (1, 2, 3, 5), range(1, 10)):
        ticks = [float(f"{m}e{k}") for k in decades for m in mantissas if low <= m * 10.0 ** k <= high]
        if len(ticks) >= 3 or (len(ticks) >= 2 and mantissas == (1, 2, 5) and high / low > 20):
            # An end more than half as far again from the nearest label gets its own (12.18 below 20).
            ends = [two_digits(low, True)] * (ticks[0] > 1.5 * low) + [two_digits(high, False)] * (
                ticks[-1] < high / 1.5)
            return sorted({*ticks, *ends})
    ends = [two_digits(low, True), two_digits(math.sqrt(low * high), True), two_digits(high, False)]
    return sorted({*ticks, *(v for v in ends if low <= v <= high)}) or [float(f"{low:.2g}")]


def _energy_y(task: ChartedTask, ticks: list[float], column: str = "wh_per_unit", padding: int = 8,
              **axis: Any) -> Any:
    return alt.Y(f"{column}:Q", scale=alt.Scale(type="log", nice=False, padding=padding),
                 title=f"{task.unit_title} (log scale)", axis=alt.Axis(values=ticks, format=",~g", **axis))


def _tooltip(task: ChartedTask, columns: list[str]) -> list[Any]:
    """Tooltip entries: a column of TIPS, batch_limit or latency, or column=title (an energy column's with its unit)."""
    tips = {**TIPS, "batch_limit": (task.batch_title, "Q", None), "latency": (task.metric.title, "Q", None)}
    entries = []
    for entry in columns:
        column, _, title = entry.partition("=")
        title, kind, number_format = (title + f" ({task.unit_title})" * (column in ENERGY_COLUMNS), "Q", None) \
            if title else tips[column]
        entries.append(alt.Tooltip(f"{column}:{kind}", title=title,
                                   **({"format": number_format} if number_format else {})))
    return entries


def _series(column: str, domain: list[str], colours: list[str], shapes: list[str], heading: str | None = None,
            **legend: Any) -> dict[str, Any]:
    """A category by colour and by shape, in one legend."""
    titled = {"legend": alt.Legend(**legend), **({"title": heading} if heading else {})}
    return {"color": alt.Color(f"{column}:N", scale=alt.Scale(domain=domain, range=colours), **titled),
            "shape": alt.Shape(f"{column}:N", scale=alt.Scale(domain=domain, range=shapes), **titled)}


def series_styles(gpus: Iterable[str], models: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Each GPU's and each model's colour and shape, by its place among every GPU (or model) of the snapshot:
    the same in every chart and on every page. Models' colour and shape pairs are unique up to
    len(MODEL_COLOURS) * len(MODEL_SHAPES) models; more share pairs, which ambiguous_encodings reports."""
    ordered_gpus, ordered_models = sorted(set(gpus)), sorted(set(models), key=lambda model: (model.lower(), model))
    return {**{gpu: (GPU_COLOURS[i % len(GPU_COLOURS)], GPU_SHAPES[i % len(GPU_SHAPES)])
               for i, gpu in enumerate(ordered_gpus)},
            **{model: (MODEL_COLOURS[i % len(MODEL_COLOURS)], MODEL_SHAPES[i % len(MODEL_SHAPES)])
               for i, model in enumerate(ordered_models)}}


def gpu_values(gpus: list[str], styles: dict[str, tuple[str, str]]) -> dict[str, list[str]]:
    """A model's page's GPUs with their colours and shapes (`styles`: series_styles), as _gpu_series takes them."""
    return {"gpus": gpus, "gpu_colours": [styles[gpu][0] for gpu in gpus],
            "gpu_shapes": [styles[gpu][1] for gpu in gpus]}


def _gpu_series(values: dict[str, Any], **legend: Any) -> dict[str, Any]:
    """The GPU by colour and by shape (a model's page): gpu_values' GPUs, colours and shapes."""
    return _series("gpu", values["gpus"], values["gpu_colours"], values["gpu_shapes"], "GPU", symbolOpacity=1,
                   **legend)


def _by_model(base: Any, domain: list[str], rows: list[dict[str, Any]], tooltip: list[Any], line: dict[str, Any],
              size: int, styles: dict[str, tuple[str, str]], **line_encoding: Any) -> Any:
    """A line and points per model (a legend click highlights one, the legend's entries the full model ids)."""
    # Vega-Lite's defaults (click selects, double-click clears): naming `on` loses the legend's click handling.
    selection = alt.selection_point(name="model", fields=["model_id"], bind="legend")
    base = base.encode(opacity=alt.condition(selection, alt.value(1.0), alt.value(FADED_OPACITY)))
    # The lines take each model's colour as a value, without a scale or a legend: Vega-Lite merges one
    # field's legends across layers, and a merged legend loses the legend binding's click handling.
    for row in rows:
        row["line_colour"] = styles[row["model_id"]][0]
    lines = base.mark_line(**line).encode(stroke=alt.Stroke("line_colour:N", scale=None), detail="model_id:N",
                                          **line_encoding)
    channels = _series("model_id", domain, [styles[m][0] for m in domain], [styles[m][1] for m in domain], None,
                       title="model (click to highlight)",
                       labelLimit=0, symbolLimit=0, columns=1, labelFontSize=10, symbolSize=60)
    return alt.layer(lines, base.mark_point(filled=True, size=size).encode(tooltip=tooltip, **channels)
                     .add_params(selection))


def _by_gpu(chart: Any, gpus: list[str]) -> Any:
    return chart.facet(column=alt.Column("gpu:N", title=None, sort=gpus,
                                         header=alt.Header(labelFontSize=13, labelFontWeight="bold")))


def _by_metric(task: ChartedTask) -> Any:
    return alt.Column("metric_label:N", title=None, sort=[m.short_title for m in task.metrics],
                      header=alt.Header(labelFontWeight="bold"))


def _deployment_dash(deployments: list[str]) -> Any:
    return alt.StrokeDash("deployment:N", title="deployment (GPUs, precision, parallelism)",
                          scale=alt.Scale(domain=deployments, range=DASHES), legend=alt.Legend(
                              orient="bottom", columns=2, labelLimit=0, titleLimit=0, symbolType="stroke",
                              symbolStrokeWidth=1.5))


def _curves_base(task: ChartedTask, batch_ticks: list[float]) -> Any:
    return alt.Chart(alt.Data(name="curves")).encode(
        x=alt.X("batch_limit:Q", scale=alt.Scale(type="log", nice=False), title=_log(task.batch_title),
                axis=alt.Axis(values=batch_ticks, format=",~g", labelOverlap=True)),
        detail="deployment:N")


def _history_base(task: ChartedTask, snapshots: list[str], energy_ticks: list[float]) -> Any:
    return alt.Chart(alt.Data(name="history")).encode(
        x=alt.X("snapshot_id:O", title="snapshot, in upstream commit order", sort=snapshots,
                scale=alt.Scale(domain=snapshots), axis=alt.Axis(labelAngle=-40)),
        y=_energy_y(task, energy_ticks))


# A model's page's charts, each a function of the task, its tooltips and `v`: the page's values (or the slots
# of chart_template), the only thing that differs between two model pages of a task.

def _model_curves(task: ChartedTask, tips: dict[str, list[Any]], v: dict[str, Any], repeated: bool) -> Any:
    # The spread's layer only where there is a spread: an empty layer leaves its scales without extent.
    # Colour and shape are the GPU's (as on every chart of a model's page), the dash the deployment's.
    curves, by_gpu = _curves_base(task, v["batch_ticks"]), _gpu_series(v)
    spread = curves.transform_filter("datum.n_repeats > 1").mark_rule(strokeWidth=2).encode(
        y=_energy_y(task, v["energy_ticks"], "wh_per_unit_min"), y2="wh_per_unit_max:Q", tooltip=tips["curves"],
        color=by_gpu["color"])
    return _by_gpu(alt.layer(
        *([spread] if repeated else []), curves.mark_line(strokeWidth=1.5).encode(
            y=_energy_y(task, v["energy_ticks"]), color=by_gpu["color"],
            strokeDash=_deployment_dash(v["deployments"])),
        curves.mark_point(filled=True, size=40).encode(y=_energy_y(task, v["energy_ticks"]), tooltip=tips["curves"],
                                                       **by_gpu)
    ).properties(width=330, height=240), v["gpus"])


def _model_frontier(task: ChartedTask, tips: dict[str, list[Any]], v: dict[str, Any]) -> Any:
    metric = alt.param(name="metric", value=v["metric"], bind=alt.binding_select(
        options=v["metric_options"], labels=v["metric_labels"], name="latency metric: "))
    encoding = {"x": alt.X("latency:Q", scale=alt.Scale(type="log", nice=False, padding=8),
                           title=f"latency ({task.metric.unit}, log scale; metric chosen below)",
                           axis=alt.Axis(values=v["latency_ticks"], format=",~g", labelOverlap=True)),
                "y": _energy_y(task, v["energy_ticks"])}
    by_gpu = _gpu_series(v)
    everything = alt.Chart(alt.Data(name="points")).transform_filter("datum.latency_metric == metric").mark_point(
        size=30, opacity=0.35).encode(tooltip=tips["frontier"], **encoding, **by_gpu)
    best = alt.Chart(alt.Data(name="frontier")).transform_filter("datum.latency_metric == metric").encode(
        **encoding)
    return alt.layer(everything, best.mark_line(color="#333", strokeWidth=1.2).encode(order="latency:Q"),
                     best.mark_point(filled=True, size=80).encode(tooltip=tips["frontier"], **by_gpu)
                     ).add_params(metric).properties(width=640, height=320)


def _model_latency_cost(task: ChartedTask, tips: dict[str, list[Any]], v: dict[str, Any]) -> Any:
    return alt.Chart(alt.Data(name="latency_cost")).mark_line(
        point=alt.OverlayMarkDef(filled=True, size=60), strokeWidth=1.5).encode(
        x=alt.X("latency_limit:O", title=f"latency tier, at most ({task.metric.unit})", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("relative_to_best:Q", title="energy ÷ the GPU's unconstrained best", scale=alt.Scale(zero=False)),
        detail="gpu:N", tooltip=tips["latency-cost"], **_gpu_series(v),
    ).properties(width=220 if len(task.metrics) > 1 else 320, height=200).facet(column=_by_metric(task))


def _model_estimate(task: ChartedTask, tips: dict[str, list[Any]], v: dict[str, Any]) -> Any:
    by_gpu = _gpu_series(v)
    base = alt.Chart(alt.Data(name="estimates")).encode(
        x=alt.X("concurrency:Q", scale=alt.Scale(type="log", nice=False), title=task.concurrency_title,
                axis=alt.Axis(values=v["concurrency_ticks"], format=",~g", labelOverlap=True)),
        detail="deployment:N", color=by_gpu["color"])
    return alt.layer(
        base.mark_area(opacity=0.18).encode(y=_energy_y(task, v["energy_ticks"], "wh_per_unit_low"),
                                            y2="wh_per_unit_high:Q"),
        base.mark_line(strokeWidth=1.5).encode(y=_energy_y(task, v["energy_ticks"]),
                                               strokeDash=_deployment_dash(v["deployments"])),
        base.mark_point(filled=True, size=18).encode(y=_energy_y(task, v["energy_ticks"]), tooltip=tips["estimate"],
                                                     **by_gpu),
    ).properties(width=640, height=300)


def _model_history(task: ChartedTask, tips: dict[str, list[Any]], v: dict[str, Any], width: int) -> Any:
    """A line and points per GPU."""
    base, channels = _history_base(task, v["snapshots"], v["energy_ticks"]), _gpu_series(v)
    return alt.layer(base.mark_line(strokeWidth=1.5).encode(color=channels["color"], detail="gpu:N"),
                     base.mark_point(filled=True, size=60).encode(tooltip=tips["history"], **channels)
                     ).properties(width=width, height=240)


def chart_template(task: ChartedTask, key: tuple[Any, ...], build: Callable[[dict[str, Any]], Any],
                   values: dict[str, Any]) -> dict[str, Any]:
    """The Vega-Lite dict, with slots, of the task's model-page chart `key` (its kind, then what `build` is
    given besides the slots), as `build` (a _model_ function above, or report_fits's) makes it with a slot
    for each of `values`; made by Altair on the first call, kept in the task for the report run. A list's
    slot is a list holding the slot: Altair checks some values as it builds (a parameter's options)."""
    if key not in task.chart_templates:
        chart = build({name: [SLOT + name] if isinstance(value, list) else SLOT + name
                       for name, value in values.items()})
        task.chart_templates[key] = type(chart), chart.to_dict(validate=False)
    return task.chart_templates[key][1]


def filled(template: Any, values: dict[str, Any]) -> Any:
    """A copy of `template` (chart_template's dict, or a part of it) with each slot's value from `values`."""
    if isinstance(template, dict):
        return {key: filled(value, values) for key, value in template.items()}
    if isinstance(template, list):
        if len(template) == 1 and isinstance(template[0], str) and template[0].startswith(SLOT):
            return values[template[0].removeprefix(SLOT)]
        return [filled(value, values) for value in template]
    if isinstance(template, str) and template.startswith(SLOT):
        return values[template.removeprefix(SLOT)]
    return template


def validated(task: ChartedTask, key: tuple[Any, ...], spec: dict[str, Any]) -> dict[str, Any]:
    """`spec`, the task's chart_template `key` filled, checked against Vega-Lite's schema if it is the first
    of its kind (_VALIDATED), as Altair checks a chart it turns into a dict."""
    if key[0] not in _VALIDATED:
        task.chart_templates[key][0].validate(spec)
        _VALIDATED.add(key[0])
    return spec


def task_charts(task: ChartedTask, data: dict[str, list[dict[str, Any]]], models: list[str] | None,
                texts: dict[str, ChartText], one_snapshot: str, styles: dict[str, tuple[str, str]]) -> list[Chart]:
    """The charts of one task: the index page's (`models` lists the task's models in order) or, when
    `models` is None, one model's page's, whose rows `data` holds; `styles`: series_styles of the snapshot.
    The index page's are made by Altair; a model page's are its task's chart templates filled (SLOT)."""
    index_page = models is not None
    page = "index" if index_page else "model"
    gpus = sorted({row["gpu"] for rows in ([data["best"]] if index_page else data.values())
                   for row in rows if "gpu" in row})
    repeated = 0 if index_page else sum(1 for row in data["curves"] if row["n_repeats"] > 1)
    snapshots = [row["snapshot_id"] for row in data["snapshots"]]
    # The chart texts are the same for every model page, so the templates (made with the first page's) hold.
    tips = {name: _tooltip(task, text.tooltip) for name, text in texts.items()}

    def ticks(name: str, *columns: str) -> list[float]:
        return log_ticks(row.get(column) for row in data[name] for column in columns or ("wh_per_unit",))
    charts = []

    def add(name: str, spec: dict[str, Any]) -> None:
        # Data by name: the rows go in after the specification has been checked (checking thousands of
        # inline rows against the Vega-Lite schema took most of a minute).
        spec["datasets"] = {node["data"]["name"]: data[node["data"]["name"]] for node in _nodes(spec)
                            if isinstance(node.get("data"), dict) and "name" in node["data"]}
        text = texts[name]
        answers = text.answers.format(deadline=task.deadline, repeated=(text.repeated if repeated else text.once)
                                      .format(count=repeated))
        if name == "history" and len(snapshots) == 1:
            answers += one_snapshot
        charts.append(Chart(name, text.title, answers, spec))

    def kind(name: str) -> str:
        return f"{page} {task.family} {name} {bool(repeated)}"

    def made(name: str, chart: Any) -> None:
        """An index page's chart, turned into a dict by Altair (checked if the first of its kind)."""
        add(name, chart.to_dict(validate=kind(name) not in _VALIDATED))
        _VALIDATED.add(kind(name))

    def from_template(name: str, build: Callable[..., Any], *fixed: Any, **values: Any) -> None:
        """A model page's chart: the template of `build` (a _model_ function, given `fixed` as well as the
        slots) filled with the page's values."""
        key = (kind(name), *fixed)
        template = chart_template(task, key, lambda v: build(task, tips, v, *fixed), values)
        add(name, validated(task, key, filled(template, values)))

    if index_page:
        # The GPU as a dash where colour is the model's.
        gpu_dash = alt.StrokeDash("gpu:N", title="GPU", scale=alt.Scale(domain=gpus, range=DASHES[:len(gpus)]),
                                  legend=alt.Legend(symbolType="stroke", symbolStrokeWidth=1.5))
        model_axis = alt.Y("model_id:N", title=None, sort=models, axis=alt.Axis(labelLimit=0, labelFontSize=11))
        if data["best"]:
            # A panel per GPU: colour is the model's on this page, and the model is the row.
            made("best", _by_gpu(alt.Chart(alt.Data(name="best")).mark_point(filled=True, size=90, opacity=0.9).encode(
                x=alt.X("wh_per_unit:Q", scale=alt.Scale(type="log", nice=False, padding=10),
                        title=f"{task.unit_title} (log scale)",
                        axis=alt.Axis(values=ticks("best"), format=",~g", labelOverlap=True)),
                y=model_axis, href="href:N", tooltip=tips["best"], color=alt.value(NEUTRAL),
                shape=alt.value("circle")).properties(width=max(200, 520 // max(1, len(gpus))), height=alt.Step(16)),
                gpus))
        if data["curves"]:
            # Small panels, one per model: the model is the panel, the GPU the dash; colour stays the model's
            # meaning on this page, so the lines are neutral.
            made("curves", _curves_base(task, ticks("curves", "batch_limit")).mark_line(
                point=alt.OverlayMarkDef(filled=True, size=22, color=NEUTRAL), strokeWidth=1.2, color=NEUTRAL).encode(
                y=_energy_y(task, ticks("curves"), padding=6, labelOverlap=True), href="href:N",
                tooltip=tips["curves"], strokeDash=gpu_dash).properties(width=235, height=150).facet(
                alt.Facet("model_id:N", title=None, sort=models, header=alt.Header(
                    labelExpr="split(datum.value, '/')[1]", labelFontSize=11, labelLimit=250)), columns=4))
        if data["frontier"]:
            base = alt.Chart(alt.Data(name="frontier")).encode(
                x=alt.X("latency:Q", scale=alt.Scale(type="log", nice=False, padding=8),
                        title=_log(task.metric.title),
                        axis=alt.Axis(values=ticks("frontier", "latency"), format=",~g", labelOverlap=True)),
                y=_energy_y(task, ticks("frontier")))
            made("frontier", _by_gpu(_by_model(base, models, data["frontier"], tips["frontier"], {"strokeWidth": 1.6},
                                               45, styles, order="latency:Q").properties(width=360, height=330), gpus))
        if data["latency_cost"]:
            tiers = sorted({row["latency_limit"] for row in data["latency_cost"]})
            base = alt.Chart(alt.Data(name="latency_cost")).encode(
                x=alt.X("tier:N", title=f"latency tier ({task.metric.unit})",
                        sort=[f"≤ {limit:g}" for limit in tiers], axis=alt.Axis(labelAngle=0, orient="top")),
                y=model_axis)
            cells = base.mark_rect(stroke="white").encode(
                color=alt.Color("relative_to_best:Q", title="energy ÷ unconstrained best",
                                scale=alt.Scale(type="log", scheme="orangered", domainMin=1),
                                legend=alt.Legend(format=".1f", tickCount=4)),
                href="href:N", tooltip=tips["latency-cost"])
            labels = base.mark_text(fontSize=9).encode(
                text=alt.Text("relative_to_best:Q", format=".2f"),
                color=alt.condition("datum.relative_to_best > 2.5", alt.value("white"), alt.value("#222")))
            made("latency-cost", alt.layer(cells, labels).properties(width=alt.Step(38), height=alt.Step(15)).facet(
                column=_by_metric(task), row=alt.Row("gpu:N", title="GPU", sort=gpus, header=alt.Header(
                    labelFontWeight="bold", labelAngle=0, labelAlign="left"))).resolve_scale(x="independent"))
        if data["history"]:
            made("history", _by_gpu(_by_model(_history_base(task, snapshots, ticks("history")), models,
                                              data["history"], tips["history"], {"strokeWidth": 1.4}, 45, styles)
                                    .properties(width=max(220, 34 * len(snapshots)), height=260), gpus))
        return sorted(charts, key=lambda chart: list(texts).index(chart.name))

    on_gpus = gpu_values(gpus, styles)
    if data["curves"]:
        from_template("curves", _model_curves, bool(repeated), **on_gpus, batch_ticks=ticks("curves", "batch_limit"),
                      energy_ticks=ticks("curves", "wh_per_unit", "wh_per_unit_min", "wh_per_unit_max"),
                      deployments=sorted({row["deployment"] for row in data["curves"]}))
    if data["frontier"]:
        shown = {row["latency_metric"] for row in data["frontier"]}
        metrics = [m for m in task.metrics if m.latency_metric in shown]
        from_template("frontier", _model_frontier, **on_gpus, metric=metrics[0].latency_metric,
                      metric_options=[m.latency_metric for m in metrics], metric_labels=[m.title for m in metrics],
                      latency_ticks=ticks("points", "latency"), energy_ticks=ticks("points"))
    if data["latency_cost"]:
        from_template("latency-cost", _model_latency_cost, **on_gpus)
    if data["estimates"]:
        from_template("estimate", _model_estimate, **on_gpus, concurrency_ticks=ticks("estimates", "concurrency"),
                      energy_ticks=ticks("estimates", "wh_per_unit", "wh_per_unit_low", "wh_per_unit_high"),
                      deployments=sorted({row["deployment"] for row in data["estimates"]}))
    if data["history"]:
        # The width is no slot: Altair checks it as it builds the chart.
        from_template("history", _model_history, max(160, 40 * len(snapshots)), **on_gpus, snapshots=snapshots,
                      energy_ticks=ticks("history"))
    return sorted(charts, key=lambda chart: list(texts).index(chart.name))


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every dict inside a specification, depth first."""
    if isinstance(node, dict):
        yield node
    for value in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
        yield from _nodes(value)


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
        # Distinct colours: a range listed per value (a model's colour on every chart) may repeat them.
        if len(values) <= len(set(palette)) or name in identified:
            continue
        if name not in shapes:
            problems.append(f"{name}: {len(values)} values coloured with {len(set(palette))} colours and no other "
                            "channel")
            continue
        pairs = {(palette[index % len(palette)], shapes[name][index % len(shapes[name])])
                 for index in range(len(values))}
        if len(pairs) < len(values):
            problems.append(f"{name}: {len(values)} values but only {len(pairs)} distinct colour and shape pairs")
    return problems
