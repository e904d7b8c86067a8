"""The export reproduces the user's golden file byte for byte, through the CLI and through make."""

import os
import subprocess
from pathlib import Path

from conftest import NEWEST, PROJECT, SEED, SEED_AS_OF, SEED_RETRIEVED, tree_digest

from pipeline.paths import Paths


def test_export_equals_the_seed_byte_for_byte(newest_build: Paths) -> None:
    exported = newest_build.task_index_dir("lm-arena-chat") / "models" / "llama-4-scout-17b-16e-instruct.json"
    assert exported.read_bytes() == SEED.read_bytes()


def _make(out: Path) -> subprocess.CompletedProcess[str]:
    variables = [f"SOURCE={NEWEST}", f"OUT={out}", f"AS_OF={SEED_AS_OF}", f"RETRIEVED={SEED_RETRIEVED}"]
    environment = {**os.environ, "MAKEFLAGS": ""}
    return subprocess.run(
        ["make", "--no-print-directory", *variables], cwd=PROJECT, env=environment, capture_output=True, text=True
    )


def test_make_writes_the_seed_then_a_second_make_does_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _make(out)
    assert first.returncode == 0, first.stderr
    exported = out / "index" / "lm-arena-chat" / "models" / "llama-4-scout-17b-16e-instruct.json"
    assert exported.read_bytes() == SEED.read_bytes()

    before = {path: path.stat().st_mtime_ns for path in out.rglob("*")}
    digest = tree_digest(out, ".")
    second = _make(out)
    assert second.returncode == 0, second.stderr
    assert "Nothing to be done" in second.stdout
    assert {path: path.stat().st_mtime_ns for path in out.rglob("*")} == before
    assert tree_digest(out, ".") == digest


def test_refresh_rerun_on_unchanged_input_gives_identical_index(tmp_path: Path, run_cli) -> None:
    out = tmp_path / "out"
    assert run_cli("refresh", "--source", NEWEST, "--out", out).exit_code == 0
    first = tree_digest(out, "index", "parquet", "raw")
    rerun = run_cli("refresh", "--source", NEWEST, "--out", out)
    assert rerun.exit_code == 0
    assert "(unchanged," in rerun.stderr
    assert tree_digest(out, "index", "parquet", "raw") == first
