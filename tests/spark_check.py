"""Run inside the Spark environment (tests/test_spark.py starts it; pyspark lives in its own environment,
.engines/pyspark-<version>/, because pandera imports an installed pyspark at every step): run the script
energy-index spark-sql wrote, in Spark local mode, then write each named view's rows as Parquet; print
one JSON document of the outcome.

Usage: python spark_check.py SCRIPT.sql OUTPUT_FOLDER VIEW...
"""

import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

# The script's statements end with ';' at a line end, and no statement holds one (pipeline/spark.py).
STATEMENT_END = ";\n"


def main() -> None:
    script, output, views = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    started = time.perf_counter()
    spark = (
        SparkSession.builder.master("local[2]").appName("energy-index views")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    failures: dict[str, str] = {}
    seconds: dict[str, float] = {"session": round(time.perf_counter() - started, 1)}
    for statement in script.read_text(encoding="utf-8").split(STATEMENT_END):
        if not statement.strip():
            continue
        header = next((line for line in statement.splitlines() if line.startswith(("CREATE", "SET"))), "")
        begun = time.perf_counter()
        try:
            spark.sql(statement)
        except Exception as error:  # noqa: BLE001 - every failing statement is reported, not just the first
            failures[header] = str(error).splitlines()[0][:500]
        seconds[header] = round(time.perf_counter() - begun, 1)
    for view in views:
        begun = time.perf_counter()
        try:
            spark.table(view).coalesce(1).write.mode("overwrite").parquet(str(output / view))
        except Exception as error:  # noqa: BLE001
            failures[view] = str(error).splitlines()[0][:500]
        seconds[view] = round(time.perf_counter() - begun, 1)
    version = spark.version
    spark.stop()
    print(json.dumps({"version": version, "failures": failures, "seconds": round(time.perf_counter() - started, 1),
                      "steps": seconds}))


if __name__ == "__main__":
    main()
