"""index_validity and index_rows_v2 on literal rows: the repeat range, and each validity code on either
side of its threshold (pipeline/index_v2.toml)."""

import pytest
from test_views import connect, measured

from pipeline.build import load_index_v2

THRESHOLD = {code: threshold for _, code, _, threshold, _, _ in load_index_v2()[0]}


def v2_row(connection, *columns: str) -> tuple:
    return connection.execute(f"select {', '.join(columns)} from index_rows_v2").fetchone()


def test_repeats_give_the_range_around_the_figure_and_flag_a_wide_spread() -> None:
    # Two repeats of one configuration, 3.6 and 3.96 J per token (1000 and 1100 Wh per million): 10 % apart.
    connection = connect([measured(energy_per_token_joules=3.6), measured(energy_per_token_joules=3.96)])
    figure, low, high, repeats, validity, energy_class = v2_row(
        connection, "wh_per_unit", "range_low", "range_high", "n_repeats", "validity", "energy_class")
    assert repeats == 2 and low == pytest.approx(1000.0) and high == pytest.approx(1100.0)
    assert low <= figure <= high
    assert "repeats_disagree" in validity and "measured_once" not in validity
    assert energy_class == "D"  # 1,000 to 3,000 Wh per million output tokens
    # per response: the figure × 400 output tokens / 1e6, and the range likewise
    assert v2_row(connection, "per_response_low", "per_response_high") == pytest.approx((0.4, 0.44))


def test_repeats_within_the_spread_are_not_flagged() -> None:
    spread = THRESHOLD["repeats_disagree"] / 2
    connection = connect([measured(energy_per_token_joules=3.6), measured(energy_per_token_joules=3.6 * (1 + spread))])
    assert v2_row(connection, "validity")[0] == []


@pytest.mark.parametrize("avg_batch_size, expected", [
    (8.0, []), (7.0, ["near_stability_rule"]), (6.0, ["below_stability_rule"]),
])
def test_the_stability_rule_and_closeness_to_it(avg_batch_size: float, expected: list[str]) -> None:
    # max_num_seqs 8: 8 / 8 = 1.0, 7 / 8 = 0.875 (within 0.05 of 0.85), 6 / 8 = 0.75 (below it)
    connection = connect([measured(avg_batch_size=avg_batch_size)] * 2)
    codes = [code for code in v2_row(connection, "validity")[0] if code.endswith("stability_rule")]
    assert codes == expected


def test_a_latency_tail_and_a_narrow_margin_are_flagged() -> None:
    tail = THRESHOLD["latency_tail"] * 20.0 + 1  # p99 above threshold × the median of 20 ms
    rows = [measured(p99_itl_ms=tail)] * 2 + [measured(max_num_seqs=16, avg_batch_size=16.0,
                                                       energy_per_token_joules=1.005)] * 2
    connection = connect(rows)
    validity, margin, runner_up = v2_row(connection, "validity", "margin_relative", "runner_up_row_id")
    assert runner_up.endswith("/16") and margin == pytest.approx(0.005)
    assert validity == ["narrow_margin", "latency_tail"]
