"""The energy-index command's entry point (`energy-index`, `python -m pipeline`). It imports nothing
before its guard, so that Ctrl-C while Python is still loading the command's modules (a second or
more on a loaded machine) is one line too, not a traceback; and `--version` answers without loading
the command line at all."""

import sys


def main() -> int:
    if sys.argv[1:] == ["--version"]:
        from pipeline import __version__

        print(f"energy-index {__version__}")
        return 0
    try:
        from pipeline.cli import main as run
    except KeyboardInterrupt:
        print("energy-index: error: interrupted before it started; nothing was changed", file=sys.stderr)
        return 1
    return run()


if __name__ == "__main__":
    sys.exit(main())
