"""index_validity and index_rows_v2 on literal rows: the repeat range, and each validity code on either
side of its threshold (pipeline/index_v2.toml)."""

import pytest
from test_views import connect, measured

from pipeline.reference_tables import load_index_v2

THRESHOLD = {code: threshold for _, code, _, threshold, _, _ in load_index_v2()[0]}


def v2_row(connection, *columns: str) -> tuple:
    return connection.execute(f"select {', '.join(columns)} from index_rows_v2").fetchone()


def codes(connection) -> list[str]:
    """The row's validity codes: index_rows_v2.validity_codes, joined by ', ' (empty: none)."""
    text = v2_row(connection, "validity_codes")[0]
    return text.split(", ") if text else []


def test_repeats_give_the_range_around_the_figure_and_flag_a_wide_spread() -> None:
    # Two repeats of one configuration, 3.6 and 3.96 J per token (1000 and 1100 Wh per million): 10 % apart.
    connection = connect([measured(energy_per_token_joules=3.6), measured(energy_per_token_joules=3.96)])
    figure, low, high, repeats, energy_class = v2_row(
        connection, "wh_per_unit", "range_low", "range_high", "n_repeats", "energy_class")
    validity = codes(connection)
    assert repeats == 2 and low == pytest.approx(1000.0) and high == pytest.approx(1100.0)
    assert low <= figure <= high
    assert "repeats_disagree" in validity and "measured_once" not in validity
    # ComparIA's scale at the facility boundary: 1,000 Wh × 1.6 (server, central) × 1.2 (PUE) = 1,920, D;
    # low 1,000 × 1.21 × 1.09 = 1,318.9, D; high 1,000 × 1.6 × 1.59 = 2,544, D (the H100's factors)
    assert energy_class == "D"
    assert v2_row(connection, "energy_class_low", "energy_class_high", "energy_class_span") == ("D", "D", "D")
    # per response: the figure × 400 output tokens / 1e6, and the range likewise
    assert v2_row(connection, "per_response_low", "per_response_high") == pytest.approx((0.4, 0.44))


def test_repeats_within_the_spread_are_not_flagged() -> None:
    spread = THRESHOLD["repeats_disagree"] / 2
    connection = connect([measured(energy_per_token_joules=3.6), measured(energy_per_token_joules=3.6 * (1 + spread))])
    # one batch limit measured: no curve to check the figure against
    assert v2_row(connection, "validity_codes")[0] == "no_usable_fit" and codes(connection) == ["no_usable_fit"]


@pytest.mark.parametrize("avg_batch_size, expected", [
    (8.0, []), (7.0, ["near_stability_rule"]), (6.0, ["below_stability_rule"]),
])
def test_the_stability_rule_and_closeness_to_it(avg_batch_size: float, expected: list[str]) -> None:
    # max_num_seqs 8: 8 / 8 = 1.0, 7 / 8 = 0.875 (within 0.05 of 0.85), 6 / 8 = 0.75 (below it)
    connection = connect([measured(avg_batch_size=avg_batch_size)] * 2)
    assert [code for code in codes(connection) if code.endswith("stability_rule")] == expected


def test_a_latency_tail_and_a_narrow_margin_are_flagged() -> None:
    tail = THRESHOLD["latency_tail"] * 20.0 + 1  # p99 above threshold × the median of 20 ms
    rows = [measured(p99_itl_ms=tail)] * 2 + [measured(max_num_seqs=16, avg_batch_size=16.0,
                                                       energy_per_token_joules=1.005)] * 2
    connection = connect(rows)
    margin, runner_up = v2_row(connection, "margin_relative", "runner_up_row_id")
    assert runner_up.endswith("/16") and margin == pytest.approx(0.005)
    assert v2_row(connection, "validity_codes")[0] == "narrow_margin, latency_tail, no_usable_fit"


def test_the_class_is_read_at_the_facility_boundary_with_the_letters_its_range_spans() -> None:
    # 0.3 J per token: 83.3 Wh per million at the GPUs, class A there; at the facility on an H100,
    # 83.3 × 1.6 × 1.2 = 160 (B), low 83.3 × 1.21 × 1.09 = 109.9 (B), high 83.3 × 1.6 × 1.59 = 212 (B);
    # 0.2 J: 55.6 Wh, facility 106.7 (B), low 73.3 (A), high 141.3 (B): the span A–B.
    for joules, expected in ((0.3, ("B", "B", "B", "B")), (0.2, ("B", "A", "B", "A–B"))):
        connection = connect([measured(energy_per_token_joules=joules)])
        assert v2_row(connection, "energy_class", "energy_class_low", "energy_class_high",
                      "energy_class_span") == expected
        assert v2_row(connection, "energy_class_reason") == (None,)


def test_a_gpu_without_boundary_factors_has_no_class_and_says_why() -> None:
    connection = connect([measured()])
    connection.execute("delete from gpu_ratings")  # no rating: no factors, no facility figure
    energy_class, span, reason, facility, codes_text = v2_row(
        connection, "energy_class", "energy_class_span", "energy_class_reason", "facility_central", "validity_codes")
    assert energy_class is None and span is None and facility is None
    assert reason == ("no class: the scale applies at the facility boundary, and the row's GPU has no boundary "
                      "factors to give a figure there")
    assert "no_boundary_factors" in codes_text.split(", ")


def test_per_response_at_every_boundary_is_the_boundary_figure_per_response() -> None:
    # 1 J per token: 277.8 Wh per million; 400 output tokens a response
    connection = connect([measured()])
    columns = [f"{boundary}_{level}" for boundary in ("server", "facility") for level in ("low", "central", "high")]
    figures = v2_row(connection, *columns)
    per_response = v2_row(connection, *(f"per_response_{column}" for column in columns))
    assert per_response == pytest.approx([figure * 400 / 1e6 for figure in figures])
    assert per_response[4] == pytest.approx(1e6 / 3600 * 1.6 * 1.2 * 400 / 1e6)  # facility, central


def _curve_rows(last_factor: float, noise: dict[int, float], half: int = 16, steepness: float = 2.0) -> list[dict]:
    """One deployment measured at the batch limits of `noise` on a falling curve, 1 + 3 / (1 + (batch / half)
    ^ steepness) J per token (by default levelled off by 128), each point off it by its noise factor, the
    largest batch limit (the index row: the lowest energy) by last_factor too."""
    def energy(batch: int) -> float:
        return 1.0 + 3.0 / (1 + (batch / half) ** steepness)
    return [measured(max_num_seqs=batch, avg_batch_size=float(batch),
                     energy_per_token_joules=energy(batch) * factor * (last_factor if batch == 512 else 1.0))
            for batch, factor in noise.items()]


def curve_check(connection) -> tuple:
    return v2_row(connection, "fit_status", "curve_wh_per_unit", "curve_departure", "curve_departure_bound")


def test_a_figure_that_departs_from_its_curve_is_flagged() -> None:
    # the other points within 0.5 % of a levelled curve, the index row's 7 % below: a lucky run
    connection = connect(_curve_rows(0.93, {8: 1.005, 16: 0.995, 32: 1.005, 64: 0.995, 128: 1.005, 256: 0.995,
                                            512: 1.0}))
    status, curve, departure, bound = curve_check(connection)
    (figure,) = v2_row(connection, "wh_per_unit")
    (loo,) = connection.execute("select leave_one_out_median_error from index_curve_checks").fetchone()
    assert status == "fit for use" and departure == pytest.approx(figure / curve - 1)
    assert bound == pytest.approx(THRESHOLD["departs_from_curve"] * loo)
    assert departure < -bound < 0
    assert codes(connection) == ["measured_once", "departs_from_curve"]


def test_a_figure_within_its_curves_scatter_is_not_flagged() -> None:
    # a curve still falling at 512, the other points 1 to 3 % off it, the index row on it
    connection = connect(_curve_rows(1.0, {8: 1.02, 16: 0.98, 32: 1.03, 64: 0.97, 128: 1.02, 256: 0.99, 512: 1.0},
                                     half=32, steepness=1.5))
    status, _, departure, bound = curve_check(connection)
    assert status == "fit for use" and abs(departure) < bound
    assert codes(connection) == ["measured_once"]


def test_without_a_usable_fit_there_is_no_curve_check_and_the_row_says_so() -> None:
    # three batch limits: too few points for the four parameters to be tested
    connection = connect(_curve_rows(0.5, {128: 1.0, 256: 1.0, 512: 1.0}))
    assert curve_check(connection) == ("too few points", None, None, None)
    assert codes(connection) == ["measured_once", "no_usable_fit"]
