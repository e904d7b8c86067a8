"""Nothing is read from damaged published files: release, report and every command that reads the published
build check them against the sizes and digests recorded at publish first and refuse with one line, whose
advice repairs them; and the same input gives the same stored bytes."""

import shutil
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.paths import Paths
from conftest import NEWEST, SEED_AS_OF, SEED_RETRIEVED, cli, refresh_args, shared_folder, snapshot_id, tree_digest

# One published file of each kind: an index figure file, a model file, an ingested table, the database.
DAMAGED = ["index/lm-arena-chat/index.json", "index/lm-arena-chat/models", "parquet/token_configurations",
           "energy_index.duckdb"]
READERS = {
    "release": ["release"],
    "report": ["report"],
    "sql": ["sql", "select count(*) from best_configurations"],
    "snapshots": ["snapshots"],
    "estimate": ["estimate", "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B", "--gpu", "H100",
                 "--concurrency", "100"],
    "spark-sql": ["spark-sql"],
    "plan": ["plan", "--task", "lm-arena-chat", "--model", "Qwen/Qwen3-8B", "--tokens-per-day", "1e9",
             "--p90-itl-ms", "100"],
    "compare": ["compare", "--task", "lm-arena-chat", "qwen3-8b", "qwen3-14b"],
    "diff": ["diff", snapshot_id(NEWEST), snapshot_id(NEWEST)],
}


def test_every_command_that_reads_the_published_build_is_checked_here() -> None:
    from pipeline import cli_outputs, cli_readers

    assert set(cli_readers.COMMANDS) | set(cli_outputs.COMMANDS) - {"synth"} == READERS.keys()


def one_file(generation: Path, name: str) -> Path:
    target = generation / name
    return target if target.is_file() else sorted(path for path in target.rglob("*") if path.is_file())[0]


def damage(path: Path, how: str) -> None:
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:  # flip one bit in the middle: same size, other content (660.04 -> 960.04 is one such edit)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x04
        path.write_bytes(bytes(data))


def copy_without_release_or_report(newest_build: Paths, out: Path) -> Paths:
    shutil.copytree(newest_build.out, out, symlinks=True)
    # The shared build may hold a release or report another test wrote; the tests here see that none is written.
    for written in (out / "release", out / "report"):
        if written.is_symlink():
            written.unlink()
        elif written.exists():
            shutil.rmtree(written)
    return Paths(out)


@pytest.fixture
def build_copy(newest_build: Paths, tmp_path: Path) -> Paths:
    return copy_without_release_or_report(newest_build, tmp_path / "out")


# What every reader's advice is followed with: a refresh of the same source into the same OUT.
REPAIR = ("--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)


@pytest.fixture(scope="session")
def repaired_build(newest_build: Paths, tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Paths:
    """A copy of the newest build with its lm-arena-chat index.json flipped as the readers' test flips it,
    then the readers' advice followed: made once per session. A reader's refusal writes nothing (its test
    checks so), so the advice repairs the build it refused the same way whichever reader refused it."""
    def repair(folder: Path) -> None:
        damaged = copy_without_release_or_report(newest_build, folder / "out")
        damage(one_file(damaged.current.resolve(), "index/lm-arena-chat/index.json"), "flip")
        assert main(refresh_args(NEWEST, damaged.out, *REPAIR)) == 0

    return Paths(shared_folder(tmp_path_factory, worker_id, "repaired-newest", repair) / "out")


@pytest.mark.parametrize("how", ["truncate", "flip", "delete"])
@pytest.mark.parametrize("name", DAMAGED, ids=lambda name: name.split("/")[-1])
@pytest.mark.parametrize("reader", ["release", "report", "sql"])
def test_damaged_published_files_are_refused_before_reading(reader: str, name: str, how: str,
                                                            build_copy: Paths) -> None:
    target = one_file(build_copy.current.resolve(), name)
    damage(target, how)
    result = cli(*READERS[reader], "--out", str(build_copy.out))
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    relative = target.relative_to(build_copy.current.resolve())
    assert result.stderr.startswith(f"energy-index: error: {build_copy.current / relative}: "), result.stderr
    assert "the published files are damaged, so nothing is read from them" in result.stderr
    assert not (build_copy.out / "release").exists() and not (build_copy.out / "report").exists()


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_refuses_a_damaged_build_and_the_advice_repairs_it(reader: str, build_copy: Paths,
                                                                        newest_build: Paths,
                                                                        repaired_build: Paths) -> None:
    target = one_file(build_copy.current.resolve(), "index/lm-arena-chat/index.json")
    damage(target, "flip")
    damaged = tree_digest(build_copy.out, ".")
    refused = cli(*READERS[reader], "--out", str(build_copy.out))
    assert refused.returncode == 1 and "run 'make OUT=" in refused.stderr, refused.stderr
    # The refusal wrote nothing: the advice meets the build as damaged, as in repaired_build.
    assert tree_digest(build_copy.out, ".") == damaged
    # The advice as written: a refresh of the same source into the same OUT (followed in repaired_build).
    assert "refresh --source FOLDER_OR_URL --out" in refused.stderr
    repaired = one_file(repaired_build.current.resolve(), "index/lm-arena-chat/index.json")
    published = one_file(newest_build.current.resolve(), "index/lm-arena-chat/index.json")
    assert repaired.read_bytes() == published.read_bytes()
    if reader in ("sql", "snapshots", "estimate"):  # the quick ones: read again, now whole
        again = cli(*READERS[reader], "--out", str(repaired_build.out))
        assert again.returncode == 0, again.stderr


def test_a_reader_checks_a_file_damaged_after_an_earlier_check(build_copy: Paths) -> None:
    # The first reader vouches for what it hashed by stat; an edit afterwards changes the stat and is seen.
    assert cli(*READERS["sql"], "--out", str(build_copy.out)).returncode == 0
    damage(one_file(build_copy.current.resolve(), "energy_index.duckdb"), "flip")
    result = cli(*READERS["sql"], "--out", str(build_copy.out))
    assert result.returncode == 1 and "energy_index.duckdb: its content differs" in result.stderr, result.stderr


def test_two_fresh_builds_of_the_same_input_store_the_same_bytes(tmp_path: Path, newest_build: Paths) -> None:
    # The first: the session's fresh refresh of the newest snapshot with these dates (newest_build, into an
    # OUT of its own); the second: the same refresh here.
    second = tmp_path / "second"
    assert main(refresh_args(NEWEST, second, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED)) == 0
    stored = {}
    for name, out in (("first", newest_build.out), ("second", second)):
        parquet = out / "parquet"
        stored[name] = {path.relative_to(parquet).as_posix(): path.read_bytes()
                        for path in sorted(parquet.rglob("*.parquet"))}
    assert any(name.startswith("best_configuration_history/") for name in stored["first"])
    assert stored["first"].keys() == stored["second"].keys()
    assert [name for name in stored["first"] if stored["first"][name] != stored["second"][name]] == []
