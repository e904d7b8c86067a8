"""The export floor: the exported documents, already parsed, formatted by the export's own writer
(msgspec's indented output with json.dumps's ASCII escaping, every float known to print alike) and
written, in one process, with no other work. Prints its own seconds (formatting and writing only);
the caller checks the files against the pipeline's byte for byte.

Usage: python bench/floor_export_writer.py EXPORTED_INDEX_DIR OUT_DIR
"""

import os
import sys
import time

import msgspec

from pipeline import jsontext


def main(exported: str, out: str) -> None:
    names = sorted(os.path.relpath(os.path.join(d, f), exported) for d, _, files in os.walk(exported) for f in files)
    documents = []
    for name in names:
        with open(os.path.join(exported, name), "rb") as handle:
            documents.append(msgspec.json.decode(handle.read()))
    for folder in sorted({os.path.dirname(name) for name in names}):
        os.makedirs(os.path.join(out, folder), exist_ok=True)
    started = time.perf_counter()
    for name, document in zip(names, documents):
        with open(os.path.join(out, name), "wb") as handle:
            handle.write(jsontext.dumps(document, floats_vetted=True))
    print(time.perf_counter() - started)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
