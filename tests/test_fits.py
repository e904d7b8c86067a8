"""Fitted curves: efficiency_curve_fits against the leaderboard toolkit's own LogisticModel (PyPI
mlenergy-data) on points re-derived from the raw JSON of the newest snapshot, the leave-one-out errors
and flags re-derived independently, `estimate --method fit`, a rebuild that refits nothing, and the grid
search's shortcuts: its candidates as a partition of every error finds them, and a curve's rows whatever
is fitted with it."""

import itertools
import json
import math
import re
import statistics
from collections import defaultdict
from typing import Any

import duckdb
import numpy as np
import pytest

from pipeline.build import build
from pipeline.cli import main
from conftest import NEWEST, copy_build, read_json, snapshot_id



@pytest.fixture(scope="module")
def LogisticModel() -> Any:  # noqa: N802 - the toolkit's class, under its own name
    """The reference: the leaderboard toolkit's own fit (PyPI mlenergy-data, in the interop extra)."""
    return pytest.importorskip("mlenergy.data.modeling").LogisticModel

TOKEN_TASKS = ("gpqa", "lm-arena-chat", "sourcegraph-fim", "image-chat", "video-chat")
# The raw fields each token quantity is read from, and how the figure is made from it.
RAW = {
    "energy": lambda row: row["energy_per_token_joules"] * 1e6 / 3600,  # J per token -> Wh per million tokens
    "gpu_power": lambda row: row["avg_power_watts"],
    "throughput": lambda row: row["output_throughput_tokens_per_sec"],
    "median_itl": lambda row: row["median_itl_ms"],
}
DEPLOYMENT = ("model_id", "gpu", "num_gpus", "tensor_parallel", "data_parallel", "expert_parallel")


def raw_curves() -> dict[tuple, dict[str, Any]]:
    """Each token deployment's points from the task files: per max_num_seqs, each quantity's mean over the
    repeats. Keyed by task, the deployment and the batch limits (precision is left to the batch limits and
    values to tell apart, so that nothing of the pipeline's labelling is reused)."""
    grouped: dict[tuple, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for task in TOKEN_TASKS:
        for row in read_json(NEWEST / "tasks" / f"{task}.json")["configurations"]:
            key = (task, row["model_id"], row["gpu_model"], row["num_gpus"], row["tensor_parallel"],
                   row["data_parallel"], row["expert_parallel"], row["weight_precision"])
            grouped[key][row["max_num_seqs"]].append(row)
    curves = {}
    for key, by_batch in grouped.items():
        batches = sorted(by_batch)
        curves[(*key[:-1], tuple(batches))] = {
            quantity: np.array([statistics.fmean(read(row) for row in by_batch[b]) for b in batches])
            for quantity, read in RAW.items()
        } | {"x": np.log2(batches)}
    return curves


@pytest.fixture(scope="module")
def fits(newest_build) -> list[dict[str, Any]]:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        cursor = connection.execute("select * from efficiency_curve_fits where family = 'token'")
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def matching_curve(fit: dict[str, Any], curves: dict[tuple, dict[str, Any]]) -> dict[str, Any]:
    """The raw curve of the fit's deployment: same task, deployment and batch limits, and (where two
    precisions share those) the same measured values as the fit's in-sample error implies."""
    candidates = [curve for key, curve in curves.items()
                  if key[:7] == (fit["task"], *(fit[name] for name in DEPLOYMENT))
                  and key[7][0] == fit["min_batch_limit"] and key[7][-1] == fit["max_batch_limit"]
                  and len(key[7]) == fit["n_points"]]
    assert candidates, f"no raw curve for {fit}"
    if len(candidates) == 1 or fit["L"] is None:
        return candidates[0]
    errors = [np.max(np.abs(predict(fit, curve["x"]) - curve[fit["quantity"]]) / np.abs(curve[fit["quantity"]]))
              for curve in candidates]
    return candidates[int(np.argmin(np.abs(np.array(errors) - fit["in_sample_max_error"])))]


def predict(fit: dict[str, Any], x: np.ndarray) -> np.ndarray:
    return fit["b0"] + fit["L"] / (1 + np.exp(-fit["k"] * (np.asarray(x) - fit["x0"])))


def test_every_token_deployment_is_fitted_for_every_quantity(fits, newest_build):
    curves = raw_curves()
    assert len(fits) == len(curves) * len(RAW)
    assert sorted({fit["quantity"] for fit in fits}) == sorted(RAW)
    fitted = [fit for fit in fits if fit["quantity"] == "energy" and fit["L"] is not None]
    # The count for this snapshot: 94 token deployments with at least five points.
    assert len(fitted) == sum(len(curve["x"]) >= 5 for curve in curves.values()) == 94


def sample(fits: list[dict[str, Any]], every: int) -> list[dict[str, Any]]:
    """Every `every`-th fitted row, so the default run compares a spread of curves (the toolkit's own fit
    takes some 0.1 s a curve); the slow run compares them all."""
    fitted = sorted((fit for fit in fits if fit["L"] is not None),
                    key=lambda fit: (fit["task"], fit["model_id"], fit["gpu"], fit["num_gpus"], fit["quantity"]))
    return fitted[::every]


# The toolkit's sigmoid overflows np.exp on steep grid points (harmlessly: 1 / inf is 0); it warns each time.
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("every", [pytest.param(24, id="a 24th"), pytest.param(1, id="all", marks=pytest.mark.slow)])
def test_fits_equal_the_toolkits_on_the_raw_points(fits, every, LogisticModel):
    """Predictions as mlenergy-data's LogisticModel.fit gives them on the same points, within the
    documented tolerance of 1 % at every measured point."""
    curves = raw_curves()
    compared = 0
    for fit in sample(fits, every):
        curve = matching_curve(fit, curves)
        x, y = curve["x"], curve[fit["quantity"]]
        reference = LogisticModel.fit(x, y)
        theirs = np.array([reference.eval_x(value) for value in x])
        assert np.max(np.abs(predict(fit, x) - theirs) / np.abs(theirs)) <= 0.01, fit
        # The same grid searched: no worse a least-squares point than the toolkit's, to the closed form's
        # digits (a step-like curve can tie between grid points, so the parameters are not compared).
        assert np.mean((predict(fit, x) - y) ** 2) <= np.mean((theirs - y) ** 2) * (1 + 1e-6), fit
        compared += 1
    assert compared == len(range(0, 94 * len(RAW), every))


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("every", [pytest.param(24, id="a 24th"), pytest.param(1, id="all", marks=pytest.mark.slow)])
def test_errors_and_flags_rederived(fits, every, LogisticModel):
    curves = raw_curves()
    fitted = agreeing = 0
    unfitted = [fit for fit in fits if fit["L"] is None] if every == 1 else []
    for fit in [*sample(fits, every), *unfitted]:
        curve = matching_curve(fit, curves)
        x, y = curve["x"], curve[fit["quantity"]]
        steps = np.diff(y)
        monotone = bool((steps >= 0).all() or (steps <= 0).all())
        assert fit["is_monotone"] == monotone
        if len(x) < 5:
            assert fit["fit_status"] == "too few points" and fit["L"] is None
            continue
        in_sample = np.abs(predict(fit, x) - y) / np.abs(y)
        assert fit["in_sample_max_error"] == pytest.approx(in_sample.max(), rel=1e-9)
        assert fit["in_sample_median_error"] == pytest.approx(np.median(in_sample), rel=1e-9)
        expected = ("not monotone" if not monotone else "error above bound" if in_sample.max() > 0.10
                    else "fit for use")
        assert fit["fit_status"] == expected and fit["is_fit_for_use"] == (expected == "fit for use")
        # Leave-one-out: each interior point predicted by the toolkit's fit to the other points.
        left_out = []
        for i in range(1, len(x) - 1):
            model = LogisticModel.fit(np.delete(x, i), np.delete(y, i))
            left_out.append(abs(model.eval_x(x[i]) - y[i]) / abs(y[i]))
        fitted += 1
        agreeing += (fit["leave_one_out_median_error"], fit["leave_one_out_max_error"]) == pytest.approx(
            (statistics.median(left_out), max(left_out)), rel=1e-6)
    # Where the other points make the curve a step between two of them, grid points whose steps fall
    # anywhere between those points tie to the last digit, and a left-out point between them is predicted
    # by whichever the rounding of each implementation picks (docs/fits.md): 18 of the 376 curves here.
    assert fitted == len(range(0, 94 * len(RAW), every)) and agreeing >= 0.9 * fitted, (agreeing, fitted)


def test_settled_value_and_saturation(fits):
    found = {"settles": 0, "no floor": 0, "beyond the bound": 0}
    for fit in fits:
        if fit["L"] is None:
            continue
        far = fit["b0"] + fit["L"] if fit["k"] > 0 else fit["b0"]
        batch = fit["saturation_batch_limit"]
        if far <= 0:
            # Every quantity is positive: a curve heading to zero or below has no floor and does not settle.
            assert fit["settled_value"] is None and batch is None
            found["no floor"] += 1
            continue
        assert fit["settled_value"] == pytest.approx(far)
        # Read no further than one doubling past the largest measured batch limit, as energy_from_fit is.
        bound = 2 * fit["max_batch_limit"]
        if batch is None:
            value = predict(fit, math.log2(bound))
            assert abs(far - value) > 0.05 * abs(value)
            found["beyond the bound"] += 1
        elif batch > 1:
            value = predict(fit, math.log2(batch))
            # At the saturation batch limit what further batching can still move is 5 % of the value there.
            assert abs(far - value) == pytest.approx(0.05 * abs(value), rel=1e-6)
            assert batch <= bound
            found["settles"] += 1
    assert found["settles"] > 50 and found["beyond the bound"] > 50 and found["no floor"] >= 1, found


def test_the_fit_is_read_no_further_than_energy_from_fit_reads_it():
    from pipeline.fits import EXTRAPOLATION_DOUBLINGS
    from pipeline.paths import SQL_DIR

    macro = (SQL_DIR / "macros" / "energy_from_fit.sql").read_text(encoding="utf-8")
    bounds = re.findall(r"doublings_outside (?:>|<=) (\d+)", macro)
    assert bounds and {int(bound) for bound in bounds} == {EXTRAPOLATION_DOUBLINGS}
    # The words that tell readers the bound (a KeyError here: the bound changed, say it anew).
    words = {1: "one doubling"}[EXTRAPOLATION_DOUBLINGS]
    for path in (SQL_DIR.parent / "docs" / "fits.md", SQL_DIR.parent / "schemas" / "dictionary.toml",
                 SQL_DIR.parent / "pipeline" / "report_fits.py", SQL_DIR.parent / "pipeline" / "query.py"):
        assert words in path.read_text(encoding="utf-8"), path


def test_estimate_says_how_far_it_extrapolates_and_what_its_range_spans(newest_build, capsys):
    def ask(*extra: str) -> str:
        code = main(["estimate", "--out", str(newest_build.out), "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                     "--gpu", "B200", *extra])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    # Its one deployment was measured up to batch limit 1,536: twice that is one doubling outside.
    text = ask("--concurrency", "3072", "--method", "fit")
    assert "extrapolated above the measured batch limits, 1 doubling outside" in text
    assert "range at the gpu_only boundary: " in text and ", no spread (the lowest fitted figure" in text
    assert "doublings outside" not in text
    spans = {method: json.loads(ask("--concurrency", "256", "--method", method, "--format", "json"))["range"]["spans"]
             for method in ("fit", "interpolation")}
    assert "a fit has no repeats" in spans["fit"] and "repeat" in spans["interpolation"] and spans["fit"] != spans[
        "interpolation"]


def test_the_saturation_in_closed_form_is_the_root_a_root_finder_finds():
    from scipy.optimize import brentq
    from scipy.special import expit

    from pipeline.fits import SATURATION_FRACTION, saturation_x

    up_to = 20.0

    def excess(x: float, L: float, x0: float, k: float, b0: float) -> float:
        settled = b0 + L if k > 0 else b0
        value = b0 + L * expit(k * (x - x0))
        return abs(settled - value) - SATURATION_FRACTION * abs(value)

    rng = np.random.default_rng(7)
    found = {"root": 0, "none": 0, "zero": 0, "no floor": 0}
    # Curves of either direction and sign, some crossing zero (the value's sign changes along them).
    for curve in zip(rng.normal(0, 100, 3000), rng.uniform(-5, 25, 3000),
                     rng.choice([-1, 1], 3000) * np.logspace(-2, 2, 3000), rng.normal(0, 100, 3000)):
        L, _, k, b0 = curve
        x = saturation_x(*curve, up_to)
        if (b0 + L if k > 0 else b0) <= 0:
            assert x is None  # it falls through zero: no floor to settle at
            found["no floor"] += 1
        elif x is None:
            assert excess(up_to, *curve) > 0
            found["none"] += 1
        elif x == 0:
            assert excess(0.0, *curve) <= 0
            found["zero"] += 1
        else:
            assert x == pytest.approx(brentq(excess, 0.0, up_to, args=curve, xtol=1e-12), abs=1e-9)
            found["root"] += 1
    assert min(found.values()) > 100, found
    # Where |L| is within a few ulps of the fraction of the value the curve starts from, the root's u
    # rounds to 1 or above: the answer is still a batch limit (or None), never NaN.
    for L, k, ulps, x0 in itertools.product((1.0496, -1.0496, 0.7, -0.7), (100.0, -43.1, 3.0, -3.0), range(-5, 6),
                                            (1.0, 10.0, 12.1)):
        start = abs(L) / SATURATION_FRACTION
        for _ in range(abs(ulps)):
            start = math.nextafter(start, 0.0 if ulps > 0 else math.inf)
        curve = (L, x0, k, start if k > 0 else start - L)
        x = saturation_x(*curve, up_to)
        assert x is None or 0 <= x <= up_to, (curve, x)


def test_estimate_by_fit(fits, newest_build, capsys):
    from pipeline.query import estimate

    usable = next(fit for fit in fits if fit["quantity"] == "energy" and fit["is_fit_for_use"]
                  and fit["task"] == "lm-arena-chat")

    def ask(batch: float) -> dict[str, Any]:
        result = estimate(newest_build, usable["task"], usable["model_id"], usable["gpu"], batch, usable["num_gpus"],
                          usable["precision"], method="fit")
        (row,) = [row for row in result["deployments"] if row["tensor_parallel"] == usable["tensor_parallel"]]
        return row

    inside = math.sqrt(usable["min_batch_limit"] * usable["max_batch_limit"])
    row = ask(inside)
    assert row["wh_per_unit"] == pytest.approx(float(predict(usable, math.log2(inside))), rel=1e-12)
    assert row["method"] == "within the measured batch limits" and row["doublings_outside"] == 0
    row = ask(usable["max_batch_limit"] * 1.5)
    assert row["method"] == "extrapolated above the measured batch limits"
    assert row["doublings_outside"] == pytest.approx(math.log2(1.5))
    assert row["wh_per_unit"] == pytest.approx(float(predict(usable, math.log2(usable["max_batch_limit"] * 1.5))))
    row = ask(usable["min_batch_limit"] / 2.5)
    assert row["wh_per_unit"] is None and row["method"].startswith("no figure: more than one doubling")
    # The default method is the interpolation, untouched by the fits.
    default = estimate(newest_build, usable["task"], usable["model_id"], usable["gpu"], 100, None, None)
    assert default["method"].startswith("linear in log concurrency")
    unfit = next(fit for fit in fits if fit["quantity"] == "energy" and fit["fit_status"] == "error above bound")
    assert main(["estimate", "--out", str(newest_build.out), "--task", unfit["task"], "--model", unfit["model_id"],
                 "--gpu", unfit["gpu"], "--concurrency", str(unfit["max_batch_limit"]), "--method", "fit"]) == 0
    printed = capsys.readouterr().out
    assert "from the logistic fits" in printed and "no figure: error above bound" in printed


def test_a_rebuild_refits_nothing(tmp_path, plain_build):
    from pipeline.paths import Paths

    paths = Paths(copy_build(plain_build, tmp_path / "out"))  # a refresh of the newest snapshot, as published
    stored = paths.parquet_path("efficiency_curve_fits", snapshot_id(NEWEST))
    before = stored.stat()
    build(paths, 500.0, full=True)
    after = stored.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_the_fits_page_states_what_the_build_measures(newest_build):
    from pipeline import docs

    assert docs.stale(docs.DOCS / "fits.md", newest_build.out) == "", "docs/fits.md is stale: run 'make docs'"


def test_the_candidates_are_the_set_a_partition_of_every_error_finds():
    """The block search keeps the CANDIDATES least errors np.argpartition keeps, ties included (which of
    equal errors a partition keeps is its own affair, so those rows are partitioned whole)."""
    from pipeline.fits import CANDIDATES, GRID, _best_grid_points

    rng = np.random.default_rng(39)
    # Distinct errors, then errors of a few values only (every candidate set has ties at its edge), then
    # a NaN among them.
    explained = np.concatenate([rng.random((40, GRID)), rng.integers(0, 5, (40, GRID)) * 0.25,
                                rng.integers(0, 400, (40, GRID)) * 1e-3])
    explained[-1, 7] = np.nan
    total = rng.random(len(explained)) + 2.0
    found = _best_grid_points(explained, total)
    plain = np.sort(np.argpartition(total[:, None] - explained, CANDIDATES - 1, axis=1)[:, :CANDIDATES], axis=1)
    assert np.array_equal(found, plain)


def test_a_curves_fit_does_not_depend_on_the_curves_fitted_with_it(newest_build):
    """A deployment's rows are the same bits whether it is fitted with the whole snapshot, with a few
    others, or beside copies of itself (a repeated series is fitted once and its result reused)."""
    import pyarrow
    import pyarrow.compute as pc

    from pipeline.fits import fit_curves

    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        points = connection.sql("select * from efficiency_curve_points_in((select snapshot_id from index_snapshot)) "
                                "order by all").to_arrow_table()
    whole = fit_curves(points)
    models = sorted(set(points["model_id"].to_pylist()))[::5]
    forget_fits()
    some = fit_curves(points.filter(pc.is_in(points["model_id"], pyarrow.array(models))))
    assert some.num_rows and some.equals(whole.filter(pc.is_in(whole["model_id"], pyarrow.array(models))))
    copy = points.set_column(points.schema.get_field_index("model_id"), "model_id",
                             pc.binary_join_element_wise(points["model_id"], "#copy", ""))
    forget_fits()
    twice = fit_curves(pyarrow.concat_tables([points, copy]))
    assert twice.filter(pc.invert(pc.ends_with(twice["model_id"], "#copy"))).equals(whole)



def _same_bits(one: Any, other: Any) -> bool:
    """Two tables equal, and their float columns the same bits (a -0.0 is not a 0.0, a NaN is where it was)."""
    import pyarrow

    return one.equals(other) and all(
        one[name].fill_null(0.0).to_numpy().view(np.int64).tobytes()
        == other[name].fill_null(0.0).to_numpy().view(np.int64).tobytes()
        for name in one.schema.names if pyarrow.types.is_floating(one.schema.field(name).type))


def test_the_rows_are_the_same_bits_in_chunks_and_in_a_worker_process(newest_build, monkeypatch):
    """At scale the series are cut into chunks, fitted here and by a worker process (_fit_chunks): the
    rows are the same bits as the whole snapshot fitted in one piece here."""
    import concurrent.futures

    from pipeline import fits

    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        points = connection.sql("select * from efficiency_curve_points_in((select snapshot_id from index_snapshot)) "
                                "order by all").to_arrow_table()
    monkeypatch.setattr(fits, "CHUNK_WORK", 10 ** 9)
    forget_fits()
    whole = fits.fit_curves(points)  # one chunk per set of batch limits
    monkeypatch.setattr(fits, "CHUNK_WORK", 1)  # a chunk per SERIES_AT_ONCE series
    forget_fits()
    assert _same_bits(fits.fit_curves(points), whole)
    # Every chunk by the worker: none is left for this process to take (it takes those it can cancel).
    monkeypatch.setattr(fits, "PARALLEL_MIN_WORK", 0)
    monkeypatch.setattr(fits.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(concurrent.futures.Future, "cancel", lambda self: False)
    forget_fits()
    assert _same_bits(fits.fit_curves(points), whole)


def test_a_series_fitted_before_in_the_process_is_the_same_bits_and_the_memory_is_bounded(history_build,
                                                                                          monkeypatch):
    """A series already fitted in this process is taken from _fitted_series, not fitted again: each of
    three snapshots of the history fitted after the others fits only the series new to it and gives the
    rows it gives fitted alone; a full memory takes no more; a large snapshot's points are fitted without it."""
    from pipeline import fits

    with duckdb.connect(str(history_build.database), read_only=True) as connection:
        # The oldest snapshot and the two newest: consecutive snapshots share most series, distant ones fewer.
        snapshots = [s for (s,) in connection.execute(
            "select snapshot_id from snapshot_history order by position").fetchall()]
        points = [connection.sql("select * from efficiency_curve_points_in(?) order by all", params=[s])
                  .to_arrow_table() for s in (snapshots[0], *snapshots[-2:])]
    fitted: list[int] = []  # the series each call of _fit_chunk fits
    fit_chunk = fits._fit_chunk
    monkeypatch.setattr(fits, "_fit_chunk", lambda x, series: fitted.append(len(series)) or fit_chunk(x, series))

    def fit(snapshot_points: Any) -> tuple[Any, int]:
        """The rows of fit_curves, and how many series it fitted."""
        fitted.clear()
        return fits.fit_curves(snapshot_points), sum(fitted)

    alone, distinct = [], []
    for snapshot_points in points:
        forget_fits()
        rows, count = fit(snapshot_points)
        alone.append(rows)
        distinct.append(count)
        assert count == len(fits._fitted_series) > 0
    forget_fits()
    in_turn = [fit(snapshot_points) for snapshot_points in points]
    assert all(_same_bits(one, other) for (one, _), other in zip(in_turn, alone))
    remembered = len(fits._fitted_series)
    assert in_turn[0][1] == distinct[0]
    assert sum(count for _, count in in_turn) == remembered < sum(distinct), "a series met before is not fitted"
    assert fit(points[1])[1] == 0
    monkeypatch.setattr(fits, "FITTED_SERIES_MAX", remembered // 2)
    forget_fits()
    bounded = [fit(snapshot_points)[0] for snapshot_points in reversed(points)][::-1]
    assert len(fits._fitted_series) == remembered // 2
    assert all(_same_bits(one, other) for one, other in zip(bounded, alone))
    # Points beyond REMEMBER_MAX_POINTS (a synthetic snapshot at scale) are fitted without it.
    monkeypatch.setattr(fits, "REMEMBER_MAX_POINTS", points[-1].num_rows - 1)
    forget_fits()
    rows, count = fit(points[-1])
    assert _same_bits(rows, alone[-1]) and count == distinct[-1] and fits._fitted_series == {}
    assert fit(points[-1])[1] == distinct[-1]


def forget_fits() -> None:
    """Empty this process's memory of fitted series, so that the next fit computes every series."""
    from pipeline import fits

    fits._fitted_series.clear()
