"""The report as a reader meets it: the index page and model pages open offline in Debian's chromium,
every chart draws, a point's tooltip says what it is, a legend click highlights one model, and no chart
leaves two models looking alike."""

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from conftest import write_once

from pipeline.paths import Paths
from pipeline.charts import (GPU_COLOURS, GPU_SHAPES, MODEL_COLOURS, MODEL_SHAPES, Metric, _model_curves,
                             _model_estimate, _model_frontier, _model_history, _model_latency_cost, alt,
                             ambiguous_encodings, chart_template, filled)
from pipeline.report_fits import _fits_chart

# Each writes the HTML report (make test-all runs them; see pyproject.toml's markers).
pytestmark = pytest.mark.report

CLI = str(Path(sys.executable).with_name("energy-index"))
HIGHLIGHTED_MODEL = "Qwen/Qwen3-8B"
MODEL_PAGES = ("llama-3.1-70b-instruct", "stable-diffusion-3.5-medium")
# The one index chart the shared report draws as a PNG: drawing all of them took most of its time (the slow
# test draws every one).
PNG_CHART = "lm-arena-chat-frontier"

# Runs in its own process: Playwright's synchronous API wants a thread with no event loop of its own.
PAGE_CHECK = r"""
import re, sys
import msgspec
from playwright.sync_api import sync_playwright

index, models, shot, highlighted = sys.argv[1], msgspec.json.decode(sys.argv[2]), sys.argv[3], sys.argv[4]
outcome = {"errors": [], "requests": [], "pages": {}}
DRAWN = "[...document.querySelectorAll('.chart')].every(c => c.dataset.drawn === 'true')"
CHARTS = '''els => els.map(e => ({
    id: e.id, marks: e.querySelectorAll('.role-mark path, .role-mark text').length,
    legends: [...e.querySelectorAll('.role-legend')].filter(l => l.querySelector('.role-legend-symbol')).map(l => [...l.querySelectorAll('.role-legend-label text')]
        .map(t => t.textContent)),
    width: e.getBoundingClientRect().width}))'''
SYMBOLS = '''els => els.map(e => [e.getAttribute('aria-label') || '', e.getAttribute('opacity')])'''


def tooltip(page, selector):
    page.hover(selector, force=True)
    page.wait_for_selector("#vg-tooltip-element.visible", timeout=10000)
    return page.inner_text("#vg-tooltip-element")


with sync_playwright() as p:
    browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"])
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("console", lambda m: outcome["errors"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: outcome["errors"].append(str(e)))
    page.on("request", lambda r: outcome["requests"].append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    for url in [index, *models]:
        page.goto(url)
        page.wait_for_function(DRAWN, timeout=120000)
        outcome["pages"][url] = {
            "charts": page.eval_on_selector_all(".chart", CHARTS),
            "scroll_width": page.evaluate("document.documentElement.scrollWidth"),
        }
        if url == index:
            page.screenshot(path=shot)
            chart = "#lm-arena-chat-frontier"
            outcome["index_tooltip"] = tooltip(page, f"{chart} .mark-symbol.role-mark path >> nth=3")
            exactly = re.compile("^" + re.escape(highlighted) + "$")
            page.locator(f"{chart} .role-legend-label text").filter(has_text=exactly).click()
            page.wait_for_function(
                "s => [...document.querySelectorAll(s)].some(e => Number(e.getAttribute('opacity') ?? 1) < 0.5)",
                arg=f"{chart} .mark-symbol.role-mark path", timeout=10000)
            outcome["symbols_after_click"] = page.eval_on_selector_all(f"{chart} .mark-symbol.role-mark path", SYMBOLS)
            table = "#lm-arena-chat table.index-table"
            page.click(f"{table} th[data-column='0']")
            outcome["models_sorted"] = page.eval_on_selector_all(f"{table} tbody tr", "rows => rows.map(r => r.cells[0].textContent)")
        else:
            outcome["pages"][url]["tooltip"] = tooltip(page, "[id$='-frontier'] .mark-symbol.role-mark path >> nth=-1")
    browser.close()
print(msgspec.json.encode(outcome).decode())
"""


@pytest.fixture(scope="module")
def report(newest_build: Paths) -> Path:
    """OUT/report of the shared newest build, written once: each xdist worker has its own module fixture,
    and two reports at once into one OUT would meet its lock."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENERGY_INDEX_REPORT_PNGS", PNG_CHART)
        write_once(newest_build, "report")
    return newest_build.out / "report"


def table_rows(page: Path, task: str, css_class: str) -> list[list[str]]:
    """The cells' text of the first table of `css_class` in the task's section of a report page."""
    section = re.search(rf'<section id="{task}">(.*?)</section>', page.read_text(encoding="utf-8"), re.S).group(1)
    table = re.search(rf'<table class="sortable {css_class}">(.*?)</table>', section, re.S).group(1)
    body = table.split("<tbody>")[1]
    return [[html.unescape(re.sub(r"<[^>]+>", "", re.sub(r'<span class="config">.*?</span>', "", cell)))
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", body)]


def test_the_report_shows_the_index_files_figures_as_they_round_them(report: Path, newest_build: Paths) -> None:
    index = msgspec.json.decode((newest_build.index_dir / "lm-arena-chat" / "index.json").read_bytes())["rows"]
    shown = table_rows(report / "index.html", "lm-arena-chat", "index-table")
    # Ordered by the figure, every figure as index.json writes it (8.08 and 7.9, not 8.082 and 7.902).
    assert [(row[0], row[1], row[6]) for row in shown] == [
        (row["model_id"], row["gpu"], repr(row["wh_per_million_output_tokens"]))
        for row in sorted(index, key=lambda row: (row["wh_per_million_output_tokens"], row["model_id"].lower()))]
    assert [row[5] for row in shown] == [repr(row["median_itl_ms"]) for row in sorted(
        index, key=lambda row: (row["wh_per_million_output_tokens"], row["model_id"].lower()))]
    # Every latency metric's tiers, as tiers.json holds them, the models ordered without regard to case.
    tiers = msgspec.json.decode((newest_build.index_dir / "lm-arena-chat" / "tiers.json").read_bytes())["rows"]
    shown_tiers = table_rows(report / "index.html", "lm-arena-chat", "tier-table")
    limits = [(metric, limit) for metric in ("median_itl_ms", "p90_itl_ms", "p99_itl_ms") for limit in (25, 50, 100, 200, 500)]
    expected: dict[tuple[str, str], list[str]] = {}
    for row in tiers:
        cells = expected.setdefault((row["model_id"], row["gpu"]), [""] * len(limits))
        cells[limits.index((row["latency_metric"], row["latency_limit"]))] = repr(row["wh_per_unit"])
    assert [(row[0], row[1]) for row in shown_tiers] == sorted(expected, key=lambda key: (key[0].lower(), key[1]))
    assert {(row[0], row[1]): row[2:] for row in shown_tiers} == expected
    # Each model's name links to its page, which exists.
    links = re.findall(r'<a href="(models/[^"]+\.html)">', (report / "index.html").read_text(encoding="utf-8"))
    assert links and all((report / link).is_file() for link in set(links))


def chart_specs(page: Path) -> dict[str, dict]:
    """The Vega-Lite specifications a report page draws (the page's `charts` object)."""
    text = page.read_text(encoding="utf-8")
    found = re.search(r"const charts = (\{.*?\});\nwindow\.reportViews", text, re.S)
    assert found, f"{page}: no chart specifications"
    return msgspec.json.decode(found.group(1).replace("<\\/", "</"))


def png_size(path: Path) -> tuple[int, int]:
    """A PNG's width and height in pixels (its IHDR chunk); fails on anything that is not a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_the_chosen_index_chart_is_drawn_as_a_png(report: Path) -> None:
    assert PNG_CHART in chart_specs(report / "index.html")
    assert [p.name for p in report.glob("*.png")] == [f"{PNG_CHART}.png"]
    # Two GPU panels of 360 px at scale 1.5, with the model legend beside them.
    width, height = png_size(report / f"{PNG_CHART}.png")
    assert width > 1100 and height > 450, (width, height)


@pytest.mark.slow
def test_every_index_chart_is_drawn_as_a_png(newest_build: Paths, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(newest_build.out, out, ignore=shutil.ignore_patterns("report"))
    made = subprocess.run([CLI, "report", "--out", str(out)], capture_output=True, text=True, timeout=900,
                          env={k: v for k, v in os.environ.items() if k != "ENERGY_INDEX_REPORT_PNGS"})
    assert made.returncode == 0, made.stderr
    charts = chart_specs(out / "report" / "index.html")
    assert len(charts) > 20 and sorted(p.stem for p in (out / "report").glob("*.png")) == sorted(charts)
    assert all(min(png_size(path)) > 100 for path in (out / "report").glob("*.png"))


def test_a_chart_that_colours_models_beyond_its_palette_without_another_channel_is_caught() -> None:
    models = [f"org/model-{number}" for number in range(18)]
    colour = {"field": "model_id", "type": "nominal", "scale": {"domain": models, "range": MODEL_COLOURS}}
    chart = {"data": {"name": "rows"}, "datasets": {"rows": [{"model_id": m} for m in models]},
             "mark": "line", "encoding": {"color": colour}}
    assert ambiguous_encodings(chart) == ["model_id: 18 values coloured with 10 colours and no other channel"]
    # The default scheme counts the same: ten colours.
    assert ambiguous_encodings({**chart, "encoding": {"color": {"field": "model_id", "type": "nominal"}}}) == [
        "model_id: 18 values coloured with 10 colours and no other channel"]
    # A shape range whose pairs with the colours repeat (5 shapes and 10 colours: 10 pairs) is caught too.
    few_shapes = {"field": "model_id", "type": "nominal", "scale": {"domain": models, "range": MODEL_SHAPES[:5]}}
    assert ambiguous_encodings({**chart, "encoding": {"color": colour, "shape": few_shapes}}) == [
        "model_id: 18 values but only 10 distinct colour and shape pairs"]
    shapes = {**few_shapes, "scale": {"domain": models, "range": MODEL_SHAPES}}
    assert ambiguous_encodings({**chart, "encoding": {"color": colour, "shape": shapes}}) == []
    # A label or a facet on the model tells the lines apart as well.
    assert ambiguous_encodings({**chart, "encoding": {"color": colour, "text": {"field": "model_id"}}}) == []
    assert ambiguous_encodings({"facet": {"field": "model_id"}, "spec": chart, "datasets": chart["datasets"]}) == []


def test_a_model_pages_chart_filled_from_its_tasks_template_is_the_one_altair_makes_of_its_values() -> None:
    """Each model-page chart is Altair's chart made once per task with slots, then filled page by page
    (pipeline/charts.py: SLOT): filled with a page's values it is byte for byte what Altair makes of them,
    for pages whose lists differ in length (one empty)."""
    metrics = [Metric("median_itl_ms", "median inter-token latency (ms)", "median ITL", "ms"),
               Metric("p90_itl_ms", "p90 inter-token latency (ms)", "p90 ITL", "ms")]
    task = SimpleNamespace(family="llm", metrics=metrics, metric=metrics[0], unit_title="Wh per million tokens",
                           batch_title="max_num_seqs", concurrency_title="requests in flight", chart_templates={})
    tips = dict.fromkeys(("curves", "frontier", "latency-cost", "estimate", "history"),
                         [alt.Tooltip("gpu:N", title="GPU"), alt.Tooltip("wh_per_unit:Q", title="energy")])
    pages = [{"gpus": ["B200", "H100"], "gpu_colours": GPU_COLOURS[:2], "gpu_shapes": GPU_SHAPES[:2],
              "batch_ticks": [8.0, 16.0, 32.0], "energy_ticks": [1.0, 2.0, 5.0], "deployments": ["1 GPU", "2 GPUs"],
              "metric": "median_itl_ms", "metric_options": ["median_itl_ms", "p90_itl_ms"],
              "metric_labels": ["median", "p90"], "latency_ticks": [10.0, 20.0], "concurrency_ticks": [1.0, 100.0],
              "snapshots": ["s1", "s2", "s3"], "panel": "B200, 1 GPU|fit for use", "heading": ["B200", "fit"]},
             {"gpus": ["H100"], "gpu_colours": GPU_COLOURS[1:2], "gpu_shapes": GPU_SHAPES[1:2], "batch_ticks": [],
              "energy_ticks": [0.5], "deployments": ["8 GPUs"], "metric": "p90_itl_ms", "metric_options": ["p90_itl_ms"],
              "metric_labels": ["p90"], "latency_ticks": [], "concurrency_ticks": [2.0], "snapshots": ["s1"],
              "panel": "H100|not fitted", "heading": ["H100", "not fitted"]}]
    charts = {"curves with spread": lambda v: _model_curves(task, tips, v, True),
              "curves": lambda v: _model_curves(task, tips, v, False),
              "frontier": lambda v: _model_frontier(task, tips, v),
              "latency-cost": lambda v: _model_latency_cost(task, tips, v),
              "estimate": lambda v: _model_estimate(task, tips, v),
              "history": lambda v: _model_history(task, tips, v, 200), "fits": lambda v: _fits_chart(task, v)}
    with alt.utils.schemapi.debug_mode(False):
        for name, build in charts.items():
            for values in pages:
                template = chart_template(task, (name,), build, values)
                made = build(values).to_dict(validate=True)
                assert msgspec.json.encode(filled(template, values)) == msgspec.json.encode(made), (name, values)
                assert template != made  # it has slots


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_report_reads_offline_with_tooltips_highlighting_and_distinct_models(report: Path, tmp_path: Path) -> None:
    pytest.importorskip("playwright", reason="the interop extra is not installed (make test installs it)")
    index = report / "index.html"
    models = [report / "models" / f"{slug}.html" for slug in MODEL_PAGES]
    result = subprocess.run(
        [sys.executable, "-c", PAGE_CHECK, index.as_uri(), msgspec.json.encode([m.as_uri() for m in models]).decode(),
         str(tmp_path / "shot.png"), HIGHLIGHTED_MODEL], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    outcome = msgspec.json.decode(result.stdout)
    assert outcome["errors"] == [] and outcome["requests"] == []

    for url, page in outcome["pages"].items():
        assert page["charts"] and all(chart["marks"] > 0 for chart in page["charts"]), (url, page["charts"])
        for chart in page["charts"]:
            for labels in chart["legends"]:
                assert len(labels) == len(set(labels)), (url, chart["id"], labels)
        assert page["scroll_width"] <= 1280, url
    assert sorted(chart["id"] for chart in outcome["pages"][index.as_uri()]["charts"]) == sorted(chart_specs(index))
    assert (tmp_path / "shot.png").stat().st_size > 10_000

    # No chart leaves two models (or GPUs, or deployments) looking alike, and the check has work to do:
    # the chat task colours 18 models.
    for page in [index, *models]:
        for chart_id, spec in chart_specs(page).items():
            assert ambiguous_encodings(spec) == [], (page.name, chart_id)
    frontier = chart_specs(index)["lm-arena-chat-frontier"]
    assert len(frontier["datasets"]["frontier"]) > 50 and len({r["model_id"] for r in frontier["datasets"]["frontier"]}) == 18

    # A point says what it is: model, configuration, GPUs, batch limit, latency and energy with its unit.
    for text in [outcome["index_tooltip"], *(outcome["pages"][m.as_uri()]["tooltip"] for m in models)]:
        for label in ("configuration", "GPUs", "GPU", "latency"):
            assert label in text, text
    assert "Wh per million output tokens" in outcome["index_tooltip"] and "max_num_seqs" in outcome["index_tooltip"]
    assert "model" in outcome["index_tooltip"]
    assert "Wh per image" in outcome["pages"][models[1].as_uri()]["tooltip"]

    # A click on the model heading sorts the table by model, without regard to case.
    assert outcome["models_sorted"] == sorted(outcome["models_sorted"], key=str.lower)
    assert outcome["models_sorted"] != sorted(outcome["models_sorted"])  # Qwen/ before deepseek-ai/ would be by case

    # A legend click leaves the model's points whole and fades every other model's.
    symbols = outcome["symbols_after_click"]
    chosen = [opacity for label, opacity in symbols if f"model: {HIGHLIGHTED_MODEL};" in label]
    others = [opacity for label, opacity in symbols if f"model: {HIGHLIGHTED_MODEL};" not in label]
    assert chosen and others
    assert all(opacity in (None, "1") for opacity in chosen), chosen
    assert all(float(opacity) < 0.5 for opacity in others), sorted(set(others))


def test_the_report_compares_models_per_output_token_and_per_response_and_only_like_for_like(report: Path) -> None:
    from test_compare import raw_comparisons

    expected = raw_comparisons()
    # The index page: each pair whose ratios point opposite ways, once, A the one higher per output token.
    shown = table_rows(report / "index.html", "lm-arena-chat", "comparison-table")
    assert sorted((row[0], row[1], row[2]) for row in shown) == sorted(
        (a, b, gpu) for (task, gpu, a, b), pair in expected.items()
        if task == "lm-arena-chat" and pair["reversed"] and pair["per_unit"] > 1)
    for row in shown:
        pair = expected["lm-arena-chat", row[2], row[0], row[1]]
        assert float(row[3]) == pytest.approx(pair["per_unit"], abs=5e-4)
        assert float(row[5]) == pytest.approx(pair["per_response"], abs=5e-4)
        assert row[7:9] == [f"{round(tokens):,}" for tokens in pair["tokens"]]
        assert row[-1].startswith("opposite ways: A uses more energy per output token, less per response")
    # Diffusion: every pair once, no k where the workloads differ, the difference named.
    shown = table_rows(report / "index.html", "text-to-image", "comparison-table")
    pairs = {(a, b, gpu) for (task, gpu, a, b) in expected if task == "text-to-image"}
    assert {(row[0], row[1], row[2]) for row in shown} | {(row[1], row[0], row[2]) for row in shown} == pairs
    assert len(shown) == len(pairs) // 2
    for row in shown:
        pair = expected["text-to-image", row[2], row[0], row[1]]
        if pair["difference"]:
            assert row[3:5] == ["", ""] and row[-1] == f"no k: different workloads ({pair['difference']})"
        else:
            assert float(row[3]) == pytest.approx(pair["per_unit"], abs=5e-4) and row[-1] == ""
    assert any(expected["text-to-image", row[2], row[0], row[1]]["difference"] for row in shown)
    # A model's page: every other model on its GPUs, the ratios' disagreement said where it holds.
    model = "meta-llama/Llama-3.1-70B-Instruct"
    shown = table_rows(report / "models" / "llama-3.1-70b-instruct.html", "lm-arena-chat", "comparison-table")
    assert sorted((row[0], row[1]) for row in shown) == sorted(
        (b, gpu) for (task, gpu, a, b) in expected if task == "lm-arena-chat" and a == model)
    for row in shown:
        pair = expected["lm-arena-chat", row[1], model, row[0]]
        assert row[-1].startswith("opposite ways") is pair["reversed"]
        assert float(row[4]) == pytest.approx(pair["per_response"], abs=5e-4)
