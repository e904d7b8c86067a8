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
toolkit's users work from, so none is run; scipy supplies the stable sigmoid and its inverse, which
give the saturation batch limit in closed form (saturation_x).

What the grid search costs is kept down without changing a digit of what it finds: everything that
depends only on the batch limits (the sigmoid at every grid point, its sums over each fit's points) is
computed once per set of batch limits, which many deployments share; a series of values met twice (a
synthetic snapshot's copies repeat them, a history's snapshots most of theirs) is fitted once in a
process (_fitted_series); and each fit's best grid points are picked out of its 2,400 errors through
the least error of each block of grid points instead of a partition of them all. numpy's ufunc buffer
is kept below two rows of the grid while fitting (UFUNC_BUFFER), which halves what its products over
the grid cost. Every float that reaches a row is computed by the same operations in the same order as a
plain evaluation of the whole grid, so the rows do not depend on which or how many curves are fitted
together.

That is what lets a large snapshot's fitting use every core: the distinct series are cut into chunks
(_Series), each fitted on its own, saturation batch limits included (_fit_chunk); above PARALLEL_MIN_WORK
this process and a worker process per other core share them (_fit_chunks), and the rows are the same
bits as fitted in one piece (tests/test_fits.py). On this 2-core machine, idle: the newest snapshot
fits in this process in about 0.2 s (scipy's import, 0.2 s, aside); its 100x synthetic snapshot in
5.0 s (9.3 s before the worker and the buffer size, 7.0 s in one process), its 1000x one in 43 s (95 s).
Beside another job that keeps a core busy the worker gains little, as there is no free core."""

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pyarrow
import pyarrow.compute as pc
from scipy.special import expit, logit

from pipeline.errors import ignore_interrupts

# The toolkit's grid (LogisticModel.fit).
X0_STEPS = 40
K_GRID = np.logspace(-2, 2, 60)
GRID = X0_STEPS * K_GRID.size
# Four parameters need four points to be determined and a fifth to be tested; fewer are not fitted.
MIN_POINTS = 5
# A fit whose in-sample error at any measured point exceeds this, relative to the point, is not fit for
# use: on the index snapshot the token curves' median in-sample maximum is about 3 %, and the curves the
# logistic cannot follow (a dip or a jump between batch limits) exceed 10 %.
MAX_IN_SAMPLE_ERROR = 0.10
# The saturation batch limit: beyond it, however far batching goes, the fitted value moves by less than
# this fraction of its value there (for energy per output: more batching saves less than 5 %).
SATURATION_FRACTION = 0.05
# How far beyond its measured batch limits a fit is read, in doublings of the batch limit: energy_from_fit
# (sql/macros) extrapolates no further, as nothing measured constrains where the logistic levels off, and a
# saturation batch limit beyond it is not given.
EXTRAPOLATION_DOUBLINGS = 1
# Grid points rescored by their residuals, per fit (_best_grid_points).
CANDIDATES = 16
# Errors this close, relative, are the same error computed in another order.
TIE = 1e-9
# Grid points per block (every 150th) whose best stands for the block when the candidates are picked: a
# fit's 2,400 errors become 150 block bests, and only the 17 best blocks' 272 errors are compared one by one.
BLOCK = 16
# Series fitted at a time: a pass over one fit's 2,400 errors of each (some 600 kB) then stays in the
# processor's cache, which measured twice as fast as passes over arrays that do not fit there.
SERIES_AT_ONCE = 32
# numpy's ufunc buffer (elements) while fitting. With its default, 8192, more than two rows of a grid's
# 2,400 values, numpy 2.4 fills its buffer with an operand broadcast over the rows (a sigmoid's row, each
# series' weight) again and again (numpy issue 13307): such a product over 32 series took 45-60 us instead
# of 15, and the 100x synthetic snapshot's fitting in one process 9.3 s instead of 7.0 s idle (11.0 s
# instead of 8.3 s beside another job). With less than
# two rows numpy loops over the operands where they are. It changes how numpy cuts its loops, never the
# arithmetic: the rows are the same bits whatever the buffer (compared at 1024, 2048, 2400 and 4096).
UFUNC_BUFFER = 4096
# The fitting's work, counted as distinct series x points x fits (the grid's products), about 4 us each
# in one process, the saturation batch limits included. From PARALLEL_MIN_WORK on (about 2 s in one
# process) the chunks are shared with worker processes: a worker is ready only after its imports (numpy,
# pyarrow and scipy, 0.7 s on an idle core) and the pool's end waits for it. The 10x synthetic snapshot
# (222,000; 0.85 s in one process) took as long with a worker on an idle machine, for a third more CPU,
# and 1.9 s against 1.0 s beside another job's busy core; at 100x (2,035,000) the fitting took 5.0 s
# against 7.0 s in one process. The real snapshots (about 40,000) are fitted in this process.
PARALLEL_MIN_WORK = 500_000
# A chunk's work (0.05-0.1 s; a series of few points costs more per product): the process that finishes
# first then waits at most for the two chunks a worker holds (one running, one queued by the pool); each
# chunk computes its Grid again (about 2 ms).
CHUNK_WORK = 25_000

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


def _in_point_order(terms: np.ndarray) -> np.ndarray:
    """The sum over the last axis, one term after another from zero, as np.einsum adds the points.
    np.sum adds pairwise or one by one depending on the array's shape and layout, which would make the
    last digits of a fit depend on how many series are fitted with it."""
    total = np.zeros(terms.shape[:-1])
    for point in range(terms.shape[-1]):
        total += terms[..., point]
    return total


class Grid:
    """What the grid search needs of one set of points' batch limits, shared by every curve measured at
    them: x = log2(batch limit) (ascending), the fits (fit 0 weighs every point, fit i leaves interior point
    i out), the x0 grid, and per grid point the sigmoid at each point and its sums over each fit's points."""

    def __init__(self, x: np.ndarray) -> None:
        n = x.size
        self.weights = np.ones((n, n - 1))  # (points, fits)
        for i in range(1, n - 1):
            self.weights[i, i] = 0.0
        self.count = self.weights.sum(axis=0)  # (fits,)
        self.x0 = np.linspace(x.min() - 1.0, x.max() + 1.0, X0_STEPS)
        # (grid, points), x0 the outer loop and k the inner, as the toolkit loops, so that the first of
        # equal errors is the toolkit's.
        self.sigmoid = expit(K_GRID[None, :, None] * (x[None, None, :] - self.x0[:, None, None])).reshape(GRID, n)
        self.sum_s = _in_point_order(self.sigmoid[:, None, :] * self.weights.T)  # (grid, fits)
        self.sum_ss = _in_point_order((self.sigmoid * self.sigmoid)[:, None, :] * self.weights.T)
        self.spread = self.count * self.sum_ss - self.sum_s * self.sum_s
        # Where the sigmoid is constant over the points the least-squares line is flat: the mean.
        self.flat = self.spread <= 1e-12 * np.maximum(self.count * self.sum_ss, 1e-300)
        # Dividing by an infinite spread makes L a zero, as the flat mean's L is, without a select per error.
        self.spread_or_inf = np.where(self.flat, np.inf, self.spread).T.copy()  # (fits, grid)
        self.sigmoid_by_point = self.sigmoid.T.copy()  # (points, grid)

    def fit(self, y: np.ndarray) -> np.ndarray:
        """Fit series y (series, points) measured at these batch limits: (series, fits, 4) of L, x0, k, b0
        as LogisticModel.fit gives them."""
        previous = np.setbufsize(UFUNC_BUFFER)
        try:
            return np.concatenate([self._fit(y[start:start + SERIES_AT_ONCE])
                                   for start in range(0, len(y), SERIES_AT_ONCE)])
        finally:
            np.setbufsize(previous)

    def _fit(self, y: np.ndarray) -> np.ndarray:
        weights, count = self.weights.T, self.count[:, None]  # (fits, points), (fits, 1)
        # The normal equations' sums for every fit, series and grid point; y centred on each fit's mean so
        # the error's closed form (total minus explained) keeps its digits.
        mean = _in_point_order(weights[:, None, :] * y[None, :, :]) / np.maximum(count, 1)  # (fits, series)
        centred = y[None, :, :] - mean[:, :, None]  # (fits, series, points)
        weighted = weights[:, None, :] * centred
        sum_yy = _in_point_order(weights[:, None, :] * (centred * centred))
        # The explained part of the least-squares error at every grid point: L sum_sy with L = n sum_sy /
        # spread (0 where flat), rounded as the plain evaluation rounds it. The error, sum_yy minus it, is
        # computed only where it is compared (_best_grid_points), as it orders the grid points alike.
        explained = np.empty((len(y), GRID))
        term = np.empty_like(explained)
        candidates = np.empty((*mean.shape, CANDIDATES), dtype=np.intp)
        for fit, (point, *others) in enumerate(np.flatnonzero(row) for row in weights):
            # sum_sy: the points' products added in point order (a left-out point's product is a zero,
            # which adds nothing); its sign where it is zero is not kept, and L sum_sy does not depend on it.
            sum_sy = np.multiply(self.sigmoid_by_point[point], weighted[fit, :, point, None], out=explained)
            for point in others:
                sum_sy += np.multiply(self.sigmoid_by_point[point], weighted[fit, :, point, None], out=term)
            np.multiply(count[fit], sum_sy, out=term)
            term /= self.spread_or_inf[fit]
            sum_sy *= term
            candidates[fit] = _best_grid_points(explained, sum_yy[fit])
        # The closed form loses digits where the sigmoid is nearly a step over the points, and a near-tie
        # then picks another grid point than the toolkit's residuals would: the CANDIDATES best grid points
        # of each fit are scored again by their residuals, as the toolkit scores every point.
        fit_index = np.arange(weights.shape[0])[:, None, None]
        flat = self.flat[candidates, fit_index]
        sum_sy = _in_point_order(self.sigmoid[candidates] * weighted[:, :, None, :])
        L = np.where(flat, 0.0, count[:, :, None] * sum_sy / np.where(flat, 1.0, self.spread[candidates, fit_index]))
        b0 = mean[:, :, None] - L * self.sum_s[candidates, fit_index] / count[:, :, None]
        residual = y[None, :, None, :] - b0[..., None] - L[..., None] * self.sigmoid[candidates]
        scored = _in_point_order(weights[:, None, None, :] * residual * residual)  # (fits, series, candidates)
        # Where the sigmoid is a step between two points, grid points whose steps fall between the same points
        # tie to the last digits, and where a left-out point lies between them its prediction depends on which
        # is taken: the first in the toolkit's loop order among those within rounding of the least error, as
        # its loop takes in exact arithmetic.
        tied = scored <= scored.min(axis=2, keepdims=True) * (1 + TIE) + np.finfo(float).tiny
        chosen = tied.argmax(axis=2)[..., None]
        best = np.take_along_axis(candidates, chosen, axis=2)[..., 0]
        i_x0, i_k = np.divmod(best, K_GRID.size)
        parameters = np.stack([np.take_along_axis(L, chosen, axis=2)[..., 0], self.x0[i_x0], K_GRID[i_k],
                               np.take_along_axis(b0, chosen, axis=2)[..., 0]], axis=-1)
        return parameters.transpose(1, 0, 2)  # (series, fits, 4)


def _best_grid_points(explained: np.ndarray, total: np.ndarray) -> np.ndarray:
    """The CANDIDATES grid points of least error (total minus explained) of each row of `explained`
    (rows, grid) with `total` (rows,), in grid order: the set np.argpartition finds in the errors. Where
    that set is unique it lies within the 17 blocks (a block: every 150th grid point from one on) whose
    best point explains most, and a partition of their errors alone tells it; where the 16th least error
    equals the 17th, or the least error any point outside those blocks can have, which of the equal
    points np.argpartition keeps depends on its algorithm, so those rows' errors are partitioned whole,
    as a plain evaluation does. Rounding total minus explained never reverses an order, only makes ties."""
    rows = np.arange(explained.shape[0])[:, None]
    block_max = explained.reshape(explained.shape[0], BLOCK, -1).max(axis=1)  # (rows, blocks)
    blocks = np.argpartition(block_max, -CANDIDATES - 1, axis=1)[:, -CANDIDATES - 1:]
    # Every point outside these blocks explains at most the 17th block maximum, so its error is at least:
    bound = total - block_max[rows[:, 0], blocks[:, 0]]
    points = (blocks[:, None, :] + block_max.shape[1] * np.arange(BLOCK)[:, None]).reshape(len(explained), -1)
    error = total[:, None] - explained[rows, points]
    least = np.partition(error, (CANDIDATES - 1, CANDIDATES), axis=1)
    last = least[:, CANDIDATES - 1]
    unique = (last < least[:, CANDIDATES]) & (last < bound)
    chosen = np.empty((explained.shape[0], CANDIDATES), dtype=np.intp)
    chosen[unique] = points[unique][error[unique] <= last[unique, None]].reshape(-1, CANDIDATES)
    for row in np.flatnonzero(~unique):
        chosen[row] = np.argpartition(total[row] - explained[row], CANDIDATES - 1)[:CANDIDATES]
    return np.sort(chosen, axis=1)


def is_monotone(values: np.ndarray) -> bool:
    """Whether points in batch order only rise or only fall (a logistic can follow nothing else)."""
    steps = np.diff(values)
    return bool((steps >= 0).all() or (steps <= 0).all())


def saturation_x(L: float, x0: float, k: float, b0: float, up_to_x: float) -> float | None:
    """The log2 batch limit beyond which the fitted value moves by less than SATURATION_FRACTION of its
    value there however far batching goes; None when the curve does not settle by log2 batch limit
    `up_to_x`, or settles at zero or below: every quantity fitted is positive, so such a curve falls through
    zero beyond its points and has no floor to settle at."""
    settled = b0 + L if k > 0 else b0
    if settled <= 0:
        return None
    if L == 0:
        return 0.0

    def excess(x: float) -> float:
        # What batching can still move minus the fraction of the value, falling as x grows.
        value = b0 + L * float(expit(k * (x - x0)))
        return abs(settled - value) - SATURATION_FRACTION * abs(value)

    if excess(0.0) <= 0:
        return 0.0
    if excess(up_to_x) > 0:
        return None
    # The root in closed form, not by a root finder: with u the part of the sigmoid that vanishes as x
    # grows (1 - sigmoid for k > 0, the sigmoid for k < 0), value = settled + toward * u, and at the root
    # the value is within SATURATION_FRACTION of settled, so positive: |toward| u = SATURATION_FRACTION
    # (settled + toward u) is linear in u. x follows from u through the sigmoid's inverse. Where |L| is
    # within rounding of SATURATION_FRACTION of the value the curve starts from (as x goes to minus
    # infinity), u rounds to 1 or above, which no finite x reaches: the root is then taken to be 0, the
    # least batch limit.
    toward = -L if k > 0 else L
    u = min(SATURATION_FRACTION * settled / (abs(toward) - SATURATION_FRACTION * toward), 1.0)
    return min(max(x0 - float(logit(u)) / abs(k), 0.0), up_to_x)


def _unit_of(quantity: str, family: str, unit_label: str) -> str:
    """The unit of energy per output or throughput, as the field dictionary spells them."""
    output = "Mtoken" if family == "token" else unit_label
    return f"Wh/{output}" if quantity == "energy" else f"{'token' if family == 'token' else unit_label}s/s"


def _quantities(family: str) -> list[str]:
    latency = "median_itl" if family == "token" else "batch_latency"
    return [name for name in QUANTITIES if name not in ("median_itl", "batch_latency") or name == latency]


def _curve_starts(table: pyarrow.Table) -> np.ndarray:
    """The first row of each deployment's points in `table` (sorted by deployment): where any deployment
    column differs from the row before, a null equal only to a null."""
    differs = np.zeros(max(table.num_rows - 1, 0), dtype=bool)
    for name in DEPLOYMENT:
        column = table[name]
        this, before = column[1:], column[:-1]
        same = pc.coalesce(pc.equal(this, before), pc.and_(pc.is_null(this), pc.is_null(before)))
        differs |= ~same.to_numpy(zero_copy_only=False)
    return np.concatenate([[0], np.flatnonzero(differs) + 1]) if table.num_rows else np.zeros(0, dtype=np.intp)


def _fit_chunk(x: np.ndarray, series: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Parameters (series, fits, 4) of series (series, points) measured at batch limits x, and the saturation
    x of each series' fit to every point (NaN where None). What a worker process does (_fit_chunks)."""
    parameters = Grid(x).fit(series)
    up_to_x = float(x.max()) + EXTRAPOLATION_DOUBLINGS
    saturation = [saturation_x(*fit, up_to_x) for fit in parameters[:, 0].tolist()]
    return parameters, np.array([np.nan if limit is None else limit for limit in saturation], dtype=float)


# Fits of series already fitted in this process, by batch limits and values: a history's snapshots
# repeat most curves (the eleven shared snapshots hold 11,784 series to fit, 1,178 of them distinct: their
# fitting took 0.8 s with it instead of 3.1 s), and a process that builds again (the test suite, a history
# step after step) meets the same series again. A fit depends on nothing else but this module's constants
# (the grid, the tie and saturation rules), so a remembered one is the same bits; whatever changed one of
# them in a running process (a test) would have to empty it first. A plain dict, bounded by
# FITTED_SERIES_MAX (about 700 bytes each): once full it takes no more. Points beyond REMEMBER_MAX_POINTS
# are fitted without it: a synthetic snapshot at scale scales each copy's energy and power, so its series
# do not repeat, and a lookup per series would only add time. functools.lru_cache does not fit: the misses
# are fitted together (Grid), not one call each.
FITTED_SERIES_MAX = 100_000
REMEMBER_MAX_POINTS = 100_000
_fitted_series: dict[bytes, tuple[np.ndarray, float]] = {}


class _Series:
    """The series of a snapshot's curves to fit, gathered size by size (add) and fitted all at once (fit):
    curves measured at the same batch limits share a Grid, a series of values met twice (or already fitted
    in this process, _fitted_series) is fitted once, and the distinct series are cut into chunks of about
    CHUNK_WORK that are fitted independently."""

    def __init__(self, remember: bool) -> None:
        self.remember = remember  # whether to look series up in _fitted_series and keep their fits there
        self.chunks: list[tuple[np.ndarray, np.ndarray]] = []  # (batch limits, distinct series)
        self.chunk_keys: list[list[bytes]] = []  # each chunk's series' _fitted_series keys
        self.work = 0
        # Per size added: per set of batch limits, the series' (curve, quantity), each one's distinct series,
        # which of those were fitted before (their fits and saturation x) and the chunks of the others.
        self.sizes: list[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                    range]]] = []
        self.results: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, x: np.ndarray, y: np.ndarray, fitted: np.ndarray) -> int:
        """Add the curves of one size: x (curves, points), y (curves, points, quantities), those of `fitted`
        (curves, quantities) to fit. Returns the number to ask parameters() for."""
        n = y.shape[1]
        per_chunk = max(SERIES_AT_ONCE, CHUNK_WORK // (n * (n - 1)) // SERIES_AT_ONCE * SERIES_AT_ONCE)
        groups = []
        limits, grid_of = np.unique(x, axis=0, return_inverse=True)
        for g, limit in enumerate(limits):
            curve, quantity = np.nonzero((grid_of.reshape(-1) == g)[:, None] & fitted)
            series = np.ascontiguousarray(y[curve, :, quantity])  # (series, points)
            _, first, repeat = np.unique(series.view(np.dtype((np.void, series.itemsize * n))).ravel(),
                                         return_index=True, return_inverse=True)
            distinct = series[first]
            if self.remember:
                keys = [limit.tobytes() + values.tobytes() for values in distinct]
                known = np.array([key in _fitted_series for key in keys], dtype=bool).reshape(-1)
            else:
                keys, known = [], np.zeros(len(distinct), dtype=bool)
            remembered = [_fitted_series[key] for key, was in zip(keys, known) if was]
            known_fits = np.array([fits for fits, _ in remembered]).reshape(-1, n - 1, 4)
            known_saturation = np.array([settles for _, settles in remembered], dtype=float)
            unknown = np.flatnonzero(~known)
            start = len(self.chunks)
            for at in range(0, len(unknown), per_chunk):
                part = unknown[at:at + per_chunk]
                self.chunks.append((limit, distinct[part]))
                self.chunk_keys.append([keys[i] for i in part] if keys else [])
            self.work += len(unknown) * n * (n - 1)
            if len(distinct):
                groups.append((curve, quantity, repeat.reshape(-1), known, known_fits, known_saturation,
                               range(start, len(self.chunks))))
        self.sizes.append(groups)
        return len(self.sizes) - 1

    def fit(self) -> None:
        """Fit every chunk, and remember each series' fit in _fitted_series for the rest of the process."""
        self.results = _fit_chunks(self.chunks, parallel=self.work >= PARALLEL_MIN_WORK)
        if not self.remember:
            return
        for keys, (fits, saturation) in zip(self.chunk_keys, self.results):
            for key, series_fits, settles in zip(keys, fits, saturation.tolist()):
                if len(_fitted_series) >= FITTED_SERIES_MAX:
                    return
                _fitted_series.setdefault(key, (series_fits, settles))

    def parameters(self, size: int, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of the curves added as `size` (y as added): their parameters (curves, quantities, fits, 4) and
        the saturation x of each one's fit to every point (curves, quantities), NaN where not fitted (and
        the saturation where it has none)."""
        curves, n, quantities = y.shape
        parameters = np.full((curves, quantities, n - 1, 4), np.nan)
        saturation = np.full((curves, quantities), np.nan)
        for curve, quantity, repeat, known, known_fits, known_saturation, chunks in self.sizes[size]:
            fits = np.empty((len(known), n - 1, 4))
            limits = np.empty(len(known))
            fits[known], limits[known] = known_fits, known_saturation
            if chunks:
                fits[~known] = np.concatenate([self.results[chunk][0] for chunk in chunks])
                limits[~known] = np.concatenate([self.results[chunk][1] for chunk in chunks])
            parameters[curve, quantity] = fits[repeat]
            saturation[curve, quantity] = limits[repeat]
        return parameters, saturation


def _fit_chunks(chunks: list[tuple[np.ndarray, np.ndarray]], parallel: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """_fit_chunk of every chunk, in order: here, or (`parallel`) here and in a worker process per other
    core, this process taking the chunks from the first and the workers from the last until they meet."""
    workers = len(os.sched_getaffinity(0)) - 1
    if not parallel or workers < 1:
        return [_fit_chunk(*chunk) for chunk in chunks]
    # Spawned, not forked, as ingest's workers: a fork would copy this process's memory (the build's
    # DuckDB among it) and any library threads.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=ignore_interrupts)
    try:
        # Submitted last first, so that the workers start from the end. A chunk no worker has taken yet is
        # cancelled and fitted here: this process works from the start while the workers import numpy and
        # scipy (0.7 s), and no process waits for the others but for the last chunk.
        futures = [pool.submit(_fit_chunk, *chunk) for chunk in reversed(chunks)][::-1]
        return [_fit_chunk(*chunk) if future.cancel() else future.result() for chunk, future in zip(chunks, futures)]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # an error stops the rest


def fit_curves(points: pyarrow.Table) -> pyarrow.Table:
    """One row per deployment × quantity of the points (efficiency_curve_points_in's rows): the fitted
    parameters, the points' batch range, the in-sample and leave-one-out relative errors, whether it is
    fit for use and why not, the value the curve settles at and the batch limit where it settles."""
    order = pc.sort_indices(points, [(name, "ascending") for name in (*DEPLOYMENT, "batch_limit")])
    # The build reads the points in this order already: a sorted copy would be the largest thing held here
    # (480 MB of the 1000x snapshot's 1,855,000 points).
    in_order = len(order) == 0 or pc.all(pc.equal(order, pyarrow.array(np.arange(len(order))))).as_py()
    table = points if in_order else points.take(order)
    starts = _curve_starts(table)
    sizes = np.diff(np.append(starts, table.num_rows))
    # Each curve's kind, its family and unit label, which name its rows' quantities and units (_table).
    kinds: dict[tuple[str, str], int] = {}
    kind = np.array([kinds.setdefault(pair, len(kinds)) for pair in zip(
        table["family"].take(starts).to_pylist(), table["unit_label"].take(starts).to_pylist())], dtype=np.intp)
    quantities = len(_quantities("token")) if len(starts) else 0  # as many for every family
    batch_limit = table["batch_limit"].to_numpy()
    # (rows, quantities): each curve's own quantities, in the order of its rows below.
    is_token = np.asarray(pc.equal(table["family"], "token").to_numpy(zero_copy_only=False))
    values = np.stack([table[QUANTITIES[name][0]].to_numpy(zero_copy_only=False).astype(float)
                       for name in ("energy", "gpu_power", "throughput")]
                      + [np.where(is_token, table["median_itl_ms"].to_numpy(zero_copy_only=False).astype(float),
                                  table["batch_latency_s"].to_numpy(zero_copy_only=False).astype(float))], axis=1)

    rows = len(starts) * quantities
    columns: dict[str, Any] = {name: np.full(rows, np.nan) for name in (
        "L", "x0", "k", "b0", "in_sample_median_error", "in_sample_max_error", "leave_one_out_median_error",
        "leave_one_out_max_error")}
    columns["saturation_x"] = np.full(rows, np.nan)
    monotone = np.zeros(rows, dtype=bool)
    fitted = np.zeros(rows, dtype=bool)
    # Every size's series are gathered first, so that they are fitted together (in worker processes at scale).
    to_fit, by_size = _Series(remember=table.num_rows <= REMEMBER_MAX_POINTS), []
    for n in np.unique(sizes):
        curves = np.flatnonzero(sizes == n)
        at = starts[curves][:, None] + np.arange(n)  # (curves, points)
        y = values[at]  # (curves, points, quantities)
        out = (curves[:, None] * quantities + np.arange(quantities)).reshape(-1)  # the curves' rows
        steps = np.diff(y, axis=1)
        monotone[out] = ((steps >= 0).all(axis=1) | (steps <= 0).all(axis=1)).reshape(-1)
        if n < MIN_POINTS:
            continue
        finite = np.isfinite(y).all(axis=1)  # (curves, quantities)
        x = np.log2(batch_limit[at].astype(float))
        by_size.append((n, x, y, out, finite, to_fit.add(x, y, finite)))
    to_fit.fit()
    for n, x, y, out, finite, size in by_size:
        parameters, saturation = to_fit.parameters(size, y)  # (curves, quantities, fits, 4), (curves, quantities)
        L, x0, k, b0 = np.moveaxis(parameters[:, :, 0], -1, 0)  # each (curves, quantities)
        series = y.transpose(0, 2, 1)  # (curves, quantities, points)
        errors = np.abs(logistic(x[:, None, :], L[..., None], x0[..., None], k[..., None], b0[..., None]) - series) \
            / np.abs(series)
        # Fit i leaves point i out; its error is the prediction's there.
        interior = series[:, :, 1:n - 1]
        L_i, x0_i, k_i, b0_i = np.moveaxis(parameters[:, :, 1:n - 1], -1, 0)
        left_out = np.abs(logistic(x[:, None, 1:n - 1], L_i, x0_i, k_i, b0_i) - interior) / np.abs(interior)
        keep = out[finite.reshape(-1)]
        for name, value in (("L", L), ("x0", x0), ("k", k), ("b0", b0),
                            ("in_sample_median_error", np.median(errors, axis=2)),
                            ("in_sample_max_error", errors.max(axis=2)),
                            ("leave_one_out_median_error", np.median(left_out, axis=2)),
                            # Python's max, as the rows were first computed: a NaN counts only in first place.
                            ("leave_one_out_max_error", np.where(np.isnan(left_out[..., 0]), np.nan,
                                                                 np.fmax.reduce(left_out, axis=2))),
                            ("saturation_x", saturation)):
            columns[name][keep] = value[finite]
        fitted[keep] = True
    return _table(table, starts, sizes, kinds, kind, quantities, columns, monotone, fitted)


def _table(table: pyarrow.Table, starts: np.ndarray, sizes: np.ndarray, kinds: dict[tuple[str, str], int],
           kind: np.ndarray, quantities: int, columns: dict[str, np.ndarray], monotone: np.ndarray,
           fitted: np.ndarray) -> pyarrow.Table:
    """The rows of fit_curves: each curve's deployment, then a row per quantity."""
    first = np.repeat(starts, quantities)
    # Each row's quantity and unit: those of its curve's kind (family, unit label), at its place in the curve.
    of_kind = pyarrow.array((kind[:, None] * quantities + np.arange(quantities)).reshape(-1))
    names = pyarrow.array([name for family, _ in kinds for name in _quantities(family)], pyarrow.string())
    units = pyarrow.array([QUANTITIES[name][1] or _unit_of(name, family, label)
                           for family, label in kinds for name in _quantities(family)], pyarrow.string())
    L, k, b0 = columns["L"], columns["k"], columns["b0"]
    settled = np.where(k > 0, b0 + L, b0)  # none where it is zero or below (saturation_x)
    saturation_limit = np.full(len(first), np.nan)
    saturation_limit[fitted] = [float(2.0 ** x) for x in columns["saturation_x"][fitted].tolist()]  # NaN: none
    too_few, in_sample_max = ~fitted, columns["in_sample_max_error"]
    status = np.where(too_few, "too few points", np.where(~monotone, "not monotone", np.where(
        in_sample_max > MAX_IN_SAMPLE_ERROR, "error above bound", "fit for use")))
    n_points = np.repeat(sizes, quantities)
    batch_limit = table["batch_limit"]
    data = {name: table[name].take(first) for name in DEPLOYMENT} | {
        "unit_label": table["unit_label"].take(first),
        "quantity": names.take(of_kind),
        "unit": units.take(of_kind),
        "n_points": n_points,
        "min_batch_limit": batch_limit.take(first),
        "max_batch_limit": batch_limit.take(first + n_points - 1),
        "is_monotone": monotone,
    } | {name: pyarrow.array(columns[name], mask=too_few) for name in (
        "L", "x0", "k", "b0", "in_sample_median_error", "in_sample_max_error", "leave_one_out_median_error",
        "leave_one_out_max_error")} | {
        "settled_value": pyarrow.array(settled, mask=too_few | ~(settled > 0)),
        "saturation_batch_limit": pyarrow.array(saturation_limit, mask=too_few | np.isnan(saturation_limit)),
        "fit_status": pyarrow.array(status, pyarrow.string()),
        "is_fit_for_use": status == "fit for use",
    }
    return pyarrow.table({name: data[name] for name in FITS_SCHEMA.names}, schema=FITS_SCHEMA)


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
