"""Boundary factors derived per GPU: a factor that follows from a GPU's power is derived from each GPU's own
rated board power, so B200 and H100 rows use their own server factors (newest snapshot)."""

import duckdb

from pipeline.reference_tables import load_boundary_factors
from pipeline.paths import Paths
from schemas.rules import RATED_BOARD_POWER_W


def test_b200_and_h100_rows_use_their_own_server_factors(newest_build: Paths) -> None:
    (host,) = [row for row in load_boundary_factors() if row["host_watts_per_gpu"] is not None]
    # Independently of the views: the host's watts per GPU over each GPU's rating, as the derivation states.
    expected_low = {gpu: round(1 + host["host_watts_per_gpu"] / watts, 2) for gpu, watts in RATED_BOARD_POWER_W.items()}
    assert expected_low == {"H100": 1.21, "B200": 1.15}
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        ratios = connection.execute("""
            select gpu, list(distinct round(wh_per_unit_low / wh_per_unit, 9))
            from index_boundaries where boundary = 'server' group by gpu order by gpu""").fetchall()
        low_sources = dict(connection.execute(
            "select gpu, low_source from boundary_factor_ranges where boundary = 'server'").fetchall())
    assert {gpu for gpu, _ in ratios} == {"H100", "B200"}
    for gpu, observed in ratios:
        assert observed == [round(expected_low[gpu], 9)], (gpu, observed)
        assert low_sources[gpu] == host["id"]


def test_no_factor_row_gives_a_gpu_power_derived_number_for_all_gpus() -> None:
    for row in load_boundary_factors():
        if "rated board power" in row["derivation"] or "700 W" in row["derivation"]:
            assert row["host_watts_per_gpu"] is not None and row["factor_low"] is None, row["id"]
