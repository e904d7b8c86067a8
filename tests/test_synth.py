"""energy-index synth: N times a real snapshot, deterministic per seed, and valid end to end."""

import hashlib
from pathlib import Path

import duckdb
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
