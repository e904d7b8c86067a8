"""Logistic fits of the efficiency curves, as the leaderboard's data toolkit (PyPI mlenergy-data,
mlenergy.data.modeling.LogisticModel) makes them: y = b0 + L * sigmoid(k * (x - x0)) in
x = log2(batch limit), fitted to each deployment's points (efficiency_curve_points_in: repeats averaged)
for energy per output, GPU power, throughput and the family's latency, with the fit's quality.

The procedure is the toolkit's own least squares: for every (x0, k) of its grid (x0 at 40 steps from one
below the smallest x to one above the largest, k at 60 steps from 0.01 to 100 on a log scale) b0 and L
are the linear least-squares solution, and the grid point with the least mean squared error wins (the
first on ties, in the toolkit's loop order). It is evaluated for every grid point and fit at once with
numpy instead of the toolkit's Python loop of 2,400 np.linalg.lstsq calls a fit, which measured 60 ms a
fit here: a snapshot's ~1,300 curves and their ~5,000 leave-one-out refits would take five minutes. A
local optimiser (scipy.optimize.curve_fit) from the grid's best point would change the answer the
toolkit's users work from, so none is run; scipy supplies the stable sigmoid and the root of the
saturation equation."""

from typing import Any

import numpy as np
import pyarrow
from scipy.optimize import brentq
from scipy.special import expit

# The toolkit's grid (LogisticModel.fit).
X0_STEPS = 40
K_GRID = np.logspace(-2, 2, 60)
# Four parameters need four points to be determined and a fifth to be tested; fewer are not fitted.
MIN_POINTS = 5
# A fit whose in-sample error at any measured point exceeds this, relative to the point, is not fit for
# use: on the index snapshot the token curves' median in-sample maximum is about 3 %, and the curves the
# logistic cannot follow (a dip or a jump between batch limits) exceed 10 %.
MAX_IN_SAMPLE_ERROR = 0.10
# The saturation batch limit: beyond it, however far batching goes, the fitted value moves by less than
# this fraction of its value there (for energy per output: more batching saves less than 5 %).
SATURATION_FRACTION = 0.05
# The saturation batch limit is searched up to this log2 batch limit (about a million).
SATURATION_SEARCH_MAX_X = 20.0
# Grid points rescored by their residuals, per fit (grid_fit).
CANDIDATES = 16
# Errors this close, relative, are the same error computed in another order.
TIE = 1e-9
# Curves fitted together in one array operation: bounds the memory (some 100 MB at 14 points).
CHUNK = 64

# quantity -> (the points' column, the unit, or None for the output's own unit label).
QUANTITIES = {
    "energy": ("wh_per_unit", None),
    "gpu_power": ("gpu_power_watts_total", "W"),
    "throughput": ("units_per_second", None),
    "median_itl": ("median_itl_ms", "ms"),
    "batch_latency": ("batch_latency_s", "s"),
}
DEPLOYMENT = ("snapshot_id", "family", "task", "model_id", "gpu", "num_gpus", "tensor_parallel", "data_parallel",
              "expert_parallel", "ulysses_degree", "ring_degree", "precision", "width", "height", "num_frames",
              "fps", "inference_steps")
STATUSES = ("fit for use", "too few points", "not monotone", "error above bound")


def logistic(x: np.ndarray, L: float, x0: float, k: float, b0: float) -> np.ndarray:
    """The toolkit's curve: b0 + L * sigmoid(k * (x - x0))."""
    return b0 + L * expit(k * (np.asarray(x, dtype=float) - x0))


def grid_fit(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Fit many curves at once. x is (curves, points); y is (curves, points, quantities); weights is
    (curves, points, fits): each fit of a curve weighs the points it is fitted to 1 and the rest 0, and all
    its fits share the x0 grid, which only the lowest and highest x of the points weighed set (leaving out
    an interior point keeps it). Returns (curves, fits, quantities, 4): L, x0, k, b0 as LogisticModel.fit
    gives them."""
    curves = x.shape[0]
    every = weights.max(axis=2) > 0
    low = np.where(every, x, np.inf).min(axis=1) - 1.0
    high = np.where(every, x, -np.inf).max(axis=1) + 1.0
    x0 = np.linspace(low, high, X0_STEPS, axis=1)  # (curves, 40)
    # (curves, 40 x 60, points): the sigmoid at every grid point, x0 the outer loop and k the inner, as
    # the toolkit loops, so that argmin's first minimum is the toolkit's.
    s = expit(K_GRID[None, None, :, None] * (x[:, None, None, :] - x0[:, :, None, None])).reshape(curves, -1, x.shape[1])
    # The normal equations' sums, for every grid point, fit and quantity; y centred on each fit's mean so
    # the error's closed form (total minus explained) keeps its digits.
    n = weights.sum(axis=1)[:, None, :, None]  # (curves, 1, fits, 1)
    mean_y = np.einsum("cpf,cpq->cfq", weights, y)[:, None] / np.maximum(n, 1)
    yc = y[:, :, None, :] - mean_y[:, 0][:, None, :, :]  # (curves, points, fits, quantities)
    sum_s = np.einsum("cgp,cpf->cgf", s, weights)[..., None]
    sum_ss = np.einsum("cgp,cpf->cgf", s * s, weights)[..., None]
    sum_sy = np.einsum("cgp,cpfq->cgfq", s, weights[..., None] * yc)
    sum_yy = np.einsum("cpf,cpfq->cfq", weights, yc * yc)[:, None]
    spread = n * sum_ss - sum_s * sum_s
    # Where the sigmoid is constant over the points the least-squares line is flat: the mean.
    flat = spread <= 1e-12 * np.maximum(n * sum_ss, 1e-300)
    L = np.where(flat, 0.0, n * sum_sy / np.where(flat, 1.0, spread))  # sum of centred y is 0
    sse = sum_yy - L * sum_sy
    # The closed form loses digits where the sigmoid is nearly a step over the points, and a near-tie
    # then picks another grid point than the toolkit's residuals would: the CANDIDATES best grid points
    # of each fit are scored again by their residuals, as the toolkit scores every point.
    candidates = np.sort(np.argpartition(sse, CANDIDATES - 1, axis=1)[:, :CANDIDATES], axis=1)  # grid order
    c, _, f, q = np.indices(candidates.shape)
    L_candidates = L[c, candidates, f, q]
    b0_candidates = mean_y[:, 0][c, f, q] - L_candidates * sum_s[c, candidates, f, 0] / n[:, 0, :, 0][c, f]
    # (curves, candidates, fits, quantities, points)
    s_at = np.take_along_axis(s[:, :, None, None, :], candidates[..., None], axis=1)
    residual = y.transpose(0, 2, 1)[:, None, None, :, :] - b0_candidates[..., None] - L_candidates[..., None] * s_at
    scored = (weights.transpose(0, 2, 1)[:, None, :, None, :] * residual * residual).sum(axis=-1)
    # Where the sigmoid is a step between two points, grid points whose steps fall between the same points
    # tie to the last digits, and where a left-out point lies between them its prediction depends on which
    # is taken: the first in the toolkit's loop order among those within rounding of the least error, as
    # its loop takes in exact arithmetic.
    tied = scored <= scored.min(axis=1, keepdims=True) * (1 + TIE) + np.finfo(float).tiny
    chosen = tied.argmax(axis=1)
    c, f, q = np.indices(chosen.shape)
    best = candidates[c, chosen, f, q]
    L_best = L_candidates[c, chosen, f, q]
    b0_best = b0_candidates[c, chosen, f, q]
    i_x0, i_k = np.divmod(best, K_GRID.size)
    return np.stack([L_best, x0[c, i_x0], K_GRID[i_k], b0_best], axis=-1)


def is_monotone(values: np.ndarray) -> bool:
    """Whether points in batch order only rise or only fall (a logistic can follow nothing else)."""
    steps = np.diff(values)
    return bool((steps >= 0).all() or (steps <= 0).all())


def saturation_x(L: float, x0: float, k: float, b0: float) -> float | None:
    """The log2 batch limit beyond which the fitted value moves by less than SATURATION_FRACTION of its
    value there however far batching goes; None when the curve does not settle by SATURATION_SEARCH_MAX_X
    or has no settled value (it would reach zero)."""
    settled = b0 + L if k > 0 else b0
    if settled == 0 or L == 0:
        return 0.0 if L == 0 else None

    def excess(x: float) -> float:
        value = float(logistic(x, L, x0, k, b0))
        return abs(settled - value) - SATURATION_FRACTION * abs(value)

    if excess(0.0) <= 0:
        return 0.0
    if excess(SATURATION_SEARCH_MAX_X) > 0:
        return None
    return float(brentq(excess, 0.0, SATURATION_SEARCH_MAX_X, xtol=1e-9))


def _quantities(family: str) -> list[str]:
    latency = "median_itl" if family == "token" else "batch_latency"
    return [name for name in QUANTITIES if name not in ("median_itl", "batch_latency") or name == latency]


def fit_curves(points: pyarrow.Table) -> pyarrow.Table:
    """One row per deployment × quantity of the points (efficiency_curve_points_in's rows): the fitted
    parameters, the points' batch range, the in-sample and leave-one-out relative errors, whether it is
    fit for use and why not, the value the curve settles at and the batch limit where it settles."""
    curves: dict[tuple, list[dict[str, Any]]] = {}
    for row in points.sort_by([(name, "ascending") for name in (*DEPLOYMENT, "batch_limit")]).to_pylist():
        curves.setdefault(tuple(row[name] for name in DEPLOYMENT), []).append(row)
    # Curves of the same number of points are fitted together, each with its fits: all its points, then
    # each interior point left out for the leave-one-out error (an end point left out would be
    # extrapolated, which is another question).
    by_size: dict[int, list[list[dict[str, Any]]]] = {}
    for rows in curves.values():
        if len(rows) >= MIN_POINTS:
            by_size.setdefault(len(rows), []).append(rows)
    fitted: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # id(rows) -> x, y, parameters
    for n, group in by_size.items():
        x = np.log2([[row["batch_limit"] for row in rows] for rows in group])
        y = np.array([[[np.nan if row[QUANTITIES[quantity][0]] is None else row[QUANTITIES[quantity][0]]
                        for quantity in _quantities(rows[0]["family"])] for row in rows] for rows in group], dtype=float)
        weights = np.ones((len(group), n, n - 1))
        for i in range(1, n - 1):
            weights[:, i, i] = 0.0
        parameters = np.concatenate([grid_fit(x[i:i + CHUNK], np.nan_to_num(y[i:i + CHUNK]), weights[i:i + CHUNK])
                                     for i in range(0, len(group), CHUNK)])
        for c, rows in enumerate(group):
            fitted[id(rows)] = x[c], y[c], parameters[c]

    out: list[dict[str, Any]] = []
    for key, rows in curves.items():
        n = len(rows)
        for q, quantity in enumerate(_quantities(rows[0]["family"])):
            column, unit = QUANTITIES[quantity]
            values = np.array([np.nan if row[column] is None else row[column] for row in rows], dtype=float)
            row: dict[str, Any] = dict(zip(DEPLOYMENT, key)) | {
                "unit_label": rows[0]["unit_label"], "quantity": quantity, "unit": unit or _unit_of(quantity, rows[0]["family"], rows[0]["unit_label"]), "n_points": n,
                "min_batch_limit": rows[0]["batch_limit"], "max_batch_limit": rows[-1]["batch_limit"],
                "is_monotone": is_monotone(values),
            } | dict.fromkeys(("L", "x0", "k", "b0", "in_sample_median_error", "in_sample_max_error",
                               "leave_one_out_median_error", "leave_one_out_max_error", "settled_value",
                               "saturation_batch_limit"))
            if id(rows) in fitted and np.isfinite(values).all():
                x, _, parameters = fitted[id(rows)]
                L, x0, k, b0 = (float(v) for v in parameters[0, q])
                errors = np.abs(logistic(x, L, x0, k, b0) - values) / np.abs(values)
                # Fit i leaves point i out (weights above); its error is the prediction's there.
                predicted = logistic(x[1:n - 1], *parameters[1:n - 1, q].T)
                left_out = list(np.abs(predicted - values[1:n - 1]) / np.abs(values[1:n - 1]))
                saturation = saturation_x(L, x0, k, b0)
                row |= {
                    "L": L, "x0": x0, "k": k, "b0": b0,
                    "in_sample_median_error": float(np.median(errors)), "in_sample_max_error": float(errors.max()),
                    "leave_one_out_median_error": float(np.median(left_out)),
                    "leave_one_out_max_error": float(max(left_out)),
                    "settled_value": b0 + L if k > 0 else b0,
                    "saturation_batch_limit": None if saturation is None else float(2.0 ** saturation),
                }
            row["fit_status"] = ("too few points" if row["L"] is None else "not monotone" if not row["is_monotone"]
                                 else "error above bound" if row["in_sample_max_error"] > MAX_IN_SAMPLE_ERROR
                                 else "fit for use")
            row["is_fit_for_use"] = row["fit_status"] == "fit for use"
            out.append(row)
    return pyarrow.Table.from_pylist(out, schema=FITS_SCHEMA)


def _unit_of(quantity: str, family: str, unit_label: str) -> str:
    """The unit of energy per output or throughput, as the field dictionary spells them."""
    output = "Mtoken" if family == "token" else unit_label
    return f"Wh/{output}" if quantity == "energy" else f"{'token' if family == 'token' else unit_label}s/s"


def _schema() -> pyarrow.Schema:
    integer, real, text = pyarrow.int64(), pyarrow.float64(), pyarrow.string()
    types = {"snapshot_id": text, "family": text, "task": text, "model_id": text, "gpu": text, "precision": text,
             **{name: integer for name in DEPLOYMENT if name not in ("snapshot_id", "family", "task", "model_id",
                                                                     "gpu", "precision")},
             "unit_label": text, "quantity": text, "unit": text, "n_points": integer, "min_batch_limit": integer,
             "max_batch_limit": integer, "is_monotone": pyarrow.bool_(),
             **{name: real for name in ("L", "x0", "k", "b0", "in_sample_median_error", "in_sample_max_error",
                                        "leave_one_out_median_error", "leave_one_out_max_error", "settled_value",
                                        "saturation_batch_limit")},
             "fit_status": text, "is_fit_for_use": pyarrow.bool_()}
    return pyarrow.schema(list(types.items()))


FITS_SCHEMA = _schema()
