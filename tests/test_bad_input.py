"""Bad input ends in a clear error naming the file, field or row, and the previous build stays intact."""

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import BUILD_OUTPUTS, cli, copy_build, refresh_args, tree_digest

from pipeline.cli import main
from pipeline.paths import Paths


def rewrite(path: Path, change: Callable[[Any], Any]) -> None:
    """Apply `change` to the parsed document in place and write it back."""
    document = json.loads(path.read_text(encoding="utf-8"))
    change(document)
    path.write_text(json.dumps(document), encoding="utf-8")


def change_rows(source: Path, task: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    rewrite(source / "tasks" / f"{task}.json", lambda document: change(document["configurations"]))


@pytest.fixture
def good_build(source_copy: Path, plain_build: Paths, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    out = copy_build(plain_build, tmp_path / "out")  # a published build of the snapshot source_copy copies
    # What the tests damage is then a snapshot of its own (a published one never changes), so it is
    # validated rather than refused for differing from the published 2026-02-16-7885788.
    (source_copy / "snapshot.json").unlink()
    return source_copy, out, tree_digest(out, *BUILD_OUTPUTS)


def refresh_fails(good_build: tuple[Path, Path, dict[str, str]], run_cli) -> str:
    source, out, digest = good_build
    result = run_cli(*refresh_args(source, out))
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    assert tree_digest(out, *BUILD_OUTPUTS) == digest, "the previous build changed"
    return result.stderr


def test_malformed_json_names_file_and_position(good_build, run_cli) -> None:
    source = good_build[0]
    path = source / "tasks" / "gpqa.json"
    path.write_bytes(path.read_bytes()[:5000])
    message = refresh_fails(good_build, run_cli)
    assert re.search(r"tasks/gpqa\.json: malformed JSON at line \d+ column \d+ \(char 5000\)", message)


def test_missing_required_field_names_file_and_field(good_build, run_cli) -> None:
    change_rows(good_build[0], "video-chat", lambda rows: rows[3].pop("energy_per_token_joules"))
    message = refresh_fails(good_build, run_cli)
    assert "tasks/video-chat.json: missing required field 'energy_per_token_joules' in 1 entry" in message


def test_value_of_the_wrong_type_is_reported_not_cast(good_build, run_cli) -> None:
    def damage(rows: list[dict[str, Any]]) -> None:
        rows[0]["num_gpus"] = "4"
        rows[1]["max_num_seqs"] = 2**64

    change_rows(good_build[0], "gpqa", damage)
    message = refresh_fails(good_build, run_cli)
    assert "tasks/gpqa.json: configurations[0]" in message
    assert "field 'num_gpus': expected an integer, got \"4\"" in message
    assert f"field 'max_num_seqs': integer {2**64} is out of the 64-bit range" in message


def test_every_failing_row_is_reported_together(good_build, run_cli) -> None:
    def damage(rows: list[dict[str, Any]]) -> None:
        rows[0]["p90_itl_ms"] = rows[0]["median_itl_ms"] / 2
        rows[5]["avg_batch_size"] = rows[5]["max_num_seqs"] + 1.5
        rows[9]["avg_power_watts"] = 5000.0 * rows[9]["num_gpus"]

    source = good_build[0]
    change_rows(source, "lm-arena-chat", damage)
    rows = json.loads((source / "tasks" / "lm-arena-chat.json").read_text())["configurations"]
    message = refresh_fails(good_build, run_cli)
    assert "validation failed: 3 failure(s)" in message
    for ordinal, column, check in (
        (0, "p90_itl_ms", "median_itl_ms <= p90_itl_ms <= p95_itl_ms <= p99_itl_ms"),
        (5, "avg_batch_size", "avg_batch_size <= max_num_seqs"),
        (9, "avg_power_watts", "avg_power_watts <= num_gpus × rated board power of gpu_model"),
    ):
        row = rows[ordinal]
        label = (
            f"task=lm-arena-chat, source_ordinal={ordinal}, model_id={row['model_id']}, gpu_model={row['gpu_model']}, "
            f"num_gpus={row['num_gpus']}"
        )
        line = next(line for line in message.splitlines() if label in line and check in line)
        assert f"{column}={row[column]!r}" in line


@pytest.mark.parametrize("model_id", ["../../etc/passwd", "org/bad name", "org/", "org/a/b", "/abs"])
def test_model_id_that_gives_an_unsafe_file_name_is_refused(good_build, run_cli, model_id: str) -> None:
    source = good_build[0]

    def rename(rows: list[dict[str, Any]]) -> None:
        rows[0]["model_id"] = model_id

    change_rows(source, "sourcegraph-fim", rename)
    message = refresh_fails(good_build, run_cli)
    assert "model_id must give a safe file name" in message
    assert repr(model_id) in message


def test_unknown_gpu_passes_the_power_rule_with_a_warning(source_copy: Path, tmp_path: Path, run_cli) -> None:
    change_rows(source_copy, "gpqa", lambda rows: rows[0].update(gpu_model="MI300X"))
    result = run_cli(*refresh_args(source_copy, tmp_path / "out"))
    assert result.exit_code == 0
    assert "ingest: warning:" in result.stderr and "gpu_model has a known rated board power" in result.stderr


def test_unknown_upstream_fields_are_kept(source_copy: Path, tmp_path: Path, run_cli) -> None:
    change_rows(source_copy, "gpqa", lambda rows: rows[2].update(joules_per_prompt_token=0.01, notes="x"))
    out = tmp_path / "out"
    assert run_cli(*refresh_args(source_copy, out)).exit_code == 0
    with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
        kept = connection.execute(
            "select source_ordinal, extra_fields from token_configurations where extra_fields is not null"
        ).fetchall()
    assert kept == [(2, '{"joules_per_prompt_token": 0.01, "notes": "x"}')]


def test_a_dropped_upstream_column_is_derived_and_flagged(source_copy: Path, tmp_path: Path, run_cli) -> None:
    change_rows(source_copy, "image-chat", lambda rows: [row.pop("avg_output_len") for row in rows])
    out = tmp_path / "out"
    assert run_cli(*refresh_args(source_copy, out)).exit_code == 0
    with duckdb.connect(str(Paths(out).database), read_only=True) as connection:
        flags = dict(connection.execute(
            "select task, bool_and(is_avg_output_len_derived) from configurations group by task"
        ).fetchall())
    assert flags == {"gpqa": False, "image-chat": True, "lm-arena-chat": False, "sourcegraph-fim": False,
                     "video-chat": False}


def test_model_missing_from_index_is_named(good_build, run_cli) -> None:
    rewrite(good_build[0] / "index.json", lambda index: index["models"].pop("Qwen/Qwen3-8B"))
    message = refresh_fails(good_build, run_cli)
    assert "task files name models that index.json does not list" in message
    assert "model_id Qwen/Qwen3-8B" in message


def test_conflicting_duplicate_key_is_an_error(good_build, run_cli) -> None:
    path = good_build[0] / "tasks" / "gpqa.json"
    text = path.read_text()
    path.write_text(text.replace('"gpu_model": "B200"', '"gpu_model": "B200", "gpu_model": "H100"', 1))
    message = refresh_fails(good_build, run_cli)
    assert "tasks/gpqa.json: invalid JSON: key 'gpu_model' appears twice in one object with different values" in message


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'\xef\xbb\xbf{"a": 1}', "starts with a UTF-8 byte order mark"),
        (b'{"a": "\xff"}', "invalid UTF-8 at byte 7"),
        (b'{"a": NaN}', "NaN is not a number JSON allows"),
        (b'{"a": 1e999}', "out of range for a 64-bit float"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
)
def test_json_the_standard_does_not_allow_is_refused(good_build, run_cli, payload: bytes, expected: str) -> None:
    (good_build[0] / "index.json").write_bytes(payload)
    message = refresh_fails(good_build, run_cli)
    assert "index.json" in message and expected in message


def test_bad_export_date_is_refused_before_anything_is_written(good_build, capsys) -> None:
    source, out, digest = good_build
    with pytest.raises(SystemExit) as exit_info:
        main(refresh_args(source, out, "--as-of", "27/09/2026"))
    assert exit_info.value.code == 2
    assert "Invalid value for '--as-of': '27/09/2026' is not a calendar date written YYYY-MM-DD" in capsys.readouterr().err
    assert tree_digest(out, *BUILD_OUTPUTS) == digest


@pytest.mark.parametrize(
    ("first", "second"), [("orgA/Llama", "orgB/Llama"), ("Foo/Model-X", "Foo/model-x")]
)
def test_two_model_ids_with_one_slug_stop_the_refresh(good_build, run_cli, first: str, second: str) -> None:
    source = good_build[0]

    def rename(rows: list[dict[str, Any]]) -> None:
        originals = {row["model_id"] for row in rows}
        for row in rows:
            row["model_id"] = first if row["model_id"] == sorted(originals)[0] else second

    change_rows(source, "sourcegraph-fim", rename)
    # Each model's detail file, as the task file's rows name them: a snapshot lacking one is refused first.
    template = sorted((source / "models").glob("*__sourcegraph-fim.json"))[0]
    for model_id in (first, second):
        detail = json.loads(template.read_text())
        (source / "models" / f"{model_id.replace('/', '__')}__sourcegraph-fim.json").write_text(
            json.dumps({**detail, "model_id": model_id}))

    def list_models(index: dict[str, Any]) -> None:
        template = next(iter(index["models"].values()))
        index["models"].update({first: template, second: template})

    rewrite(source / "index.json", list_models)
    message = refresh_fails(good_build, run_cli)
    assert "model ids that would share one exported file name (slug)" in message
    assert f"sourcegraph-fim: slug {first.split('/')[-1].lower()} for {' and '.join(sorted([first, second]))}" in message


@pytest.mark.parametrize("task", ["../../../escape", "gpqa/../../x", "Robert'); drop table tasks;--", ""])
def test_a_task_name_that_would_reach_a_path_or_sql_is_refused(good_build, run_cli, task: str) -> None:
    source = good_build[0]

    def add_task(index: dict[str, Any]) -> None:
        index["tasks"].append(task)
        index["architectures"]["llm"].append(task)

    rewrite(source / "index.json", add_task)
    message = refresh_fails(good_build, run_cli)
    assert f"index.json: task {task!r} is not a task name" in message


def test_a_task_listed_twice_is_refused_naming_it(good_build, run_cli) -> None:
    rewrite(good_build[0] / "index.json", lambda index: index["tasks"].append("gpqa"))
    message = refresh_fails(good_build, run_cli)
    assert "index.json: tasks listed more than once: gpqa" in message


@pytest.mark.parametrize(
    ("name", "field"),
    [("tasks/gpqa.json", "energy_per_token_joules"),
     ("models/Qwen__Qwen3-14B__gpqa.json", "num_gpus")],
)
def test_a_null_where_a_value_is_required_fails_validation(good_build, run_cli, name: str, field: str) -> None:
    path = good_build[0] / name
    document = json.loads(path.read_text())
    document["configurations"][0][field] = None
    path.write_text(json.dumps(document, indent=2))
    message = refresh_fails(good_build, run_cli)
    assert "validation failed" in message and field in message


@pytest.mark.parametrize("gpu", ["../../etc", "H100/../x", ".hidden", "H100\n"])
def test_a_gpu_name_that_is_not_a_name_is_refused_at_ingest(source_copy: Path, tmp_path: Path, gpu: str) -> None:
    path = source_copy / "tasks" / "gpqa.json"
    document = json.loads(path.read_text())
    document["configurations"][0]["gpu_model"] = gpu
    path.write_text(json.dumps(document))
    result = cli("refresh", "--source", source_copy, "--out", tmp_path / "out")
    assert result.returncode == 1
    assert "gpu_model must be a GPU name" in result.stderr and repr(gpu) in result.stderr, result.stderr
    assert not (tmp_path / "out" / "energy_index.duckdb").exists()
