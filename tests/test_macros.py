"""The table macros refuse an unknown snapshot, task, model or GPU naming the nearest ones, in every supported engine."""

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import NEWEST, PROJECT
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.paths import Paths

ENGINES = re.search(r"^ENGINE_VERSIONS := (.+)$", (PROJECT / "Makefile").read_text(), re.MULTILINE).group(1).split()


MACRO_CHECK = r"""
import json, sys
import duckdb
connection = duckdb.connect(sys.argv[1], read_only=True)
outcome = {}
for name, sql in json.loads(sys.argv[2]).items():
    try:
        outcome[name] = {"rows": len(connection.execute(sql).fetchall())}
    except duckdb.Error as error:
        outcome[name] = {"error": str(error).splitlines()[0]}
print(json.dumps({"version": duckdb.__version__, "outcome": outcome}))
"""


NEWEST_ID = NEWEST.name


MACRO_CALLS = {
    "index_diff, unknown older": f"select * from index_diff('2026-02-16', '{NEWEST_ID}')",
    "index_diff, both unknown": "select * from index_diff('a', 'b')",
    "configuration_diff, unknown newer": f"select * from configuration_diff('{NEWEST_ID}', '2026-02-16-788578')",
    "best_configurations_in, unknown": "select * from best_configurations_in('2026-02-1')",
    "energy_at_concurrency, unknown model": "select * from energy_at_concurrency('gpqa', 'Qwen/Qwen3-8', 'H100', 100)",
    "energy_at_concurrency, unknown task": "select * from energy_at_concurrency('chat', 'Qwen/Qwen3-8B', 'H100', 100)",
    "energy_at_concurrency, unknown GPU": "select * from energy_at_concurrency('gpqa', 'Qwen/Qwen3-8B', 'h100', 100)",
    # and the known ones still answer
    "best_configurations_in": f"select * from best_configurations_in('{NEWEST_ID}')",
    "best_configurations_in, every snapshot": "select * from best_configurations_in(null)",
    "index_diff, one snapshot against itself": f"select * from index_diff('{NEWEST_ID}', '{NEWEST_ID}')",
    "energy_at_concurrency": "select * from energy_at_concurrency('gpqa', 'Qwen/Qwen3-8B', 'H100', 100)",
    "fleet_plan, unknown model": "select * from fleet_plan('gpqa', 'Qwen/Qwen3-8', 1e9, 'p90_itl_ms', 100)",
    "fleet_plan, unknown latency metric": "select * from fleet_plan('gpqa', 'Qwen/Qwen3-8B', 1e9, 'p90_itl', 100)",
    "fleet_plan": "select * from fleet_plan('gpqa', 'Qwen/Qwen3-8B', 1e9, 'p90_itl_ms', 100)",
    "fleet_plan, every model": "select * from fleet_plan('gpqa', null, 1e9, 'p90_itl_ms', 100, gpu_name := 'B200')",
}


EXPECTED = {
    "index_diff, unknown older": {"error": f"Invalid Input Error: unknown snapshot '2026-02-16'; the nearest: {NEWEST_ID}"},
    "index_diff, both unknown": {"error": f"Invalid Input Error: unknown snapshot 'a'; the nearest: {NEWEST_ID}"},
    "configuration_diff, unknown newer": {
        "error": f"Invalid Input Error: unknown snapshot '2026-02-16-788578'; the nearest: {NEWEST_ID}"},
    "best_configurations_in, unknown": {"error": f"Invalid Input Error: unknown snapshot '2026-02-1'; the nearest: {NEWEST_ID}"},
    "energy_at_concurrency, unknown model": {
        "error": "Invalid Input Error: unknown model 'Qwen/Qwen3-8'; the nearest: Qwen/Qwen3-8B, Qwen/Qwen3-14B, Qwen/Qwen3-32B"},
    "energy_at_concurrency, unknown task": {
        "error": "Invalid Input Error: unknown task 'chat'; the nearest: image-chat, video-chat, lm-arena-chat"},
    "energy_at_concurrency, unknown GPU": {"error": "Invalid Input Error: unknown GPU 'h100'; the nearest: H100, B200"},
    "best_configurations_in": {"rows": 113},
    "best_configurations_in, every snapshot": {"rows": 113},
    "index_diff, one snapshot against itself": {"rows": 0},
    "fleet_plan, unknown model": {
        "error": "Invalid Input Error: unknown model 'Qwen/Qwen3-8'; the nearest: Qwen/Qwen3-8B, Qwen/Qwen3-14B, Qwen/Qwen3-32B"},
    "fleet_plan, unknown latency metric": {
        "error": "Invalid Input Error: unknown latency metric 'p90_itl'; the nearest: p90_itl_ms, p99_itl_ms, median_itl_ms"},
    "fleet_plan": {"rows": 6},  # two GPUs × three boundaries
}


@pytest.mark.parametrize("version", [*(pytest.param(version, marks=pytest.mark.engines) for version in ENGINES), "project"])
def test_every_macro_refuses_an_unknown_identifier_naming_the_nearest(version: str, newest_build: Paths) -> None:
    python = Path(sys.executable) if version == "project" else PROJECT / ".engines" / f"duckdb-{version}" / "bin" / "python"
    if not python.is_file():
        pytest.fail(f"{python} is missing: make .engines/duckdb-{version}/.installed")
    run = subprocess.run([str(python), "-c", MACRO_CHECK, str(newest_build.database), json.dumps(MACRO_CALLS)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert version == "project" or result["version"] == version
    outcome = result["outcome"]
    for name, expected in EXPECTED.items():
        assert outcome[name] == expected, (result["version"], name)
    assert outcome["energy_at_concurrency"]["rows"] >= 1
    assert outcome["fleet_plan, every model"]["rows"] >= 3 * 10


IN_MEMORY = duckdb.connect()  # one for every example: a connection costs more than a comparison


@given(st.text(alphabet="abcQWEN3-/_.8", max_size=12), st.text(alphabet="abcQWEN3-/_.8", max_size=12))
@settings(max_examples=300, deadline=None)
def test_the_command_lines_edit_distance_is_duckdbs_levenshtein(first: str, second: str) -> None:
    from pipeline.errors import _edit_distance

    assert _edit_distance(first, second) == IN_MEMORY.execute("select levenshtein(?, ?)", [first, second]).fetchone()[0]


def test_the_command_line_ranks_the_nearest_names_as_closest_names_does(newest_build: Paths) -> None:
    """Where some names begin with (or, none beginning, contain) what was given, errors.nearest's first three are
    the SQL macro's three: one ranking, whichever refuses the name."""
    from pipeline.errors import nearest

    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        names = sorted({name for row in connection.execute(
            "select distinct task, model_id, gpu, slug from unified_configurations").fetchall() for name in row})
        probes = sorted({name[:length].lower() for name in names for length in (2, 4, 6, 9)}
                        | {name.rpartition("/")[2][:length] for name in names for length in (3, 5)})
        compared = 0
        for probe in probes:
            starting = [name for name in names if name.lower().startswith(probe.lower())]
            containing = [name for name in names if probe.lower() in name.lower()]
            if len(starting or containing) < 3:
                continue  # closest_names fills its three from the next group: errors.nearest stops at its group
            (expected,) = connection.execute("select closest_names(?, ?)", [probe, names]).fetchone()
            assert ", ".join(nearest(probe, names)) == expected, probe
            compared += 1
    assert compared >= 20
