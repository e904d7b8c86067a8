"""The speed targets the README states are the ones `make bench` checks (bench/run.py TARGETS), each
against a reference the same run measures, and what the bench prints says met or not met."""

import re
import sys

from conftest import PROJECT

sys.path.insert(0, str(PROJECT / "bench"))
import run as bench  # noqa: E402

README = (PROJECT / "README.md").read_text(encoding="utf-8")


def speed_table_targets() -> list[str]:
    section = README.split("## Speed\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [row.split(" | ")[0].removeprefix("| ") for row in rows[1:]]


def test_the_readme_states_every_target_the_bench_checks_and_no_other() -> None:
    assert speed_table_targets() == [target.words for target in bench.TARGETS]


def test_every_targets_reference_is_measured_by_the_bench() -> None:
    measured = {*bench.LIGHT_COMMANDS, "noop_refresh", "full_refresh", "before_refresh", "floor", "export_writer"}
    assert {target.reference for target in bench.TARGETS} <= measured
    assert {target.measurement for target in bench.TARGETS} <= measured


def test_each_target_prints_both_figures_and_met_or_not(capsys) -> None:
    measured = {name: {"seconds": 1.0} for name in (*bench.LIGHT_COMMANDS, "noop_refresh")}
    measured["full_refresh"] = {"seconds": 2.0}
    measured["cli_estimate"] = {"seconds": 1.5}
    bench._print_targets(bench.targets(1, measured))
    printed = capsys.readouterr().out
    assert re.search(r"target `estimate` ≤ 1\.3 × the light commands' floor: 1\.500 s against floor_click_duckdb "
                     r"1\.000 s, 1\.50 x, NOT met", printed), printed
    assert "target `energy-index --version` ≤ 2 × `python -c pass`: 1.000 s against python_pass 1.000 s, 1.00 x, met" in printed
    assert ("target 1× full refresh ≤ 3 × the floor (DuckDB alone + loading its Parquet + the export writer): "
            "not measured, floor was not run") in printed
    assert "targets met: 4 of 6 (1 not measured)" in printed


def test_two_commands_timed_in_the_same_rounds_are_compared_round_by_round(capsys) -> None:
    # The machine slows down in the third round: both commands take twice as long there. The ratio of the
    # medians (1.2 s / 1.0 s) would say 1.20; round by round each ratio is 1.25 or less, and the median 1.25.
    measured = {name: {"seconds": 1.0} for name in (*bench.LIGHT_COMMANDS, "noop_refresh")}
    measured |= {"floor_click_duckdb": {"seconds": 1.0, "rounds": [1.0, 1.0, 2.0]},
                 "cli_plan": {"seconds": 1.2, "rounds": [1.2, 1.25, 2.6]}}
    found = bench.targets(1, measured, light=True)
    plan = found["`plan` ≤ 1.3 × the light commands' floor"]
    assert plan["ratio"] == 1.25 and plan["met"] is True
    assert plan["round_ratios"] == [1.2, 1.25, 1.3]
    bench._print_targets({"plan": plan})
    assert "median of 3 rounds' ratios (from 1.20 to 1.30) 1.25 x, met" in capsys.readouterr().out
    # Rounds of different lengths are not paired: the ratio is of the medians.
    measured["cli_plan"]["rounds"] = [1.2, 1.25]
    assert bench.targets(1, measured, light=True)["`plan` ≤ 1.3 × the light commands' floor"]["ratio"] == 1.2
