"""The report's answer without a mouse: every index row and tier figure printed with its configuration in
the page's text (not only in a tooltip), one meaning for colour on a page and one colour per GPU on every
page, labels across each log axis's range, the tables before the charts, a CSV beside each table and chart,
and a style for print."""

import csv
import html
import io
import re
from pathlib import Path

import msgspec
import pytest

from conftest import read_json, write_once

from pipeline.charts import log_ticks
from pipeline.paths import Paths

# Each writes the HTML report (make test-all runs them; see pyproject.toml's markers).
pytestmark = pytest.mark.report

MODEL_PAGES = ("llama-3.1-70b-instruct", "qwen3-8b", "stable-diffusion-3.5-medium")


@pytest.fixture(scope="module")
def report(newest_build: Paths) -> Path:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENERGY_INDEX_REPORT_PNGS", "lm-arena-chat-frontier")  # as tests/test_report.py draws
        write_once(newest_build, "report")
    return newest_build.out / "report"


def visible_text(page: Path) -> str:
    """What a screenshot or a printout shows of a page's HTML: its text without scripts, styles or attributes
    (so without tooltips)."""
    text = re.sub(r"<(script|style)\b.*?</\1>", "", page.read_text(encoding="utf-8"), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", text))


def sections(page: Path) -> dict[str, str]:
    return dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', page.read_text(encoding="utf-8"), re.S))


def chart_specs(page: Path) -> dict[str, dict]:
    found = re.search(r"const charts = (\{.*?\});\nwindow\.reportViews", page.read_text(encoding="utf-8"), re.S)
    assert found, page
    return msgspec.json.decode(found.group(1).replace("<\\/", "</"))


def nodes(node):
    if isinstance(node, dict):
        yield node
    for value in node.values() if isinstance(node, dict) else node if isinstance(node, list) else ():
        yield from nodes(value)


def cells_text(section: str, css_class: str) -> list[list[str]]:
    table = re.search(rf'<table class="sortable {css_class}">(.*?)</table>', section, re.S).group(1)
    body = table.split("<tbody>")[1]
    return [[" ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell.replace("<wbr>", ""))).split())
             for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)] for row in re.findall(r"<tr>(.*?)</tr>", body)]


@pytest.mark.parametrize("slug", MODEL_PAGES)
def test_each_tier_figure_and_index_row_shows_its_configuration_in_the_pages_text(
        report: Path, newest_build: Paths, slug: str) -> None:
    page = report / "models" / f"{slug}.html"
    shown = visible_text(page)
    checked = 0
    for task, section in sections(page).items():
        tiers = [row for row in read_json(newest_build.index_dir / task / "tiers.json")["rows"]
                 if row["row_id"].startswith(f"{slug}/")]
        index = [row for row in read_json(newest_build.index_dir / task / "index.json")["rows"]
                 if row["row_id"].startswith(f"{slug}/")]
        assert tiers and index, (slug, task)
        # Each index row's configuration beside its figure, in the page's text.
        rows = cells_text(section, "index-table")
        for row in index:
            line = next(cells for cells in rows if cells[0] == row["gpu"])
            assert line[1] == row["row_id"] and row["row_id"] in shown
        # Each tier cell: the figure and, under it, the configuration that gives it.
        tier_cells = {cell for cells in cells_text(section, "tier-table") for cell in cells}
        for row in tiers:
            configuration = row["row_id"].split("/", 2)[2]
            assert f"{row['wh_per_unit']!r} {configuration}" in tier_cells, (task, row)
            checked += 1
    assert checked >= 5


def test_the_index_page_prints_each_rows_configuration_and_runner_up(report: Path, newest_build: Paths) -> None:
    page = report / "index.html"
    rows = cells_text(sections(page)["lm-arena-chat"], "index-table")
    index = read_json(newest_build.index_dir / "lm-arena-chat" / "index.json")["rows"]
    assert {(cells[0], cells[1], cells[2]) for cells in rows} == {(r["model_id"], r["gpu"], r["row_id"]) for r in index}
    assert all(cells[-1].split("/")[0] == cells[2].split("/")[0] for cells in rows if cells[-1])  # the runner-up's
    tiers = read_json(newest_build.index_dir / "lm-arena-chat" / "tiers.json")["rows"]
    tier_cells = {cell for cells in cells_text(sections(page)["lm-arena-chat"], "tier-table") for cell in cells}
    assert all(f"{row['wh_per_unit']!r} {row['row_id'].split('/', 2)[2]}" in tier_cells for row in tiers)


def colour_encodings(spec: dict) -> list[tuple[str, dict]]:
    """(field, definition) of every colour, fill and stroke encoded by a field with a categorical scale."""
    found = []
    for node in nodes({key: value for key, value in spec.items() if key != "datasets"}):
        for channel, definition in (node.get("encoding") or {}).items():
            if channel in ("color", "fill", "stroke") and isinstance(definition, dict) and "field" in definition:
                if definition.get("type") == "nominal" and definition.get("scale") is not None:
                    found.append((definition["field"], definition))
    return found


def test_colour_means_one_thing_on_a_page_and_a_gpu_keeps_its_colour_everywhere(report: Path) -> None:
    gpu_colour: dict[str, str] = {}
    pages = [report / "index.html", *sorted((report / "models").glob("*.html"))]
    for page in pages:
        meanings: set[str] = set()
        colour_of: dict[str, dict[str, str]] = {}
        for chart_id, spec in chart_specs(page).items():
            for name, definition in colour_encodings(spec):
                meanings.add(name)
                scale = definition["scale"]
                assert isinstance(scale.get("range"), list) and isinstance(scale.get("domain"), list), (page, chart_id)
                for value, colour in zip(scale["domain"], scale["range"]):
                    colour_of.setdefault(name, {})
                    assert colour_of[name].setdefault(value, colour) == colour, (page.name, chart_id, value)
            for node in nodes({key: value for key, value in spec.items() if key != "datasets"}):
                dash = (node.get("encoding") or {}).get("strokeDash")
                if isinstance(dash, dict) and isinstance((dash.get("scale") or {}).get("domain"), list):
                    patterns = dash["scale"]["range"][:len(dash["scale"]["domain"])]
                    assert len({tuple(p) for p in patterns}) == len(dash["scale"]["domain"]), (page.name, chart_id)
        # One colour meaning per page: the model on the index page, the GPU on a model's.
        assert meanings == ({"model_id"} if page.name == "index.html" else {"gpu"}), (page.name, meanings)
        for gpu, colour in colour_of.get("gpu", {}).items():
            assert gpu_colour.setdefault(gpu, colour) == colour, (page.name, gpu)
    assert len(gpu_colour) >= 2 and len(set(gpu_colour.values())) == len(gpu_colour)


def test_every_log_axis_is_labelled_across_its_data(report: Path) -> None:
    checked = 0
    for page in [report / "index.html", *(report / "models" / f"{slug}.html" for slug in MODEL_PAGES)]:
        for chart_id, spec in chart_specs(page).items():
            rows = [row for dataset in spec["datasets"].values() for row in dataset]
            for node in nodes({key: value for key, value in spec.items() if key != "datasets"}):
                for channel in ("x", "y"):
                    definition = (node.get("encoding") or {}).get(channel)
                    if not isinstance(definition, dict) or (definition.get("scale") or {}).get("type") != "log":
                        continue
                    values = [row[definition["field"]] for row in rows if row.get(definition["field"])]
                    ticks = (definition.get("axis") or {}).get("values")
                    low, high = min(values), max(values)
                    inside = [tick for tick in ticks or [] if low <= tick <= high]
                    # Two labels at least within the data, and none of its decades without one.
                    assert len(inside) >= 2 or high / low < 1.5, (page.name, chart_id, channel, low, high, ticks)
                    assert max(b / a for a, b in zip([low, *inside], [*inside, high])) <= 10.0001, (
                        page.name, chart_id, channel, low, high, ticks)
                    checked += 1
    assert checked > 20


def test_log_ticks_label_a_range_within_one_decade() -> None:
    assert log_ticks([12.18, 17.0]) == [13.0, 15.0, 17.0]
    assert log_ticks([0.9, 130]) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
    assert log_ticks([3.0, 8.5]) == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    # Qwen3-8B's H100 fit panel: three labels rather than eight, which a small panel would half hide.
    assert log_ticks([21.0, 108.0]) == [30.0, 50.0, 100.0]
    assert log_ticks([None, -1.0]) == []
    # The B200 answer at 12.18 Wh on an axis up to 600: a label at its end, not only from 20 on.
    assert log_ticks([12.18, 600.0]) == [13.0, 20.0, 50.0, 100.0, 200.0, 500.0]


@pytest.mark.parametrize("page", ["index.html", "models/llama-3.1-70b-instruct.html"])
def test_tables_come_first_and_each_table_and_chart_has_its_csv_beside_it(report: Path, page: str) -> None:
    path = report / page
    for task, section in sections(path).items():
        first_chart = section.find('class="chart"')
        assert 0 < section.rfind("</table>") < first_chart, task
        headings = re.findall(r"<h3>.*?</p>", section, re.S)
        assert len(headings) == section.count("<table") + section.count('class="chart"'), task
        for heading in headings:
            links = re.findall(r'<a class="csv" href="([^"]+)" download>', heading)
            assert links, (task, heading)
            for link in links:
                written = (path.parent / link).resolve()
                assert written.is_relative_to(report.resolve()) and written.is_file(), link
    # The index table's CSV holds the index's rows and configurations.
    if page == "index.html":
        rows = list(csv.DictReader(io.StringIO((report / "csv" / "index" / "lm-arena-chat-index.csv").read_text())))
        shown = cells_text(sections(path)["lm-arena-chat"], "index-table")
        assert [(r["model_id"], r["gpu"], r["row_id"]) for r in rows] == [(c[0], c[1], c[2]) for c in shown]


def test_the_pages_have_a_style_for_print(report: Path) -> None:
    text = (report / "index.html").read_text(encoding="utf-8")
    style = re.search(r"@media print \{(.*?)\n\}", text, re.S)
    assert style and "break-inside: avoid" in style.group(1) and ".downloads" in style.group(1)
