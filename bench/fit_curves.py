"""bench: the build's fitting step alone: pipeline.fits.fit_curves over the curve points of one snapshot
(efficiency_curve_points_in, read first from a built database, untimed), as the build fits a new snapshot
(in this process; above pipeline.fits.PARALLEL_MIN_WORK with a worker process per other core).
Prints: points, fitted rows, seconds importing pipeline.fits (scipy with it), seconds fitting. With
COPIES, the points are fitted as COPIES copies of themselves under other model ids, each copy's values
scaled by a factor of its own (a series met twice is fitted once), to see how the fitting grows with the
curves without a synthetic snapshot's refresh.
Usage: python bench/fit_curves.py DATABASE [SNAPSHOT_ID [COPIES]] (default: the index snapshot, 1)."""

import sys
import time


def main() -> None:
    # Imported here, not at the top: above a size the fitting runs in worker processes started afresh
    # ("spawn"), and each of them imports this script again, which should cost them nothing.
    import pyarrow
    import pyarrow.compute

    from pipeline.database import connect

    with connect(sys.argv[1], read_only=True) as connection:
        snapshot_id = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else \
            connection.execute("select snapshot_id from index_snapshot").fetchall()[0][0]
        # The build's own query (pipeline/stored_tables.py: store).
        points = connection.sql("select * from efficiency_curve_points_in(?) order by all",
                                params=[snapshot_id]).to_arrow_table()
    copies = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    if copies > 1:
        model = points.schema.get_field_index("model_id")
        values = ("wh_per_unit", "gpu_power_watts_total", "units_per_second", "median_itl_ms", "batch_latency_s")

        def copied(copy: int) -> pyarrow.Table:
            table = points.set_column(model, "model_id", pyarrow.compute.binary_join_element_wise(
                points["model_id"], pyarrow.scalar(f"#copy{copy}"), ""))
            for name in values:
                table = table.set_column(table.schema.get_field_index(name), name,
                                         pyarrow.compute.multiply(table[name], 1.0 - copy * 1e-4))
            return table

        points = pyarrow.concat_tables(copied(copy) for copy in range(copies))
    # pyarrow imports pandas the first time it converts an array to numpy, which the fitting does; a refresh
    # has imported it already (ingest), so it is imported here untimed.
    import pandas  # noqa: F401

    started = time.perf_counter()
    from pipeline import fits  # timed: the build imports it only when a snapshot needs fitting

    imported = time.perf_counter() - started
    started = time.perf_counter()
    fitted = fits.fit_curves(points)
    print(points.num_rows, fitted.num_rows, f"{imported:.4f}", f"{time.perf_counter() - started:.4f}")


if __name__ == "__main__":
    main()
