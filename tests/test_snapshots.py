"""Every real snapshot builds, and what it builds keeps every measurement the upstream published."""

from pathlib import Path

import duckdb
import msgspec
import pytest
from conftest import NEWEST, SNAPSHOTS, read_json, refresh_args, upstream_rows

from pipeline.cli import main
from pipeline.paths import Paths

TOKEN_TASKS = ["gpqa", "image-chat", "lm-arena-chat", "sourcegraph-fim", "video-chat"]


def test_all_eleven_snapshots_are_present() -> None:
    assert len(SNAPSHOTS) == 11


def test_snapshot_builds_with_every_configuration_kept(snapshot_build: tuple[Path, Paths]) -> None:
    snapshot, paths = snapshot_build
    with duckdb.connect(str(paths.database), read_only=True) as connection:
        counts = dict(connection.execute("select task, count(*) from configurations group by task").fetchall())
        derived = connection.execute(
            "select bool_and(is_avg_output_len_derived), bool_or(is_avg_output_len_derived) from configurations"
        ).fetchone()
    assert counts == {task: len(upstream_rows(snapshot, task)) for task in TOKEN_TASKS}
    has_avg_output_len = "avg_output_len" in upstream_rows(snapshot, "gpqa")[0]
    assert derived == ((False, False) if has_avg_output_len else (True, True))
    for exported in paths.index_dir.rglob("*.json"):
        msgspec.json.decode(exported.read_bytes().decode("ascii"))  # strict: NaN or Infinity is an error
    for task in TOKEN_TASKS:
        index = read_json(paths.task_index_dir(task) / "index.json")
        model_files = list((paths.task_index_dir(task) / "models").glob("*.json"))
        assert len(model_files) == len({row["model_id"] for row in upstream_rows(snapshot, task)})
        assert index["source"]["configurations"].startswith(f"{len(upstream_rows(snapshot, task))} stable")


def test_derived_output_length_matches_the_published_one_where_both_exist(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        worst = connection.execute(
            "select max(abs(energy_per_request_joules / joules_per_output_token - avg_output_tokens) / avg_output_tokens)"
            " from configurations"
        ).fetchone()[0]
    assert worst < 1e-12


def test_old_parallel_degree_zero_reads_as_one(tmp_path: Path) -> None:
    old = next(path for path in SNAPSHOTS if path.name == "2025-12-01-f74deb8")
    assert any(row["data_parallel"] == 0 for row in upstream_rows(old, "lm-arena-chat"))
    out = tmp_path / "out"
    assert main(refresh_args(old, out)) == 0
    with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
        raw_zeros = connection.execute("select count(*) from token_configurations where data_parallel = 0").fetchone()
        view_min = connection.execute(
            "select min(least(tensor_parallel, data_parallel, expert_parallel)) from configurations"
        ).fetchone()
    assert raw_zeros[0] > 0
    assert view_min[0] == 1


def test_repeated_measurements_are_both_kept(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        rows = connection.execute(
            """
            select max_num_seqs, list(repeat order by repeat), count(distinct joules_per_output_token)
            from configurations
            where task = 'lm-arena-chat' and model_id = 'Qwen/Qwen3-30B-A3B-Instruct-2507'
              and gpu = 'H100' and num_gpus = 2 and max_num_seqs in (256, 512)
            group by max_num_seqs order by max_num_seqs
            """
        ).fetchall()
    assert rows == [(256, [1, 2], 2), (512, [1, 2], 2)]
    exported = read_json(newest_build.task_index_dir("lm-arena-chat") / "models" / "qwen3-30b-a3b-instruct-2507.json")
    pairs = [(c["row_id"], c["repeat"]) for c in exported["configurations"] if c["row_id"].endswith(("/2/256", "/2/512"))]
    assert pairs == [
        ("qwen3-30b-a3b-instruct-2507/H100/2/256", 1),
        ("qwen3-30b-a3b-instruct-2507/H100/2/256", 2),
        ("qwen3-30b-a3b-instruct-2507/H100/2/512", 1),
        ("qwen3-30b-a3b-instruct-2507/H100/2/512", 2),
    ]
    gpqa = read_json(newest_build.task_index_dir("gpqa") / "models" / "gpt-oss-20b.json")
    assert [c["repeat"] for c in gpqa["configurations"] if c["row_id"] == "gpt-oss-20b/H100/1/96"] == [1, 2]


def test_best_configuration_is_the_lowest_energy_within_the_deadline(newest_build: Paths) -> None:
    with duckdb.connect(str(newest_build.database), read_only=True) as connection:
        beaten = connection.execute(
            """
            select b.task, b.model_id, b.gpu
            from best_configurations as b
            join configurations as c using (snapshot_id, task, model_id, gpu)
            where c.under_itl_deadline and c.joules_per_output_token < b.joules_per_output_token
            """
        ).fetchall()
        groups = connection.execute(
            "select count(*) from (select distinct task, model_id, gpu from configurations where under_itl_deadline)"
        ).fetchone()[0]
        best_rows = connection.execute("select count(*) from best_configurations where family = 'token'").fetchone()[0]
    assert beaten == []
    assert best_rows == groups


def test_exported_index_rows_follow_best_configurations(newest_build: Paths) -> None:
    index = read_json(newest_build.task_index_dir("lm-arena-chat") / "index.json")
    seed_like = read_json(newest_build.task_index_dir("lm-arena-chat") / "models" / "llama-4-scout-17b-16e-instruct.json")
    assert list(index)[: list(index).index("rows")] == list(seed_like)[: list(seed_like).index("slug")]
    keys = [(row["slug"], row["gpu"]) for row in index["rows"]]
    assert keys == sorted(keys)
    scout = [row for row in index["rows"] if row["slug"] == "llama-4-scout-17b-16e-instruct"]
    assert scout == [
        {
            **{k: seed_like[k] for k in ("slug", "name", "model_id", "params_b", "active_params_b", "architecture")},
            **seed_like["best"]["H100"],
        }
    ]


def test_provenance_tells_when_compile_date_and_task_commit_differ(tmp_path: Path) -> None:
    old = next(path for path in SNAPSHOTS if path.name == "2025-12-01-f74deb8")
    out = tmp_path / "out"
    assert main(refresh_args(old, out)) == 0
    source = read_json(Paths(out).task_index_dir("gpqa") / "index.json")["source"]
    assert source["compiled"] == "2025-11-30"
    assert source["compiled_evidence"] == (
        "the leaderboard's public/data/index.json last_updated (2025-11-30); "
        "the last commit to the task files is dated 2025-12-01"
    )
    assert source["data_url"].endswith("/public/data/tasks/gpqa.json")
    assert source["workload"] == "Problem Solving (gpqa)"


def test_a_tighter_deadline_drops_slow_configurations_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(refresh_args(NEWEST, out, "--itl-deadline-ms", "30")) == 0
    paths = Paths(out)
    rows = upstream_rows(NEWEST, "lm-arena-chat")
    slow = sum(row["median_itl_ms"] > 30 for row in rows)
    index = read_json(paths.task_index_dir("lm-arena-chat") / "index.json")
    assert index["itl_deadline_ms"] == 30
    assert index["source"]["selection"] == (
        "Each index row is the lowest-energy configuration for its model and GPU whose median inter-token "
        f"latency does not exceed 30 ms (the leaderboard's default is 500 ms); {slow} measured configurations exceed it."
    )
    fastest = {}
    for row in rows:
        key = (row["model_id"], row["gpu_model"])
        fastest[key] = min(fastest.get(key, float("inf")), row["median_itl_ms"])
    reachable = {key for key, itl in fastest.items() if itl <= 30}
    assert {(row["model_id"], row["gpu"]) for row in index["rows"]} == reachable
    assert len(reachable) < len(fastest)
    for row in index["rows"]:
        assert row["under_itl_deadline"] is True


def test_audits_find_what_the_upstream_history_explains(snapshot_build: tuple[Path, Paths]) -> None:
    snapshot, paths = snapshot_build
    with duckdb.connect(str(paths.database), read_only=True) as connection:
        findings = dict(connection.execute("select rule, count(*) from audit_findings group by rule").fetchall())
        repeats = connection.execute(
            "select row_key from audit_findings where rule = 'repeat_measurements_disagree' order by row_key"
        ).fetchall()
    # The upstream's "Fix steady state token throughput" (2026-01-01) made energy = power / throughput hold.
    throughput_fixed = snapshot.name >= "2026-01-01"
    assert (findings.get("energy_per_token_vs_power_over_throughput", 0) == 0) == throughput_fixed
    assert repeats == [
        ("lm-arena-chat:qwen3-30b-a3b-instruct-2507/H100/2/256",),
        ("lm-arena-chat:qwen3-30b-a3b-instruct-2507/H100/2/512",),
    ]
    assert "gpu_power_fraction" not in findings


@pytest.mark.parametrize(("task", "unit", "ceiling_s"), [("text-to-image", "image", 30), ("text-to-video", "video", 300)])
def test_diffusion_index_picks_the_lowest_energy_within_the_batch_latency_ceiling(
    newest_build: Paths, task: str, unit: str, ceiling_s: int
) -> None:
    rows = upstream_rows(NEWEST, task)
    lowest: dict[tuple[str, str], float] = {}
    for row in rows:
        if row["batch_latency_s"] <= ceiling_s:
            key = (row["model_id"], row["gpu_model"])
            lowest[key] = min(lowest.get(key, float("inf")), row[f"energy_per_{unit}_joules"])
    index = read_json(newest_build.task_index_dir(task) / "index.json")
    assert index["unit"] == f"Wh per {unit}" and index["batch_latency_ceiling_s"] == ceiling_s
    assert {(r["model_id"], r["gpu"]): r[f"joules_per_{unit}"] for r in index["rows"]} == {
        key: round(joules, 1) for key, joules in lowest.items()
    }
    over = sum(row["batch_latency_s"] > ceiling_s for row in rows)
    assert index["source"]["selection"].endswith(f"{over} measured configurations exceed it.")
    model_files = list((newest_build.task_index_dir(task) / "models").glob("*.json"))
    assert len(model_files) == len({row["model_id"] for row in rows})
    exported = sum(len(read_json(path)["configurations"]) for path in model_files)
    assert exported == len(rows)
