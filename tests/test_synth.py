"""energy-index synth: N times a real snapshot, deterministic per seed, and valid end to end."""

import hashlib
from pathlib import Path

import duckdb
import pytest
from conftest import NEWEST, refresh_args, upstream_rows

from pipeline.cli import main
from pipeline.paths import Paths


def digest(root: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(root.rglob("*.json")):
        sha.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()


def test_a_synthetic_snapshot_is_n_times_the_source_valid_and_deterministic(tmp_path: Path, run_cli) -> None:
    first, again, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for target, seed in ((first, "7"), (again, "7"), (other, "8")):
        assert run_cli("synth", "--scale", "2", "--source", NEWEST, "--target", target, "--seed", seed).exit_code == 0
    assert digest(first) == digest(again) != digest(other)
    assert len(list((first / "models").glob("*.json"))) == 2 * len(list((NEWEST / "models").glob("*.json")))

    out = tmp_path / "out"
    assert main(refresh_args(first, out)) == 0
    with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
        counts = dict(connection.execute("select task, count(*) from configurations group by task").fetchall())
        findings = connection.execute(
            "select count(*) from audit_findings where rule in"
            " ('energy_per_token_vs_power_over_throughput', 'diffusion_energy_vs_power_latency', 'detail_row_unmatched')"
        ).fetchone()[0]
    assert counts == {task: 2 * len(upstream_rows(NEWEST, task)) for task in counts} and len(counts) == 5
    assert findings == 0  # the physical identities and the detail-file pairing survive the perturbation


@pytest.mark.slow
def test_a_ten_times_snapshot_builds_end_to_end(tmp_path: Path) -> None:
    """Scale test (make test-all): 18,580 configurations, 620 detail files."""
    target, out = tmp_path / "s10", tmp_path / "out"
    assert main(["synth", "--scale", "10", "--source", str(NEWEST), "--target", str(target)]) == 0
    assert main(refresh_args(target, out)) == 0
    with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
        models = connection.execute("select count(distinct model_id) from configurations").fetchone()[0]
        matched = connection.execute("select bool_and(match_status = 'matched') from model_detail_matches").fetchone()[0]
    assert models == 10 * len({row["model_id"] for task in ("gpqa", "lm-arena-chat", "sourcegraph-fim", "image-chat",
                                                            "video-chat") for row in upstream_rows(NEWEST, task)})
    assert matched
    assert len(list((out / "index" / "lm-arena-chat" / "models").glob("*.json"))) == 10 * len(
        {row["model_id"] for row in upstream_rows(NEWEST, "lm-arena-chat")}
    )
