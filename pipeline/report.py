"""energy-index report: OUT/report/index.html, a self-contained page (Vega-Lite with its JavaScript
inlined: no network needed to open it), and one PNG per chart.

Per task: the index table, the efficiency curves, the energy-latency frontier, the latency-tier table
and how each index figure moved across the snapshots in the database. The views compute every
figure; this module only selects them and lays them out. Charts are Altair specifications rendered in
the page by vega-embed and to PNG by vl-convert (both maintained Vega projects).
"""

import html
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from pipeline.database import connect, fetch_dicts
from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.files import replace_directory
from pipeline.paths import Paths
from pipeline.progress import progress

CHART_WIDTH = 560


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    spec: dict[str, Any]


def _chart_specs(task: str, family: str, data: dict[str, list[dict[str, Any]]]) -> list[Chart]:
    import altair as alt

    unit = "Wh per million output tokens" if family == "token" else f"Wh per {'image' if task == 'text-to-image' else 'video'}"
    concurrency = "max_num_seqs (requests in flight cap)" if family == "token" else "batch size"
    latency = "median inter-token latency (ms)" if family == "token" else "batch latency (s)"
    model = alt.Color("model_id:N", title="model", legend=alt.Legend(columns=1, symbolLimit=60))

    def energy_lines(values: list[dict[str, Any]], x: Any, height: int, **encodings: Any) -> Any:
        """Lines with points, energy per output on a log scale, one colour per model."""
        return (
            alt.Chart(alt.Data(values=values))
            .mark_line(point=True)
            .encode(x=x, y=alt.Y("wh_per_unit:Q", scale=alt.Scale(type="log"), title=unit), color=model, **encodings)
            .properties(width=CHART_WIDTH, height=height)
        )

    charts = []
    if data["curves"]:
        curves = energy_lines(
            data["curves"], alt.X("batch_limit:Q", scale=alt.Scale(type="log"), title=concurrency), 260,
            detail="deployment:N",
            tooltip=["model_id:N", "gpu:N", "deployment:N", "batch_limit:Q", "wh_per_unit:Q"],
        ).properties(width=CHART_WIDTH // 2).facet(column=alt.Column("gpu:N", title="GPU"))
        charts.append(Chart("curves", "Efficiency curves: energy per output against the batch limit", curves.to_dict()))
    if data["frontier"]:
        frontier = energy_lines(
            data["frontier"], alt.X("latency:Q", scale=alt.Scale(type="log"), title=latency), 320,
            order="latency:Q", tooltip=["model_id:N", "gpu:N", "row_id:N", "latency:Q", "wh_per_unit:Q"],
        )
        charts.append(Chart("frontier", "Energy-latency frontier per model, across GPUs", frontier.to_dict()))
    if data["history"]:
        history = energy_lines(
            data["history"], alt.X("ordered_at:T", title="upstream commit"), 300,
            strokeDash=alt.StrokeDash("gpu:N", title="GPU"), detail="gpu:N",
            tooltip=["snapshot_id:N", "model_id:N", "gpu:N", "row_id:N", "wh_per_unit:Q"],
        )
        charts.append(Chart("history", "Index figures across the snapshots in the database", history.to_dict()))
    return charts


def _gather(connection: duckdb.DuckDBPyConnection, task: str) -> dict[str, list[dict[str, Any]]]:
    parameters = {"task": task}
    return {
        "index": fetch_dicts(connection, """
            select model_id, gpu, row_id, repeat, wh_per_unit, unit_label
            from best_configurations where task = $task order by wh_per_unit, model_id, gpu""", parameters),
        "curves": fetch_dicts(connection, """
            select model_id, gpu, concat_ws('/', num_gpus, coalesce(precision, ''), tensor_parallel, data_parallel,
                   expert_parallel, ulysses_degree, ring_degree, width, height, num_frames, inference_steps) as deployment,
                   batch_limit, avg(wh_per_unit) as wh_per_unit
            from efficiency_curves where task = $task
            group by all order by model_id, gpu, deployment, batch_limit""", parameters),
        "frontier": fetch_dicts(connection, """
            select model_id, gpu, row_id, latency, wh_per_unit
            from energy_latency_frontier
            where task = $task and scope = 'model' and latency_metric in ('median_itl_ms', 'batch_latency_s')
            order by model_id, latency, wh_per_unit""", parameters),
        "tiers": fetch_dicts(connection, """
            select model_id, gpu, latency_metric, latency_limit, wh_per_unit
            from tiered_best_configurations where task = $task
            order by model_id, gpu, latency_metric, latency_limit""", parameters),
        "history": fetch_dicts(connection, """
            select h.snapshot_id, strftime(s.ordered_at, '%Y-%m-%dT%H:%M:%SZ') as ordered_at, h.model_id, h.gpu,
                   h.row_id, h.wh_per_unit
            from best_configuration_history as h join snapshot_history as s using (snapshot_id)
            where h.task = $task order by s.position, h.model_id, h.gpu""", parameters),
    }


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(row[key]))}</td>" for key, _ in columns) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 10 else f"{value:,.2f}"
    return "" if value is None else str(value)


def _tier_table(rows: list[dict[str, Any]]) -> str:
    """Model × GPU rows, one column per tier of the first latency metric (median ITL or batch latency)."""
    if not rows:
        return "<p>No configuration within any tier.</p>"
    metric = rows[0]["latency_metric"] if rows[0]["latency_metric"] == "batch_latency_s" else "median_itl_ms"
    limits = sorted({row["latency_limit"] for row in rows if row["latency_metric"] == metric})
    cells: dict[tuple[str, str], dict[float, float]] = {}
    for row in rows:
        if row["latency_metric"] == metric:
            cells.setdefault((row["model_id"], row["gpu"]), {})[row["latency_limit"]] = row["wh_per_unit"]
    unit = "ms" if metric.endswith("_ms") else "s"
    columns = [("model_id", "model"), ("gpu", "GPU")] + [(f"limit {limit:g}", f"≤ {limit:g} {unit}") for limit in limits]
    table_rows = [
        {"model_id": model, "gpu": gpu, **{f"limit {limit:g}": values.get(limit) for limit in limits}}
        for (model, gpu), values in sorted(cells.items())
    ]
    return f"<p>Lowest energy per output within each {html.escape(metric)} tier (empty: nothing within it).</p>" + _table(
        table_rows, columns)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>energy-index report: {snapshot}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #222; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.85rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }}
th:first-child, td:first-child, td:nth-child(2) {{ text-align: left; }}
section {{ border-top: 2px solid #444; margin-top: 2rem; }}
.chart {{ margin: 1rem 0 2rem; }}
</style>
<script>{bundle}</script>
</head><body>
<h1>energy-index report</h1>
<p>Index snapshot <b>{snapshot}</b>; {snapshot_count} snapshot(s) in the database. Energy is steady-state
GPU energy per output (token, image or video) from the ML.ENERGY Leaderboard's measurements.</p>
<nav>{nav}</nav>
{sections}
<script>
const charts = {charts};
for (const [id, spec] of Object.entries(charts)) {{
  vegaEmbed("#" + id, spec, {{actions: false, renderer: "svg"}})
    .then(() => document.getElementById(id).dataset.drawn = "true")
    .catch(error => console.error("chart " + id + ": " + error));
}}
</script>
</body></html>
"""


def progress_over(items: list[Any], label: str) -> Any:
    with progress(len(items), label, unit="task") as bar:
        for item in items:
            yield item
            bar.update(1)


def write_report(paths: Paths) -> tuple[Path, int]:
    """Write OUT/report (replaced whole); return its index.html and the number of charts."""
    import vl_convert

    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    with connect(str(paths.database), read_only=True) as connection:
        snapshot = connection.execute("select snapshot_id from index_snapshot").fetchone()[0]
        snapshot_count = connection.execute("select count(*) from snapshots").fetchone()[0]
        tasks = fetch_dicts(connection, """
            select t.task, t.display_name, s.family from task_summaries as s
            join tasks as t on t.snapshot_id = s.snapshot_id and t.task = s.task order by t.task""", {})
        gathered = {task["task"]: _gather(connection, task["task"]) for task in tasks}
    staging = paths.out / f".report-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        specs: dict[str, dict[str, Any]] = {}
        sections = []
        for task in progress_over(tasks, "report: tasks"):
            name, data = task["task"], gathered[task["task"]]
            parts = [f'<section id="{name}"><h2>{html.escape(task["display_name"] or name)} ({name})</h2>',
                     "<h3>Index: the lowest-energy configuration per model and GPU</h3>",
                     _table(data["index"], [("model_id", "model"), ("gpu", "GPU"), ("row_id", "configuration"),
                                            ("wh_per_unit", "Wh per " + (data["index"][0]["unit_label"] if data["index"] else "output"))])]
            for chart in _chart_specs(name, task["family"], data):
                chart_id = f"{name}-{chart.name}"
                specs[chart_id] = chart.spec
                (staging / f"{chart_id}.png").write_bytes(vl_convert.vegalite_to_png(chart.spec, scale=1.5))
                parts.append(f'<h3>{html.escape(chart.title)}</h3><div class="chart" id="{chart_id}"></div>')
            parts.append("<h3>Latency tiers</h3>" + _tier_table(data["tiers"]) + "</section>")
            sections.append("".join(parts))
        nav = " · ".join(f'<a href="#{task["task"]}">{html.escape(task["task"])}</a>' for task in tasks)
        page = PAGE.format(
            snapshot=html.escape(snapshot), snapshot_count=snapshot_count, nav=nav, sections="\n".join(sections),
            charts=json.dumps(specs).replace("</", "<\\/"), bundle=vl_convert.javascript_bundle(),
        )
        (staging / "index.html").write_text(page, encoding="utf-8")
        replace_directory(staging, paths.out / "report")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths.out / "report" / "index.html", len(specs)
