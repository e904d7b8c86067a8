"""What a user might write instead: json.load, pandas.json_normalize and to_parquet on every task
and detail file of a snapshot.

Usage: python bench/baseline_pandas.py SNAPSHOT_DIR OUT_DIR
"""

import glob
import json
import sys

import pandas as pd


def main(source: str, out: str) -> None:
    files = sorted(glob.glob(source + "/tasks/*.json") + glob.glob(source + "/models/*.json"))
    for i, path in enumerate(files):
        with open(path) as handle:
            document = json.load(handle)
        frame = pd.json_normalize(document["configurations"])
        frame = frame.drop(columns=[c for c in frame.columns if c.startswith("output_length_distribution")])
        frame.to_parquet(f"{out}/t{i}.parquet")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
