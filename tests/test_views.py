"""The views on an in-memory DuckDB with a few literal rows, and their expected output rows."""

from typing import Any

import duckdb
import pyarrow
import pytest

from pipeline.build import CHANGE_RELATIVE_TOLERANCE
from pipeline.reference_tables import load_reference_tables
from pipeline.views import create_views
import schemas


def measured(**overrides: Any) -> dict[str, Any]:
    row = {
        "snapshot_id": "s1", "task": "lm-arena-chat", "source_ordinal": 0,
        "model_id": "Org/Model-A", "nickname": "Model A", "architecture": "MoE",
        "total_params_billions": 30.0, "activated_params_billions": 3.0, "weight_precision": "bfloat16",
        "gpu_model": "H100", "num_gpus": 1, "tensor_parallel": 1, "data_parallel": 1, "expert_parallel": 1,
        "max_num_seqs": 8, "max_num_batched_tokens": None, "avg_batch_size": 8.0, "avg_output_len": 400.0,
        "avg_power_watts": 500.0, "energy_per_token_joules": 1.0,
        "energy_per_request_joules": 400.0, "median_itl_ms": 20.0, "p90_itl_ms": 21.0, "p95_itl_ms": 22.0,
        "p99_itl_ms": 23.0, "output_throughput_tokens_per_sec": 500.0, "extra_fields": None,
    }
    return {**row, **overrides}


def diffusion_measured(**overrides: Any) -> dict[str, Any]:
    """A text-to-image entry: 1 GPU, batch 1, 1024x1024, 20 steps, 360 J (0.1 Wh) in 2 s."""
    row = {
        "snapshot_id": "s1", "task": "text-to-image", "source_ordinal": 0,
        "model_id": "Org/Image-Model", "nickname": "Image Model", "total_params_billions": 1.6,
        "activated_params_billions": 1.6, "weight_precision": "bfloat16", "gpu_model": "H100", "num_gpus": 1,
        "ulysses_degree": 1, "ring_degree": 1, "batch_size": 1, "inference_steps": 20, "image_height": 1024,
        "image_width": 1024, "video_height": None, "video_width": None, "num_frames": None, "fps": None,
        "batch_latency_s": 2.0, "avg_power_watts": 180.0, "energy_per_image_joules": 360.0,
        "energy_per_video_joules": None, "throughput_images_per_sec": 0.5, "throughput_videos_per_sec": None,
        "extra_fields": None,
    }
    return {**row, **overrides}


def video_measured(**overrides: Any) -> dict[str, Any]:
    """A text-to-video entry: 832x480, 81 frames at 16 fps, 7,200 J (2 Wh) per video."""
    return diffusion_measured(**{
        "task": "text-to-video", "model_id": "Org/Video-Model", "image_height": None, "image_width": None,
        "video_height": 480, "video_width": 832, "num_frames": 81, "fps": 16, "batch_latency_s": 100.0,
        "avg_power_watts": 72.0, "energy_per_image_joules": None, "energy_per_video_joules": 7200.0,
        "throughput_images_per_sec": None, "throughput_videos_per_sec": 0.01, **overrides,
    })


def snapshot_row(snapshot_id: str, day: int) -> dict[str, Any]:
    return {
        "snapshot_id": snapshot_id, "source": "literal", "retrieved": "2026-01-01", "commit": None,
        "commit_time": f"2026-01-{day:02d}T00:00:00+00:00", "commit_subject": None, "tasks_last_commit_date": None,
        "last_updated": "2026-01-01", "file_count": 1, "total_bytes": 1,
    }


def connect(
    rows: list[dict[str, Any]], deadline: float = 500.0, snapshots: tuple[str, ...] = ("s1",),
    diffusion: list[dict[str, Any]] = (),
) -> duckdb.DuckDBPyConnection:
    """An in-memory database with every table of schemas/ (empty unless given rows) and every view; the
    token rows are in file order (source_ordinal), which tells a configuration's repeats apart."""
    connection = duckdb.connect()
    given = {
        "token_configurations": [{**row, "source_ordinal": ordinal} for ordinal, row in enumerate(rows)],
        "diffusion_configurations": list(diffusion),
        "snapshots": [snapshot_row(snapshot, day) for day, snapshot in enumerate(snapshots, start=1)],
    }
    for table in schemas.TABLE_NAMES:
        data = pyarrow.Table.from_pylist(given.get(table, []), schema=schemas.arrow_schema(table))
        connection.register(f"{table}_input", data)
        connection.execute(f"create table {table} as select * from {table}_input")
    load_reference_tables(connection, (None, deadline, CHANGE_RELATIVE_TOLERANCE, "0.0.0", None))
    create_views(connection)
    return connection


def fetch(connection: duckdb.DuckDBPyConnection, sql: str) -> list[tuple[Any, ...]]:
    return connection.execute(sql).fetchall()


def test_configurations_derive_units_ids_and_the_deadline_flag() -> None:
    connection = connect(
        [
            measured(energy_per_token_joules=3.6, tensor_parallel=0, data_parallel=0, expert_parallel=0),
            measured(max_num_seqs=16, median_itl_ms=600.0, p90_itl_ms=601.0, p95_itl_ms=602.0, p99_itl_ms=603.0,
                     weight_precision="mxfp4", model_id="Org/UPPER.Case_1"),
        ]
    )
    assert fetch(
        connection,
        "select slug, row_id, wh_per_million_output_tokens, under_itl_deadline, precision,"
        " tensor_parallel, data_parallel, expert_parallel from configurations order by max_num_seqs",
    ) == [
        ("model-a", "model-a/H100/1/8", 1000.0, True, "BF16", 1, 1, 1),
        ("upper.case_1", "upper.case_1/H100/1/16", 1000 / 3.6, False, "MXFP4", 1, 1, 1),
    ]


def test_best_configuration_breaks_energy_ties_by_gpus_then_batch_then_repeat() -> None:
    connection = connect(
        [
            measured(num_gpus=2, max_num_seqs=8, energy_per_token_joules=0.5),
            measured(num_gpus=1, max_num_seqs=16, energy_per_token_joules=0.5),  # repeat 1
            measured(num_gpus=1, max_num_seqs=16, energy_per_token_joules=0.5),  # repeat 2
            measured(num_gpus=1, max_num_seqs=32, energy_per_token_joules=0.5),
            measured(num_gpus=1, max_num_seqs=64, energy_per_token_joules=0.1, median_itl_ms=501.0,
                     p90_itl_ms=502.0, p95_itl_ms=503.0, p99_itl_ms=504.0),
            measured(gpu_model="B200", median_itl_ms=900.0, p90_itl_ms=901.0, p95_itl_ms=902.0, p99_itl_ms=903.0),
        ]
    )
    assert fetch(connection, "select gpu, num_gpus, max_num_seqs, repeat from best_configurations") == [
        ("H100", 1, 16, 1)
    ]


def test_deadline_comes_from_the_build_parameters() -> None:
    rows = [measured(max_num_seqs=8, energy_per_token_joules=2.0), measured(
        max_num_seqs=64, energy_per_token_joules=1.0, median_itl_ms=40.0, p90_itl_ms=41.0, p95_itl_ms=42.0, p99_itl_ms=43.0)]
    assert fetch(connect(rows, deadline=50.0), "select max_num_seqs from best_configurations") == [(64,)]
    assert fetch(connect(rows, deadline=30.0), "select max_num_seqs from best_configurations") == [(8,)]


def test_diffusion_history_derives_identity_units_and_the_latency_ceiling_flag() -> None:
    connection = connect([], diffusion=[
        diffusion_measured(),
        diffusion_measured(source_ordinal=1, batch_latency_s=31.0, weight_precision="fp8", ulysses_degree=2,
                           num_gpus=2, avg_power_watts=23.2),
        video_measured(source_ordinal=0),
        video_measured(source_ordinal=1, batch_latency_s=301.0, avg_power_watts=23.9),
    ])
    assert fetch(
        connection,
        "select task, slug, row_id, unit, width, height, precision, wh_per_output, joules_per_output,"
        " outputs_per_second, under_latency_ceiling from diffusion_configuration_history order by task, source_ordinal",
    ) == [
        ("text-to-image", "image-model", "image-model/H100/1/1/1024x1024/20steps/u1r1", "image", 1024, 1024, "BF16",
         0.1, 360.0, 0.5, True),
        ("text-to-image", "image-model", "image-model/H100/2/1/1024x1024/20steps/u2r1", "image", 1024, 1024, "FP8",
         0.1, 360.0, 0.5, False),  # 31 s is over text-to-image's 30 s ceiling
        ("text-to-video", "video-model", "video-model/H100/1/1/832x480/81f/16fps/20steps/u1r1", "video", 832, 480,
         "BF16", 2.0, 7200.0, 0.01, True),
        ("text-to-video", "video-model", "video-model/H100/1/1/832x480/81f/16fps/20steps/u1r1", "video", 832, 480,
         "BF16", 2.0, 7200.0, 0.01, False),  # 301 s is over text-to-video's 300 s
    ]


def test_best_diffusion_configuration_breaks_energy_ties_by_gpus_batch_repeat_then_file_order() -> None:
    cheap_but_slow = {"energy_per_image_joules": 36.0, "batch_latency_s": 40.0, "avg_power_watts": 0.9}
    connection = connect([], diffusion=[
        diffusion_measured(source_ordinal=0, num_gpus=2, ulysses_degree=2),
        diffusion_measured(source_ordinal=1, batch_size=2, batch_latency_s=4.0),
        diffusion_measured(source_ordinal=2, **cheap_but_slow),  # repeat 1 of the 20-step configuration
        diffusion_measured(source_ordinal=3),  # its repeat 2
        diffusion_measured(source_ordinal=4, inference_steps=30),
        diffusion_measured(source_ordinal=5, inference_steps=40),
        diffusion_measured(source_ordinal=6, gpu_model="B200", **cheap_but_slow),
    ])
    # Energy ties; one GPU beats two, batch 1 beats 2, repeat 1 beats 2 (though earlier in the file), and of
    # the two first repeats of batch 1 the earlier entry wins. The cheaper rows are over the ceiling; B200
    # has none within it.
    assert fetch(
        connection, "select gpu, source_ordinal, wh_per_unit, unit_label from best_configurations_in(null)"
    ) == [("H100", 4, 0.1, "image")]
    assert fetch(connection, "select gpu, row_id, repeat from best_configurations where family = 'diffusion'") == [
        ("H100", "image-model/H100/1/1/1024x1024/30steps/u1r1", 1)
    ]


def test_configuration_values_compare_diffusion_rows_by_the_one_identity_format() -> None:
    connection = connect([], diffusion=[video_measured(), video_measured(source_ordinal=1)])
    assert fetch(
        connection,
        "select distinct configuration, repeat from configuration_values where field = 'batch_latency_s' order by all",
    ) == [("H100/1/1/832x480/81f/16fps/20steps/u1r1", 1), ("H100/1/1/832x480/81f/16fps/20steps/u1r1", 2)]
    assert fetch(connection, "select distinct match_status from model_detail_matches") == [("task file only",)]


def test_efficiency_curves_order_points_and_relate_energy_to_the_smallest_batch() -> None:
    connection = connect(
        [
            measured(max_num_seqs=32, energy_per_token_joules=0.25),
            measured(max_num_seqs=8, energy_per_token_joules=1.0),
            measured(max_num_seqs=16, energy_per_token_joules=0.5),
            measured(max_num_seqs=8, num_gpus=2, tensor_parallel=2, energy_per_token_joules=2.0),
        ]
    )
    assert fetch(
        connection,
        "select num_gpus, batch_limit, point_index, energy_relative_to_smallest_batch"
        " from efficiency_curves order by num_gpus, point_index",
    ) == [(1, 8, 1, 1.0), (1, 16, 2, 0.5), (1, 32, 3, 0.25), (2, 8, 1, 1.0)]


@pytest.mark.parametrize("over", [0, 1, 3])
def test_task_summaries_count_configurations_over_the_deadline(over: int) -> None:
    slow = {"median_itl_ms": 700.0, "p90_itl_ms": 701.0, "p95_itl_ms": 702.0, "p99_itl_ms": 703.0}
    rows = [measured(max_num_seqs=8 * (i + 1), **(slow if i < over else {})) for i in range(4)]
    assert fetch(connect(rows), "select configuration_count, over_latency_limit_count from task_summaries") == [(4, over)]


def test_audit_findings_flag_only_rows_beyond_their_tolerance() -> None:
    connection = connect(
        [
            # energy x throughput / power = 1.0 x 500 / 500 = 1: consistent.
            measured(max_num_seqs=8),
            # 0.5 x 500 / 500 = 0.5: half the energy the power and throughput imply.
            measured(max_num_seqs=16, energy_per_token_joules=0.5),
            # Two measurements 30 % apart; a p99 50 x the median; 100 W on a 700 W GPU.
            measured(max_num_seqs=32, energy_per_token_joules=1.0),  # repeat 1
            measured(max_num_seqs=32, energy_per_token_joules=1.3),  # repeat 2
            measured(max_num_seqs=64, p99_itl_ms=1000.0, avg_power_watts=100.0, output_throughput_tokens_per_sec=100.0),
        ]
    )
    findings = fetch(
        connection,
        "select rule, row_key, round(observed, 6) from audit_findings"
        " where rule != 'detail_row_unmatched' order by rule, row_key",
    )
    assert findings == [
        ("energy_per_token_vs_power_over_throughput", "lm-arena-chat:model-a/H100/1/16#1", 0.5),
        ("energy_per_token_vs_power_over_throughput", "lm-arena-chat:model-a/H100/1/32#2", 1.3),
        ("gpu_power_fraction", "lm-arena-chat:model-a/H100/1/64#1", round(100 / 700, 6)),
        ("itl_tail_ratio", "lm-arena-chat:model-a/H100/1/64#1", 50.0),
        ("repeat_measurements_disagree", "lm-arena-chat:model-a/H100/1/32", 0.3),
    ]


def test_diffs_report_added_removed_and_changed_values_and_index_rows() -> None:
    older = [
        measured(snapshot_id="s1", max_num_seqs=8, energy_per_token_joules=1.0),
        measured(snapshot_id="s1", max_num_seqs=16, energy_per_token_joules=0.8),
        measured(snapshot_id="s1", model_id="Org/Gone", max_num_seqs=8),
    ]
    newer = [
        # Re-serialisation noise below the tolerance is not a change.
        measured(snapshot_id="s2", max_num_seqs=8, energy_per_token_joules=1.0 * (1 + 1e-12)),
        # A real change that also moves the best configuration to max_num_seqs 32.
        measured(snapshot_id="s2", max_num_seqs=16, energy_per_token_joules=0.9, tensor_parallel=2),
        measured(snapshot_id="s2", max_num_seqs=32, energy_per_token_joules=0.7),
    ]
    connection = connect(older + newer, snapshots=("s1", "s2"))
    assert fetch(
        connection,
        "select change, model_id, configuration, field, old_value, new_value from configuration_diff('s1', 's2')"
        " order by all",
    ) == [
        ("added", "Org/Model-A", "H100/1/32", None, None, None),
        ("changed", "Org/Model-A", "H100/1/16", "energy_per_token_joules", "0.8", "0.9"),
        ("changed", "Org/Model-A", "H100/1/16", "tensor_parallel", "1.0", "2.0"),
        ("removed", "Org/Gone", "H100/1/8", None, None, None),
    ]
    assert fetch(connection, "select change, model_id, old_row_id, new_row_id from index_diff('s1', 's2') order by all") == [
        ("best configuration changed", "Org/Model-A", "model-a/H100/1/16", "model-a/H100/1/32"),
        ("removed", "Org/Gone", "gone/H100/1/8", None),
    ]
    assert fetch(connection, "select snapshot_id from index_snapshot") == [("s2",)]


@pytest.mark.parametrize("table", ["token_configurations", "diffusion_configurations"])
def test_configuration_values_compares_every_upstream_field_the_dictionary_declares(table: str) -> None:
    """Every upstream field of a task-file entry is compared across snapshots, except the ones that
    say what was measured (measured_key: they name the configuration); a new upstream field in the
    dictionary fails this until configuration_values compares it too."""
    from schemas import dictionary

    upstream = {name for name, entry in dictionary.table_columns(table).items() if "upstream" in entry}
    token = table == "token_configurations"
    connection = connect([measured()] if token else [], diffusion=[] if token else [diffusion_measured()])
    compared = {field for (field,) in fetch(connection, "select distinct field from configuration_values")}
    padding = {"architecture"} if not token else set()  # the diffusion files have none; null keeps one shape
    assert compared == (upstream - set(dictionary.table_entry(table).measured_key)) | {"extra_fields"} | padding


def _order_of(tmp_path, monkeypatch, files: dict[str, str]) -> list[str]:
    import pipeline.sql_objects as sql_objects
    from pipeline.views import views_in_dependency_order

    for name, text in files.items():
        path = tmp_path / "sql" / "marts" / f"{name}.sql"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(sql_objects, "SQL_DIR", tmp_path / "sql")
    sql_objects.sql_object.cache_clear(), sql_objects.view_files.cache_clear()
    try:
        return [name for name in views_in_dependency_order() if name in files]
    finally:
        sql_objects.sql_object.cache_clear(), sql_objects.view_files.cache_clear()


def test_build_order_comes_from_what_each_file_reads(tmp_path, monkeypatch) -> None:
    files = {
        "a_total": "create or replace view a_total as\nwith b_parts as (select 1 as x)\nselect sum(doubled(x)) from c_parts",
        "c_parts": "create or replace view c_parts as select x from b_base where x > 0",
        "b_base": "create or replace view b_base as select 1 as x union all select 2",
        "doubled": "create or replace macro doubled(x) as x * 2",
    }
    order = _order_of(tmp_path, monkeypatch, files)
    assert order.index("b_base") < order.index("c_parts") < order.index("a_total")
    assert order.index("doubled") < order.index("a_total")


def test_a_cycle_or_a_syntax_error_names_the_files(tmp_path, monkeypatch) -> None:
    from pipeline.errors import PipelineError

    cycle = {"p": "create or replace view p as select * from q", "q": "create or replace view q as select * from p"}
    with pytest.raises(PipelineError, match="in a cycle: (p -> q -> p|q -> p -> q)"):
        _order_of(tmp_path / "cycle", monkeypatch, cycle)
    with pytest.raises(PipelineError, match=r"^sql/marts/broken\.sql: syntax error"):
        _order_of(tmp_path / "broken", monkeypatch, {"broken": "create or replace view broken as selec 1 frm x"})
