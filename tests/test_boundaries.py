"""Boundaries: the index's GPU-only figures at the server and at the facility, with the factors'
ranges and sources (pipeline/boundary_factors.toml), on literal rows and on the newest snapshot."""

import json
import re
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import cli as energy_index
from test_views import connect, diffusion_measured, fetch, measured

from pipeline.reference_tables import load_boundary_factors
from pipeline.cli import all_commands
from pipeline.errors import PipelineError
from pipeline.paths import BOUNDARY_FACTORS, Paths
from pipeline.settings import BOUNDARIES
from schemas import dictionary

CLI = str(Path(sys.executable).with_name("energy-index"))

# Two server sources (one central) and one facility source: ranges server 1.2 / 1.5 / 2.0, facility 1.1 / 1.2 / 1.4.
LITERAL_FACTORS = [
    ("server", 1.5, 1.5, 1.5, True),
    ("server", 1.2, 1.3, 2.0, False),
    ("facility", 1.1, 1.2, 1.4, True),
]


def with_literal_factors(connection: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    connection.execute("delete from boundary_factors")
    for number, (boundary, low, central, high, is_central) in enumerate(LITERAL_FACTORS):
        connection.execute(
            "insert into boundary_factors values (?, ?, ?, ?, ?, null, ?, 'covers', 'derivation', ?,"
            " 'https://example.org', 2025, 'quoted')",
            [f"source-{number}", boundary, low, central, high, is_central, f"source {number}"])
    return connection


def test_boundary_ranges_span_the_sources_and_take_the_central_rows_figure() -> None:
    connection = with_literal_factors(connect([measured()]))
    assert fetch(connection, """
        select boundary, factor_low, factor_central, factor_high, source_count, central_source
        from boundary_factor_ranges where gpu = 'H100' order by boundary""") == [
        ("facility", 1.1, 1.2, 1.4, 1, "source-2"),
        ("server", 1.2, 1.5, 2.0, 2, "source-0"),
    ]


def test_index_boundaries_scale_each_index_row_low_with_low_and_high_with_high() -> None:
    connection = with_literal_factors(connect(
        [measured(energy_per_token_joules=3.6)],  # 1000 Wh per million output tokens
        diffusion=[diffusion_measured()],  # 0.1 Wh per image
    ))
    rows = fetch(connection, """
        select task, boundary, boundary_position, unit_label, wh_per_unit, wh_per_unit_low, wh_per_unit_central,
               wh_per_unit_high
        from index_boundaries order by task, boundary_position""")
    # gpu_only is the index figure itself, exactly.
    assert [row[:8] for row in rows if row[1] == "gpu_only"] == [
        ("lm-arena-chat", "gpu_only", 1, "million output tokens", 1000.0, 1000.0, 1000.0, 1000.0),
        ("text-to-image", "gpu_only", 1, "image", 0.1, 0.1, 0.1, 0.1),
    ]
    token = {row[1]: row[5:] for row in rows if row[0] == "lm-arena-chat"}
    assert token["server"] == pytest.approx((1200.0, 1500.0, 2000.0))
    assert token["facility"] == pytest.approx((1320.0, 1800.0, 2800.0))
    image = {row[1]: row[5:] for row in rows if row[0] == "text-to-image"}
    assert image["facility"] == pytest.approx((0.132, 0.18, 0.28))
    # facility is the server figure times the facility factor, to the bit.
    assert token["facility"] == tuple(s * f for s, f in zip(token["server"], (1.1, 1.2, 1.4)))


def test_the_shipped_factors_each_carry_a_source_a_url_a_year_and_the_quoted_figure() -> None:
    rows = load_boundary_factors()
    assert {row["boundary"] for row in rows} == {"server", "facility"}
    connection = connect([measured()])
    for row in rows:
        assert row["source"].strip() and row["quoted_figure"].strip() and row["covers"].strip()
        assert re.match(r"https://[\w.-]+\.\w+/", row["url"]), row["url"]
        assert 2000 <= row["year"] <= 2100
        # The derivation states the arithmetic that gives each of the row's figures on every GPU.
        for gpu, low, central, high in connection.execute(
                "select gpu, factor_low, factor_central, factor_high from boundary_factors_by_gpu where id = ?",
                [row["id"]]).fetchall():
            assert 1 <= low <= central <= high
            for figure in {low, central, high}:
                assert f"{figure:.2f}" in row["derivation"], (row["source"], gpu, figure)
    # The ranges the sources span on each GPU and the stated central choices.
    assert fetch(connection, """
        select boundary, gpu, factor_low, factor_central, factor_high, source_count
        from boundary_factor_ranges order by boundary, gpu""") == [
        ("facility", "B200", 1.09, 1.2, 1.59, 3),
        ("facility", "H100", 1.09, 1.2, 1.59, 3),
        ("server", "B200", 1.15, 1.6, 1.6, 2),
        ("server", "H100", 1.21, 1.6, 1.6, 2),
    ]


def write_factors(path: Path, rows: list[dict]) -> Path:
    def value(item: object) -> str:
        return json.dumps(item) if not isinstance(item, bool) else str(item).lower()

    path.write_text("".join(
        "[[factor]]\n" + "".join(f"{key} = {value(item)}\n" for key, item in row.items()) + "\n" for row in rows
    ))
    return path


def valid_rows() -> list[dict]:
    base = {"factor_low": 1.1, "factor_central": 1.2, "factor_high": 1.3, "central": True, "covers": "c",
            "derivation": "d", "source": "s", "url": "https://example.org/a", "year": 2025, "quoted_figure": "q"}
    return [{"id": "a", "boundary": "server", **base}, {"id": "b", "boundary": "facility", **base}]


@pytest.mark.parametrize("damage, expected", [
    (lambda rows: rows[0].pop("url"), r"missing required field `url` - at `\$\.factor\[0\]`"),
    (lambda rows: rows[1].update(pue=1.5), r"unknown field `pue` - at `\$\.factor\[1\]`"),
    (lambda rows: rows[0].update(factor_low="1.1"), r"Expected `float \| null`, got `str` - at `\$\.factor\[0\]\.factor_low`"),
    (lambda rows: rows[0].update(year=True), r"Expected `int`, got `bool` - at `\$\.factor\[0\]\.year`"),
    (lambda rows: rows[0].update(boundary="rack"), r"Invalid enum value 'rack' - at `\$\.factor\[0\]\.boundary`"),
    (lambda rows: rows[1].update(factor_low=1.4), r"\$\.factor\[1\]: factors must satisfy 1 <= factor_low <= factor_central"),
    (lambda rows: rows[1].update(central=False), r"boundary facility: needs exactly one row with central = true, has 0"),
    (lambda rows: rows[0].update(url="example.org"), r"Expected `str` matching regex '\^https://' - at `\$\.factor\[0\]\.url`"),
    (lambda rows: rows[0].update(covers=" "), r"- at `\$\.factor\[0\]\.covers`"),
    (lambda rows: rows[0].update(factor_low=0.9), r"Expected `float` >= 1.0 - at `\$\.factor\[0\]\.factor_low`"),
    (lambda rows: rows[0].update(host_watts_per_gpu=150.0), r"\$\.factor\[0\]: host_watts_per_gpu derives the factors"),
    (lambda rows: rows[0].pop("factor_high"), r"\$\.factor\[0\]: needs factor_low, factor_central and factor_high"),
    (lambda rows: rows[1].update(id="a"), r"id a: used by more than one factor"),
])
def test_a_damaged_factor_file_is_refused_naming_the_file_and_the_key(tmp_path: Path, damage, expected) -> None:
    rows = valid_rows()
    assert len(load_boundary_factors(write_factors(tmp_path / "ok.toml", rows))) == 2
    damage(rows)
    path = write_factors(tmp_path / "factors.toml", rows)
    with pytest.raises(PipelineError) as refused:
        load_boundary_factors(path)
    message = " ".join([str(refused.value), *refused.value.details])
    assert str(path) in message and re.search(expected, message), message


def test_the_factor_file_has_exactly_the_tables_columns() -> None:
    assert list(load_boundary_factors(BOUNDARY_FACTORS)[0]) == list(dictionary.table_entry("boundary_factors").columns)


def test_on_the_newest_snapshot_every_index_row_has_three_boundaries_in_order(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        index_rows = connection.execute("select count(*) from best_configurations").fetchone()[0]
        counts = dict(connection.execute("select boundary, count(*) from index_boundaries group by all").fetchall())
        assert index_rows > 100 and counts == {"gpu_only": index_rows, "server": index_rows, "facility": index_rows}
        # gpu_only is the index figure, exactly; the unit is the index row's.
        assert connection.execute("""
            select count(*) from best_configurations as b join index_boundaries as i using (task, model_id, gpu)
            where i.boundary = 'gpu_only' and not (i.wh_per_unit_low = b.wh_per_unit and i.wh_per_unit_central = b.wh_per_unit
                and i.wh_per_unit_high = b.wh_per_unit and i.unit_label = b.unit_label and i.row_id = b.row_id)
            """).fetchone()[0] == 0
        # low <= central <= high at every boundary, and facility >= server >= gpu_only at every level.
        disorder = connection.execute("""
            with wide as (
                select task, model_id, gpu,
                    max(wh_per_unit_low) filter (where boundary = 'gpu_only') as g_low,
                    max(wh_per_unit_central) filter (where boundary = 'gpu_only') as g_central,
                    max(wh_per_unit_high) filter (where boundary = 'gpu_only') as g_high,
                    max(wh_per_unit_low) filter (where boundary = 'server') as s_low,
                    max(wh_per_unit_central) filter (where boundary = 'server') as s_central,
                    max(wh_per_unit_high) filter (where boundary = 'server') as s_high,
                    max(wh_per_unit_low) filter (where boundary = 'facility') as f_low,
                    max(wh_per_unit_central) filter (where boundary = 'facility') as f_central,
                    max(wh_per_unit_high) filter (where boundary = 'facility') as f_high
                from index_boundaries group by task, model_id, gpu
            )
            select count(*) from wide where not (
                g_low <= g_central and g_central <= g_high and s_low <= s_central and s_central <= s_high
                and f_low <= f_central and f_central <= f_high
                and g_low <= s_low and s_low <= f_low and g_central <= s_central and s_central <= f_central
                and g_high <= s_high and s_high <= f_high)""").fetchone()[0]
        assert disorder == 0
        # facility = server × the facility factor, low with low and high with high.
        assert connection.execute("""
            select count(*) from index_boundaries as s
            join index_boundaries as f using (task, model_id, gpu)
            join (select * from boundary_factor_ranges where boundary = 'facility') as k using (gpu)
            where s.boundary = 'server' and f.boundary = 'facility' and not (
                f.wh_per_unit_low = s.wh_per_unit_low * k.factor_low
                and f.wh_per_unit_central = s.wh_per_unit_central * k.factor_central
                and f.wh_per_unit_high = s.wh_per_unit_high * k.factor_high)""").fetchone()[0] == 0


def test_estimate_scales_to_the_boundary_and_labels_it(newest_build: Paths) -> None:
    arguments = [CLI, "estimate", "--out", str(newest_build.out), "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B",
                 "--gpu", "H100", "--concurrency", "100", "--format", "json"]
    documents = {}
    for boundary in BOUNDARIES:
        done = energy_index(*arguments[1:], "--boundary", boundary)
        assert done.returncode == 0, done.stderr
        documents[boundary] = json.loads(done.stdout)
    measured = documents["gpu_only"]["deployments"][0]
    gpu = measured["wh_per_unit"]
    assert documents["gpu_only"]["boundary_multipliers"] == {"low": 1.0, "central": 1.0, "high": 1.0}
    server, facility = documents["server"]["deployments"][0], documents["facility"]["deployments"][0]
    assert (server["boundary_wh_per_unit_low"], server["wh_per_unit"], server["boundary_wh_per_unit_high"]) == (
        pytest.approx((gpu * 1.21, gpu * 1.6, gpu * 1.6)))
    assert (facility["boundary_wh_per_unit_low"], facility["wh_per_unit"], facility["boundary_wh_per_unit_high"]) == (
        pytest.approx((gpu * 1.21 * 1.09, gpu * 1.6 * 1.2, gpu * 1.6 * 1.59)))
    # Every energy figure moves with the central factor: the repeat interval and the measured points too.
    for field in ("wh_per_unit_low", "wh_per_unit_high", "lower_wh_per_unit", "upper_wh_per_unit"):
        assert facility[field] == pytest.approx(measured[field] * 1.6 * 1.2)
    assert documents["facility"]["boundary"] == "facility" and documents["facility"]["min_wh_per_unit"] == facility["wh_per_unit"]
    text = energy_index(*arguments[1:-2], "--boundary", "server").stdout
    assert "server boundary: GPU energy × 1.6 (range 1.21 to 1.6; assumed factors" in text
    assert f"{gpu * 1.6:.4g} (boundary factors give {gpu * 1.21:.4g} to {gpu * 1.6:.4g})" in text


def test_the_cli_offers_the_boundaries_the_query_knows() -> None:
    option = next(parameter for parameter in all_commands()["estimate"].params if parameter.name == "boundary")
    assert tuple(option.type.choices) == BOUNDARIES and option.default == "gpu_only"
