"""make, the way cron runs the refresh: any path passed as a value and none of it run, exit statuses as the
README states, and concurrent makes that never leave a stale publish behind a success."""

import subprocess
from pathlib import Path

import pytest
from conftest import NEWEST, PROJECT, SNAPSHOTS, cli, copy_build, make_refresh, published_snapshot, writable_copy

from pipeline.paths import Paths

FEBRUARY_13 = next(path for path in SNAPSHOTS if path.name == "2026-02-13-82e15a4")


@pytest.mark.make
def test_concurrent_makes_never_leave_a_stale_publish_behind_a_success(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runs = [
        subprocess.Popen(["make", "-s", "-C", str(PROJECT), f"SOURCE={source}", f"OUT={out}"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for source in (FEBRUARY_13, NEWEST, FEBRUARY_13)
    ]
    outcomes = [(run.wait(timeout=300), run.communicate()[1]) for run in runs]
    for code, stderr in outcomes:
        assert code == 0 or "another energy-index command is writing here" in stderr, stderr
    # Whatever won the race, a run for NEWEST now either publishes it or has nothing to do because it is.
    final = make_refresh(out, NEWEST)
    assert final.returncode == 0
    assert published_snapshot(out) == NEWEST.name
    assert not {".parameters", ".refreshed", ".refreshed.started"} & {p.name for p in out.iterdir()}


@pytest.mark.parametrize("name", ["it's here $HOME b;c", "q'; touch pwned; echo '$(touch pwned)`touch pwned`"])
def test_make_passes_any_path_as_a_value_and_runs_none_of_it(tmp_path: Path, name: str, plain_build: Paths) -> None:
    source = writable_copy(NEWEST, tmp_path / name)
    # OUT holds the refresh of NEWEST already (the subject is the recipe's quoting, which runs the same for
    # a refresh with nothing to do): the CLI must be handed both paths exactly, or it fails (no such SOURCE)
    # or builds in another OUT (not "nothing to do", and not fetched into this OUT).
    out = copy_build(plain_build, tmp_path / f"out {name}")
    result = make_refresh(out, source)
    assert result.returncode == 0, result.stderr
    assert f"fetch: reading {source}\n" in result.stderr, result.stderr
    assert f" -> {out}/raw/{NEWEST.name} (unchanged, " in result.stderr, result.stderr
    assert "nothing to do" in result.stderr, result.stderr
    assert (out / "index" / "gpqa" / "index.json").is_file()
    assert not list(PROJECT.glob("pwned")) and not list(tmp_path.glob("pwned"))


def test_exit_statuses_as_the_readme_states(tmp_path: Path) -> None:
    not_a_snapshot = tmp_path / "empty"
    not_a_snapshot.mkdir()
    assert cli("refresh", "--source", not_a_snapshot, "--out", tmp_path / "out").returncode == 1
    assert cli("refresh", "--no-such-option").returncode == 2
    missing = tmp_path / "missing"
    # Well formed, naming a folder that is not there: a problem with the input, as docs/operating.md says.
    assert cli("refresh", "--source", missing, "--out", tmp_path / "out").returncode == 1
    through_make = make_refresh(tmp_path / "out", not_a_snapshot)
    assert through_make.returncode == 2  # GNU make's own status for any failed recipe
    assert f"{not_a_snapshot}: not a snapshot folder (no index.json)" in through_make.stderr
