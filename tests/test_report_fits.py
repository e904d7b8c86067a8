"""A model page's fitted curves are efficiency_curve_fits' rows: each energy fit of the model in the
index snapshot is drawn over its measured points (efficiency_curve_points_in), its line is the stored
logistic across the measured batch limits, and its status and largest miss are written in the page's text."""

import html
import math
import re
from pathlib import Path

import msgspec
import pytest
from scipy.special import expit

from conftest import write_once

from pipeline.database import connect, fetch_dicts
from pipeline.fits import MAX_IN_SAMPLE_ERROR, MIN_POINTS
from pipeline.paths import Paths
from pipeline.report import DEPLOYMENT

# A token model with a fit for use and one above the bound, and a diffusion model with many deployments.
PAGES = {"qwen3-8b": ("Qwen/Qwen3-8B", "lm-arena-chat"),
         "stable-diffusion-3.5-medium": ("stabilityai/stable-diffusion-3.5-medium", "text-to-image")}

# Each writes the HTML report (make test-all runs them; see pyproject.toml's markers).
pytestmark = pytest.mark.report


@pytest.fixture(scope="module")
def report(newest_build: Paths) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENERGY_INDEX_REPORT_PNGS", "lm-arena-chat-frontier")  # as tests/test_report.py draws it
        write_once(newest_build, "report")
    return newest_build.out / "report"


def stored(build: Paths, query: str, model_id: str, task: str) -> list[dict]:
    with connect(str(build.database), read_only=True) as connection:
        return fetch_dicts(connection, query.format(deployment=DEPLOYMENT), {"model": model_id, "task": task})


def page_text(page: str) -> str:
    """What a reader reads: the page without its scripts and tags."""
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<script.*?</script>", "", page, flags=re.S)))


def fit_table(page: str, task: str) -> list[list[str]]:
    section = re.search(rf'<section id="{task}">(.*?)</section>', page, re.S).group(1)
    body = re.search(r'<table class="sortable fit-table">.*?<tbody>(.*?)</tbody>', section, re.S).group(1)
    return [[html.unescape(re.sub(r"<[^>]+>", "", cell)) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body)]


def reads_as(fraction: float) -> str:
    value = 100 * fraction
    return f"{value:.1f}\u00a0%" if value < 1 else f"{value:,.0f}\u00a0%"  # no break before the %


@pytest.mark.parametrize("slug", PAGES)
def test_a_model_page_draws_its_stored_fits_and_says_how_good_they_are(report: Path, newest_build: Paths,
                                                                       slug: str) -> None:
    model_id, task = PAGES[slug]
    page = (report / "models" / f"{slug}.html").read_text(encoding="utf-8")
    charts = msgspec.json.decode(re.search(r"const charts = (.*?);\n", page, re.S).group(1).replace("<\\/", "</"))
    rows = charts[f"{task}-fits"]["datasets"]["fit_curves"]
    fits = stored(newest_build, """
        select {deployment} as deployment, * from efficiency_curve_fits
        where snapshot_id = (select snapshot_id from index_snapshot) and quantity = 'energy' and task = $task
            and model_id = $model order by gpu, num_gpus, deployment""", model_id, task)
    points = stored(newest_build, """
        select {deployment} as deployment, gpu, batch_limit, n_repeats, wh_per_unit
        from efficiency_curve_points_in((select snapshot_id from index_snapshot))
        where task = $task and model_id = $model""", model_id, task)
    assert fits and {fit["fit_status"] for fit in fits} - {"fit for use"}, "the page should show unfit curves too"
    text = " ".join(page_text(page).split())
    table = fit_table(page, task)
    assert len(table) == len(fits)
    for fit, cells in zip(fits, table):
        where = (fit["gpu"], fit["deployment"])
        assert cells[:4] == [fit["gpu"], fit["deployment"], str(fit["n_points"]),
                             f"{fit['min_batch_limit']:,} to {fit['max_batch_limit']:,}"]
        # The status in words, in the table and in the panel's heading (the chart's text).
        label = cells[4]
        if fit["fit_status"] == "too few points":
            assert label.startswith("not fitted") and str(MIN_POINTS) in label
        else:
            assert label.startswith("fit for use" if fit["is_fit_for_use"] else "not fit for use"), where
            assert reads_as(fit["in_sample_max_error"]) in label, where
            assert ("not monotone" in label) == (fit["fit_status"] == "not monotone"), where
            assert (f"above the {reads_as(MAX_IN_SAMPLE_ERROR)} bound" in label) == (
                fit["fit_status"] == "error above bound"), where
        assert " ".join(label.split()) in text
        panel = [row for row in rows if (row["gpu"], row["deployment"]) == where]
        assert {row["panel"] for row in panel} and all(
            " ".join(row["panel"].split("|")) == f"{fit['gpu']}, {fit['deployment']} {label}" for row in panel)
        # The measured points: the macro's, repeats averaged, rounded as the index files round energy.
        measured = [row for row in panel if row["kind"] == "measured"]
        expected = sorted((p["batch_limit"], p["n_repeats"], p["wh_per_unit"]) for p in points
                          if (p["gpu"], p["deployment"]) == where)
        assert [(row["batch_limit"], row["n_repeats"]) for row in measured] == [e[:2] for e in expected]
        for row, (_, _, wh) in zip(measured, expected):
            assert row["wh_per_unit"] == pytest.approx(wh, rel=5e-3, abs=1e-4)
        # The line: the stored logistic, from the smallest to the largest measured batch limit; thin and
        # grey (is_fit_for_use false) where not fit for use; none where nothing was fitted.
        line = [row for row in panel if row["kind"] == "fitted"]
        if fit["L"] is None:
            assert not line
            continue
        assert {row["is_fit_for_use"] for row in line} == {fit["is_fit_for_use"]}
        assert line[0]["batch_limit"] == pytest.approx(fit["min_batch_limit"], rel=1e-12)
        assert line[-1]["batch_limit"] == pytest.approx(fit["max_batch_limit"], rel=1e-12)
        assert len(line) > 2 * fit["n_points"]
        for row in line:
            x = math.log2(row["batch_limit"])
            logistic = fit["b0"] + fit["L"] * expit(fit["k"] * (x - fit["x0"]))
            assert row["fitted_wh_per_unit"] == pytest.approx(logistic, rel=1e-9), where
