"""The model pages' fitted curves: each deployment's measured energy per output against the batch limit
(efficiency_curve_points_in of the index snapshot: the points the fits are made from, repeats averaged)
with the logistic of efficiency_curve_fits drawn over them, and each fit's status written out, in the
chart's panel headings and in a table beside it.

SQL reads the rows and samples the fitted curve from the stored parameters (the formula of the macro
energy_from_fit); this module only words the status and lays the chart out. Colour is the page's GPU
colour; a fit not fit for use is drawn grey and thinner (not dashed: on these pages a dash marks a
deployment), and a curve with too few points has no line."""

import math
import textwrap
from typing import Any

import duckdb

from pipeline.charts import (Chart, ChartedTask, ChartText, _gpu_series, _log, alt, ambiguous_encodings, chart_template,
                             filled, gpu_values, log_ticks, validated)
from pipeline.database import fetch_dicts
from pipeline.fits import MAX_IN_SAMPLE_ERROR, MIN_POINTS, SATURATION_FRACTION

# The fitted line is sampled at this many evenly spaced steps of log2(batch limit) across the measured range.
SAMPLES = 48
# Characters a line of a panel's heading holds (185 px and a little more at 10 px type).
HEADING_WIDTH = 36
TITLE_WIDTH = 30
Y_TITLE_WIDTH = 22
UNFIT_COLOUR = "#9a9a9a"
UNFIT_WIDTH = 1.0
# Chart ids end in this, after the task's name: <task>-fits.
CHART = "fits"
TEXT = ChartText(
    title="Fitted curves: the logistic fit over the measured points, one panel per deployment",
    answers="How closely does a smooth curve follow the measured energy per output as the batch limit rises? "
            "Points: the measured batch limits of the index snapshot (repeats averaged); line: the logistic "
            "y = b0 + L·sigmoid(k·(log2 batch limit − x0)) of efficiency_curve_fits, drawn across the measured "
            "range only. In the GPU's colour where the fit is fit for use; thin and grey where it is not; "
            "no line where too few points were measured. Each panel's heading, and the fit table above, say which.",
)


def percent(fraction: float) -> str:
    """A relative error as a reader reads it: 8 %, 0.4 %, 175 % (a no-break space: a heading's line
    never ends before its %)."""
    value = 100 * fraction
    return f"{value:.1f}\u00a0%" if value < 1 else f"{value:,.0f}\u00a0%"


def fit_label(row: dict[str, Any]) -> str:
    """What a fit's status means for its curve, in words, with its largest miss of a measured point."""
    status = row["fit_status"]
    if status == "too few points":
        return f"not fitted: {row['n_points']} measured points, a fit needs {MIN_POINTS}"
    miss = percent(row["in_sample_max_error"])
    if status == "fit for use":
        return f"fit for use, misses a measured point by at most {miss}"
    if status == "not monotone":
        return f"not fit for use: not monotone; misses a measured point by up to {miss}"
    if status == "error above bound":
        return f"not fit for use: misses a measured point by {miss}, above the {percent(MAX_IN_SAMPLE_ERROR)} bound"
    raise ValueError(f"efficiency_curve_fits: unknown fit_status {status!r}")


QUERIES = {
    "fits": """
        select model_id, gpu, {deployment} as deployment, num_gpus, n_points, min_batch_limit, max_batch_limit,
               L, x0, k, b0, in_sample_median_error, in_sample_max_error, leave_one_out_median_error,
               fit_status, is_fit_for_use, settled_value, saturation_batch_limit
        from efficiency_curve_fits
        where snapshot_id = (select snapshot_id from index_snapshot) and task = $task and quantity = 'energy'
        order by model_id, gpu, num_gpus, deployment""",
    "fit_points": """
        select model_id, gpu, {deployment} as deployment, num_gpus, batch_limit, n_repeats, wh_per_unit
        from efficiency_curve_points_in((select snapshot_id from index_snapshot))
        where task = $task
        order by model_id, gpu, num_gpus, deployment, batch_limit""",
    # The formula of energy_from_fit (least(): exp overflows past 709, where the sigmoid is 0 to the last digit).
    "fit_lines": f"""
        with fitted as (
            select model_id, gpu, {{deployment}} as deployment, num_gpus, is_fit_for_use, L, x0, k, b0,
                   log2(min_batch_limit) as low, log2(max_batch_limit) as high
            from efficiency_curve_fits
            where snapshot_id = (select snapshot_id from index_snapshot) and task = $task and quantity = 'energy'
                and L is not null
        )
        select model_id, gpu, deployment, num_gpus, is_fit_for_use, step,
               pow(2, low + step * (high - low) / {SAMPLES}) as batch_limit,
               b0 + L / (1 + exp(least(709, -k * (low + step * (high - low) / {SAMPLES} - x0)))) as fitted_wh_per_unit
        from fitted cross join range(0, {SAMPLES + 1}) as s(step)
        order by model_id, gpu, num_gpus, deployment, step""",
}


def gather(connection: duckdb.DuckDBPyConnection, task: str, deployment: str) -> dict[str, list[dict[str, Any]]]:
    """The rows of the task's fit charts, every model's: the energy fits with their status in words, the
    measured points and the sampled fitted lines, each with its panel (GPU, deployment and status).
    `deployment` is the report's SQL expression of a deployment's label."""
    parameters = {"task": task}
    data = {name: fetch_dicts(connection, query.format(deployment=deployment), parameters)
            for name, query in QUERIES.items()}
    panels = {}
    for row in data["fits"]:
        row["label"] = fit_label(row)
        # The panel's heading, in lines a small panel holds (the chart splits it at "|").
        panels[row["model_id"], row["gpu"], row["deployment"]] = "|".join(
            [*textwrap.wrap(f"{row['gpu']}, {row['deployment']}", HEADING_WIDTH),
             *textwrap.wrap(row["label"], HEADING_WIDTH)])
    for name in ("fits", "fit_points", "fit_lines"):
        for row in data[name]:
            row["panel"] = panels[row["model_id"], row["gpu"], row["deployment"]]
    return data


def _fits_chart(task: ChartedTask, v: dict[str, Any]) -> Any:
    """A model page's fit chart with one panel, from `v` (or chart_template's slots): the page's gpu_values
    and batch_ticks, the panel's rows (panel), heading and energy_ticks."""
    by_gpu = _gpu_series(v, orient="top", direction="horizontal")
    # Titles in lines a small panel holds: a title longer than its axis stretches the panel.
    # Labelled ticks on the log axes (pipeline/charts.py: log_ticks), each panel's own: a panel is a chart
    # of its own (not a facet, whose panels share their ticks) so that a curve within a few per cent of
    # its value is labelled as well as one across a decade.
    x = alt.X("batch_limit:Q", scale=alt.Scale(type="log", nice=False, padding=6),
              title=textwrap.wrap(_log(task.batch_title), TITLE_WIDTH),
              axis=alt.Axis(format=",~g", values=v["batch_ticks"]))
    y = alt.Y("wh_per_unit:Q", scale=alt.Scale(type="log", nice=False, padding=6),
              title=[*textwrap.wrap(task.unit_title, Y_TITLE_WIDTH), "(log scale)"],
              axis=alt.Axis(format=",~g", values=v["energy_ticks"]))
    where = alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("deployment:N", title="deployment")
    base = alt.Chart().transform_filter(alt.FieldEqualPredicate(field="panel", equal=v["panel"]))
    points = base.transform_filter("datum.kind == 'measured'").mark_point(filled=True, size=36, opacity=1).encode(
        x=x, y=y, tooltip=[*where, alt.Tooltip("batch_limit:Q", title=task.batch_title),
                           alt.Tooltip("n_repeats:Q", title="times measured"),
                           alt.Tooltip("wh_per_unit:Q", title=f"energy, mean of the repeats ({task.unit_title})")],
        **by_gpu)
    lines = base.transform_filter("datum.kind == 'fitted'").mark_line().encode(
        x=x, y=alt.Y("fitted_wh_per_unit:Q"),
        color=alt.condition("datum.is_fit_for_use", by_gpu["color"], alt.value(UNFIT_COLOUR)),
        detail="deployment:N",
        strokeWidth=alt.condition("datum.is_fit_for_use", alt.value(1.8), alt.value(UNFIT_WIDTH)),
        tooltip=[*where, alt.Tooltip("batch_limit:Q", title=task.batch_title, format=",.4~g"),
                 alt.Tooltip("fitted_wh_per_unit:Q", title=f"fitted energy ({task.unit_title})", format=",.4~g")])
    panel = alt.layer(lines, points).properties(width=185, height=130, title=alt.TitleParams(
        v["heading"], fontSize=10, fontWeight="normal", anchor="start", limit=0))
    # One dataset at the top, each panel its rows.
    return alt.concat(panel, columns=4, data=alt.Data(name="fit_curves")).resolve_scale(y="independent")


def fit_chart(task: ChartedTask, rows: dict[str, list[dict[str, Any]]],
              styles: dict[str, tuple[str, str]]) -> Chart | None:
    """One model's fitted curves (`rows`: the model's page's rows, gather's among them), a small panel per
    deployment, each GPU in its colour and shape of every chart (`styles`: pipeline/charts.py's
    series_styles); None when the model has no measured curve."""
    if not rows["fits"]:
        return None
    gpus = sorted({row["gpu"] for values in rows.values() for row in values if "gpu" in row})
    panels = list(dict.fromkeys(row["panel"] for row in sorted(
        rows["fits"], key=lambda row: (gpus.index(row["gpu"]), row["num_gpus"], row["deployment"]))))
    page = {**gpu_values(gpus, styles), "batch_ticks": log_ticks(row["batch_limit"] for row in rows["fit_points"])}

    def panel_values(panel: str) -> dict[str, Any]:
        return {"panel": panel, "heading": panel.split("|"), "energy_ticks": _panel_ticks(
            [row["wh_per_unit"] for row in rows["fit_points"] if row["panel"] == panel])}

    # The task's template (pipeline/charts.py: SLOT) has one panel, and the page's chart a copy of it for each
    # of its panels, filled with the panel's values. Made panel by panel by Altair, the fit charts took most
    # of the report's 36 s; 3.5 s with Altair making the first panel of each and a copy of its dict for each
    # other panel (the newest snapshot's 62 fit charts, each checked against the schema); 0.45 s filled.
    key = (f"model {task.family} {CHART}",)
    template = chart_template(task, key, lambda v: _fits_chart(task, v), {**page, **panel_values(panels[0])})
    spec = validated(task, key, {
        name: [filled(part[0], {**page, **panel_values(panel)}) for panel in panels] if name == "concat"
        else filled(part, page) for name, part in template.items()})
    spec["datasets"] = {"fit_curves": [{**row, "kind": "measured"} for row in rows["fit_points"]]
                                      + [{**row, "kind": "fitted"} for row in rows["fit_lines"]]}
    if problems := ambiguous_encodings(spec):
        raise ValueError(f"fit chart would not tell its GPUs apart: {problems}")
    return Chart(CHART, TEXT.title, TEXT.answers, spec)


def _panel_ticks(values: list[float]) -> list[float]:
    """A panel's energy ticks: log_ticks, and where that labels fewer than two values (points within a few
    per cent of each other) the range's ends at three significant digits."""
    ticks = log_ticks(values)
    if len(ticks) >= 2 or not values:
        return ticks
    low, high = min(values), max(values)
    scale = 10.0 ** (math.floor(math.log10(low)) - 2)
    ends = [float(f"{math.ceil(low / scale) * scale:.3g}"), float(f"{math.floor(high / scale) * scale:.3g}")]
    return sorted({*ticks, *(end for end in ends if low <= end <= high)})


FIT_TABLE_TEXT = (
    "Fitted curves: how well each deployment's logistic fit follows its measured points",
    "Whether each deployment's fit (efficiency_curve_fits, energy per output) is fit for use, and if not why, with "
    "its largest miss of a measured point; its median errors at the measured points and at each interior point "
    "left out; and, where it is fit for use, the energy floor and the batch limit beyond which batching saves "
    "little. The floor is blank where the curve heads to zero or below, as no energy can; the batch limit where "
    "the curve does not settle within one doubling of the largest measured batch limit, beyond which nothing "
    "measured constrains it. The chart at the end of the section draws the fits over the points.",
)
TABLE_HEADINGS = ("GPU", "deployment", "measured points", "batch limits measured", "the fit",
                  "in-sample median error (%)", "leave-one-out median error (%)", "energy floor ({unit})",
                  "batch limit beyond which batching saves < {saving}")


def fit_table(task: ChartedTask, rows: list[dict[str, Any]], decimals: int) -> tuple[list[str], list[list[Any]]]:
    """The fit table's headings and cell values, a row per deployment as the chart orders them: the floor
    and the saturation batch limit only where the fit is fit for use (elsewhere they mean nothing), and
    where efficiency_curve_fits gives them (none past its extrapolation bound, no floor at or below zero)."""
    headings = [heading.format(unit=task.unit_title, saving=percent(SATURATION_FRACTION)) for heading in TABLE_HEADINGS]
    values = []
    for row in rows:
        usable = row["is_fit_for_use"]
        values.append([
            row["gpu"], row["deployment"], row["n_points"], f"{row['min_batch_limit']:,} to {row['max_batch_limit']:,}",
            row["label"],
            *(None if row[column] is None else round(100 * row[column], 1)
              for column in ("in_sample_median_error", "leave_one_out_median_error")),
            round(row["settled_value"], decimals) if usable and row["settled_value"] is not None else None,
            round(row["saturation_batch_limit"]) if usable and row["saturation_batch_limit"] is not None else None,
        ])
    return headings, values
