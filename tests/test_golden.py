"""The export reproduces the user's golden file byte for byte, through the CLI and through make; a
refresh or a make with nothing changed does no work."""

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import msgspec
from conftest import NEWEST, PROJECT, SEED, SEED_AS_OF, SEED_RETRIEVED, cli, copy_build, tree_digest, writable_copy

from pipeline.paths import Paths


def test_export_equals_the_seed_byte_for_byte(newest_build: Paths) -> None:
    exported = newest_build.task_index_dir("lm-arena-chat") / "models" / "llama-4-scout-17b-16e-instruct.json"
    assert exported.read_bytes() == SEED.read_bytes()


def _make(out: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    variables = [f"SOURCE={NEWEST}", f"OUT={out}", f"AS_OF={SEED_AS_OF}", f"RETRIEVED={SEED_RETRIEVED}", *overrides]
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
    assert "nothing to do" in second.stderr
    assert {path: path.stat().st_mtime_ns for path in out.rglob("*")} == before
    assert tree_digest(out, ".") == digest


def _mtimes(out: Path) -> dict[Path, int]:
    return {path: path.lstat().st_mtime_ns for path in out.rglob("*") if path.name != ".lock"}


def test_refresh_rerun_on_unchanged_input_does_no_work(tmp_path: Path, run_cli, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")  # what the first refresh publishes
    first, mtimes = tree_digest(out, "index", "parquet", "raw"), _mtimes(out)
    rerun = run_cli("refresh", "--source", NEWEST, "--out", out)
    assert rerun.exit_code == 0
    assert "(unchanged," in rerun.stderr and "nothing to do" in rerun.stderr
    assert "ingest:" not in rerun.stderr
    assert tree_digest(out, "index", "parquet", "raw") == first
    assert _mtimes(out) == mtimes


def test_a_refresh_after_another_write_builds_again(tmp_path: Path, run_cli, plain_build: Paths) -> None:
    out = copy_build(plain_build, tmp_path / "out")
    first = tree_digest(out, "index")
    assert run_cli("build", "--out", out, "--itl-deadline-ms", "50").exit_code == 0
    assert run_cli("export", "--out", out).exit_code == 0
    assert tree_digest(out, "index") != first
    rerun = run_cli("refresh", "--source", NEWEST, "--out", out)
    assert rerun.exit_code == 0 and "nothing to do" not in rerun.stderr
    assert tree_digest(out, "index") == first


def test_a_refresh_follows_a_changed_source_file_and_not_a_touched_one(
    tmp_path: Path, undated_refresh: tuple[Path, Path, str]
) -> None:
    seed_dates = ("--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)
    # Without commit facts the snapshot's id follows its content, so an edited file is a new snapshot.
    # A copy of the newest snapshot without snapshot.json, and a copy of a refresh of it with these dates.
    undated, built, _ = undated_refresh
    source_copy = writable_copy(undated, tmp_path / "source")
    out = copy_build(Paths(built), tmp_path / "out")
    assert cli("refresh", "--source", source_copy, "--out", out, *seed_dates).returncode == 0
    task_file = source_copy / "tasks" / "gpqa.json"
    # A touch: a new mtime (and ctime) with the same content, set rather than waited for.
    stat = task_file.stat()
    os.utime(task_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000))
    touched = cli("refresh", "--source", source_copy, "--out", out, *seed_dates)
    assert touched.returncode == 0, touched.stderr
    assert "nothing to do" in touched.stderr and "ingest:" not in touched.stderr
    assert "nothing to do" in cli("refresh", "--source", source_copy, "--out", out, *seed_dates).stderr

    document = msgspec.json.decode(task_file.read_bytes())
    document["configurations"][0]["avg_power_watts"] *= 0.5
    task_file.write_bytes(msgspec.json.format(msgspec.json.encode(document), indent=2))
    changed = cli("refresh", "--source", source_copy, "--out", out, *seed_dates)
    assert changed.returncode == 0, changed.stderr
    assert "ingest:" in changed.stderr


# The diffusion files' provenance sentence before it was corrected, exactly as the export wrote it.
OLD_DIFFUSION_SENTENCE = ("{count} stable configurations: the leaderboard publishes the runs that passed its stability "
                          "filter; every run, including the unstable ones, is in the gated Hugging Face dataset "
                          "ml-energy/benchmark-v3")


def test_the_diffusion_files_change_in_their_provenance_sentence_only(newest_build: Paths) -> None:
    from pipeline.source_card import load_source_card

    before = json.loads((Path(__file__).parent / "index_sha256_before_diffusion_wording.json").read_text())
    sentence = load_source_card().diffusion.configurations
    assert "stability filter applies to LLM runs only" in sentence and "passed its" not in sentence
    pattern = re.compile(re.escape(json.dumps(sentence)).replace(re.escape("{count}"), r"(\d+)"))
    # version 1's files (the index format's version 2 and the JSON Schemas sit beside them in v2/ and schema/)
    files = {p.relative_to(newest_build.index_dir).as_posix(): p for p in newest_build.index_dir.rglob("*.json")
             if p.relative_to(newest_build.index_dir).parts[0] not in ("v2", "schema")}
    assert sorted(files) == sorted(before)
    changed = []
    for name, path in sorted(files.items()):
        text = path.read_text(encoding="utf-8")
        diffusion = name.split("/")[0] in ("text-to-image", "text-to-video")
        assert ("passed its stability filter" in text) != diffusion, name
        if diffusion:
            text, count = pattern.subn(lambda m: json.dumps(OLD_DIFFUSION_SENTENCE.format(count=m.group(1))), text)
            assert count == 1, name
            changed.append(name)
        assert hashlib.sha256(text.encode()).hexdigest() == before[name], f"{name} changed beyond the sentence"
    assert len(changed) > 10
