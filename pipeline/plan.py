"""energy-index plan: how many GPUs of each kind serve a daily volume of a model within a latency limit, and
what they draw, from the table macro fleet_plan (sql/macros/fleet_plan.sql), which computes every figure;
this module asks it, names the data and formats the macro's rows (the command line checks the numbers)."""

from typing import Any

from pipeline.database import fetch_dicts
from pipeline.errors import PipelineError
from pipeline.paths import Paths
from pipeline.query import NO_BOUNDARY_FACTORS, TOKEN_UNIT_LABEL, resolve_question, session, snapshot_label
from pipeline.settings import BOUNDARIES

# A demand option -> the unit_label of the tasks it applies to, and what one output is called.
DEMANDS = {
    "tokens_per_day": (TOKEN_UNIT_LABEL, "output tokens"),
    "requests_per_second": (TOKEN_UNIT_LABEL, "output tokens"),
    "images_per_day": ("image", "images"),
    "videos_per_day": ("video", "videos"),
}
# A latency option -> the family of the tasks it applies to and its unit.
LATENCIES = {"median_itl_ms": ("token", "ms"), "p90_itl_ms": ("token", "ms"), "p99_itl_ms": ("token", "ms"),
             "batch_latency_s": ("diffusion", "s")}
# The most GPUs a plan may need: ten times the largest AI clusters announced (about a million GPUs). A
# volume whose every plan needs more is a slip of the exponent, not a fleet.
MAX_FLEET_GPUS = 10_000_000

METHOD = (
    "Per GPU, among the measured configurations whose latency metric (the mean of their repeats) is at most the "
    "limit: replicas = ceil(demand ÷ (86,400 s × the configuration's measured throughput)), GPUs = replicas × the "
    "configuration's GPUs; each replica carries load fraction u = demand ÷ (replicas × 86,400 × throughput) at "
    "concurrency u × its measured concurrency (Little's law at the measured time per request: requests finish "
    "sooner at a lower load, so the concurrency is if anything lower). Energy per output "
    "there: the deployment's measured curve, interpolated as energy_at_concurrency does (linear in log "
    "concurrency, never extrapolated), held between the configuration's own full-load figure and every replica "
    "drawing its measured power. The plan is the configuration with the lowest such energy (then fewer GPUs). "
    "kWh a day = demand × that energy; power = kWh a day ÷ 24 h; low, central and high from the GPU's boundary "
    "factors (no repeat spread). The SQL table macro fleet_plan gives the same rows."
)
NO_PLAN = {"no configuration within the limit": "no configuration within the limit",
           "below the measured range": "each replica's load is below the lowest concurrency measured for the "
                                       "deployment; the curve gives no figure there",
           "no boundary factors": f"no boundary factors for the GPU: {NO_BOUNDARY_FACTORS}"}
LEVELS = ("low", "central", "high")
DOCUMENT_COLUMNS = {"task", "model_id", "slug", "unit_label", "units_per_day", "requests_per_second",
                    "mean_output_tokens", "latency_metric", "latency_limit_ms", "latency_limit_s", "carbon_intensity",
                    "boundary_position", "lowest_latency_ms", "lowest_latency_s"}
# fleet_plan's rows without its checks of the names (fleet_plan_unchecked): plan() resolves them itself.
QUERY = ("select * from fleet_plan_unchecked($task, $model, $outputs_per_day, $metric, $limit, gpu_name := $gpu, "
         "requests_per_second := $requests_per_second, carbon_intensity := $carbon_intensity)")


class BeyondAnyFleet(PipelineError):
    """A demand whose smallest plan needs more GPUs than any fleet: a value beyond its option's range that
    only the data shows (the command reports it as a usage error, as it does a demand beyond
    settings.MOST_OUTPUTS_PER_DAY)."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"{option}: {reason}")
        self.option, self.reason = option, reason


def option_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def plan(paths: Paths, task: str, model: str, demand: str, volume: float, metric: str, limit: float,
         gpu: str | None = None, boundary: str | None = None, carbon_intensity: float | None = None) -> dict[str, Any]:
    """The fleet_plan macro's rows for one question as one document naming the snapshot and upstream commit:
    `volume` of the `demand` (DEMANDS) a day or a second, at most `limit` of the latency `metric`
    (LATENCIES); `boundary` None for all three. The numbers are the command line's, checked there (positive,
    finite, within settings.MOST_OUTPUTS_PER_DAY). A demand or latency of another task family, and a volume
    whose smallest plan needs more than MAX_FLEET_GPUS (BeyondAnyFleet), are refused naming the option; task,
    model and GPU may be written loosely."""
    asked: dict[str, Any] = {"task": task, "model": model, "gpu": gpu, "metric": metric, "limit": limit,
                             "outputs_per_day": None if demand == "requests_per_second" else volume,
                             "requests_per_second": volume if demand == "requests_per_second" else None,
                             "carbon_intensity": carbon_intensity}
    with session(paths) as (connection, _):
        (snapshot,) = fetch_dicts(connection, "select s.snapshot_id, s.commit from snapshots as s"
                                  " join index_snapshot using (snapshot_id)", {})
        # Names as the index snapshot spells them give rows; with none, the names are resolved against what
        # it measured (loosely written, or refused naming the nearest) and asked again. fleet_plan's checks
        # of every name in SQL cost about a third of the query.
        if not (rows := fetch_dicts(connection, QUERY, asked)):
            measured = fetch_dicts(connection, "select distinct task, model_id, slug, gpu from unified_configurations "
                                   "where in_index_snapshot", {})
            task, model, gpu = resolve_question(measured, task, model, gpu)
            rows = fetch_dicts(connection, QUERY, asked | {"task": task, "model": model, "gpu": gpu})
    if not rows:  # not expected: resolve_question refuses a model not measured for the task or on the GPU
        raise PipelineError(f"no measured configuration of {model} for {task}")
    unit_label = rows[0]["unit_label"]
    family = "token" if unit_label == TOKEN_UNIT_LABEL else "diffusion"
    if LATENCIES[metric][0] != family:
        fitting = [option_name(name) for name, (kind, _) in LATENCIES.items() if kind == family]
        raise PipelineError(f"{option_name(metric)} does not apply to {rows[0]['task']}; give {' or '.join(fitting)}")
    if DEMANDS[demand][0] != unit_label:
        fitting = [option_name(name) for name, (label, _) in DEMANDS.items() if label == unit_label]
        raise PipelineError(f"{option_name(demand)} does not apply to {rows[0]['task']}, whose figures are per "
                            f"{unit_label}; give {' or '.join(fitting)}")
    planned = [row for row in rows if row["replicas"] is not None]
    if planned and (fewest := min(row["gpus"] for row in planned)) > MAX_FLEET_GPUS:
        raise BeyondAnyFleet(option_name(demand), f"{volume:g} is beyond any sensible fleet (the smallest plan "
                             f"needs {fewest:,} GPUs, more than {MAX_FLEET_GPUS:,})")
    return _document(rows, snapshot, demand, boundary)


def _nested(row: dict[str, Any]) -> dict[str, Any]:
    """A macro row as a plan: the columns the document holds once left out, each X_low, X_central, X_high
    as X: {low, central, high} (absent where all are null: no carbon intensity given)."""
    plan = {}
    for key, value in row.items():
        base, _, level = key.rpartition("_")
        if key in DOCUMENT_COLUMNS or key == "plan_status":
            continue
        if level in LEVELS:
            if any(row[f"{base}_{other}"] is not None for other in LEVELS):
                plan.setdefault(base, {})[level] = value
            continue
        plan[key] = value
    return plan


def _document(rows: list[dict[str, Any]], snapshot: dict[str, Any], demand: str,
              boundary: str | None) -> dict[str, Any]:
    first = rows[0]
    boundaries = BOUNDARIES if boundary is None else (boundary,)
    chosen = [row for row in rows if row["boundary"] in boundaries]
    without: dict[str, dict[str, Any]] = {}
    for row in chosen:  # a GPU's first boundary, the narrowest asked, gives the bounds of a plan without a figure
        if row["plan_status"] != "planned":
            without.setdefault(row["gpu"], row)
    unit_label, latency_unit = first["unit_label"], LATENCIES[first["latency_metric"]][1]
    return {
        "task": first["task"], "model_id": first["model_id"],
        "snapshot_id": snapshot["snapshot_id"], "commit": snapshot["commit"],
        "unit": f"Wh per {unit_label}",
        "demand": {"per_day": first["units_per_day"], "unit": DEMANDS[demand][1] + " a day",
                   "requests_per_second": first["requests_per_second"],
                   "mean_output_tokens": first["mean_output_tokens"] if demand == "requests_per_second" else None},
        "latency_limit": {"metric": first["latency_metric"], "limit": first[f"latency_limit_{latency_unit}"],
                          "unit": latency_unit},
        "carbon_intensity_g_per_kwh": first["carbon_intensity"],
        "boundaries": list(boundaries),
        "method": METHOD,
        "plans": [_nested(row) for row in chosen if row["plan_status"] == "planned"],
        "without_plan": [{"gpu": gpu, "boundary": row["boundary"], "reason": NO_PLAN[row["plan_status"]],
                          "lowest_latency": row[f"lowest_latency_{latency_unit}"],
                          **({} if row["plan_status"] != "below the measured range" else {
                              "replicas": row["replicas"], "gpus": row["gpus"], "row_id": row["row_id"],
                              "kwh_per_day_bounds": {"full_load": row["full_load_kwh_per_day"],
                                                     "measured_power": row["measured_power_kwh_per_day"],
                                                     "boundary": row["boundary"]}})}
                         for gpu, row in without.items()],
    }


def _figure(value: float) -> str:
    """A figure to four significant digits, thousands separated, never in exponent form below 10^15."""
    return f"{value:,.0f}" if value >= 1e4 else f"{value:.4g}"


def _range(figures: dict[str, float]) -> str:
    """' (range low to high)' from the boundary factors; nothing where they give none (gpu_only)."""
    low, high = _figure(figures["low"]), _figure(figures["high"])
    return "" if low == high else f" (range {low} to {high})"


def _factors(plans: list[dict[str, Any]]) -> str:
    """The boundary's factors the plans were multiplied by: one figure and range where every GPU has the same,
    else each GPU's (a factor derived from a GPU's rated power differs from GPU to GPU)."""
    def factor(plan: dict[str, Any]) -> str:
        factors = plan["boundary_factor"]
        return f"{factors['central']:.3g}, range {factors['low']:.3g} to {factors['high']:.3g}"

    each = {plan["gpu"]: factor(plan) for plan in plans}
    if len(set(each.values())) == 1:
        return next(iter(each.values()))
    return "each GPU's factor: " + "; ".join(f"{gpu} {text}" for gpu, text in sorted(each.items()))


def _count(value: float, word: str) -> str:
    """'1 GPU', '12 GPUs': a whole count and its noun."""
    return f"{value:,.0f} {word}{'' if value == 1 else 's'}"


def text_lines(result: dict[str, Any]) -> list[str]:
    """A plan document as text lines: per boundary, each GPU's plan, lowest energy first, and which needs the
    fewest GPUs; then the GPUs without a plan and why; the data and the method."""
    demand, limit = result["demand"], result["latency_limit"]
    per_second = (f" ({demand['requests_per_second']:g} requests a second × {demand['mean_output_tokens']:,.1f} "
                  "measured mean output tokens × 86,400 s)" if demand["requests_per_second"] else "")
    lines = [f"{result['model_id']}, {result['task']}: {_figure(demand['per_day'])} {demand['unit']}{per_second}, "
             f"{limit['metric']} ≤ {limit['limit']:g} {limit['unit']}:"]
    unit = result["unit"].removeprefix("Wh per ")
    output = {"output tokens a day": "tokens", "images a day": "images", "videos a day": "videos"}[demand["unit"]]
    for boundary in result["boundaries"]:
        plans = [plan for plan in result["plans"] if plan["boundary"] == boundary]
        if not plans:
            continue
        lines.append(f"  {boundary} boundary" + (" (as measured):" if boundary == "gpu_only" else
                     f" (GPU energy × {_factors(plans)}; assumed factors from the cited sources in boundary_factors, "
                     "not measured):"))
        for plan in plans:
            kwh, kw = plan["kwh_per_day"], plan["power_kw"]
            carbon = plan.get("gco2e_per_day")
            lines.append(
                f"    {plan['energy_rank']}. {plan['gpu']}: {_count(plan['replicas'], 'replica')} × "
                f"{_count(plan['num_gpus'], 'GPU')} = {_count(plan['gpus'], 'GPU')} of {plan['row_id']} "
                f"({limit['metric']} {plan['latency_' + limit['unit']]:.4g} {limit['unit']}; each replica at "
                f"{plan['load_fraction']:.1%} of its measured {_figure(plan['units_per_second'])} {output}/s)")
            lines.append(
                f"       {_figure(kwh['central'])} kWh a day{_range(kwh)}, {_figure(kw['central'])} kW on average"
                f"{_range(kw)}, "
                f"{plan['wh_per_unit']:.4g} Wh per {unit} at that load ({plan['method']})"
                + ("" if carbon is None else f"; {_figure(carbon['central'] / 1000)} kg CO2e a day"
                   f"{_range({level: carbon[level] / 1000 for level in LEVELS})}"))
        fewest = next(plan for plan in plans if plan["is_fewest_gpus"])
        lines.append("    fewest GPUs: " + (f"the lowest-energy plan ({_count(fewest['gpus'], 'GPU')})"
                                             if fewest is plans[0] else
                     f"{fewest['gpu']}, {_count(fewest['gpus'], 'GPU')}, {_figure(fewest['kwh_per_day']['central'])} "
                     "kWh a day"))
    for row in result["without_plan"]:
        where, detail = "", ""
        if row["reason"] == NO_PLAN["no configuration within the limit"]:
            detail = f" (the lowest {limit['metric']} measured there: {row['lowest_latency']:.4g} {limit['unit']})"
        elif row["reason"] == NO_PLAN["no boundary factors"]:
            where = f" at the {row['boundary']} boundary"
        else:  # below the measured range: the replicas and what bounds their energy
            bounds = row["kwh_per_day_bounds"]
            detail = (f"; {_count(row['replicas'], 'replica')}, {_count(row['gpus'], 'GPU')} of {row['row_id']} would "
                      f"use between {_figure(bounds['full_load'])} and {_figure(bounds['measured_power'])} kWh a day "
                      f"at the {row['boundary']} boundary")
        lines.append(f"  no plan on {row['gpu']}{where}: {row['reason']}{detail}")
    if not result["plans"]:
        lines.append("  no GPU has a plan within the limit")
    if result["carbon_intensity_g_per_kwh"] is not None:
        lines.append(f"  carbon: {result['carbon_intensity_g_per_kwh']:g} gCO2e per kWh (your grid intensity); "
                     "embodied emissions are not included")
    lines.append(f"  data: {snapshot_label(result)}")
    lines.append(f"  method: {result['method']}")
    return lines
