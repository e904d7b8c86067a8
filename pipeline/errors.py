"""The one exception type the CLI turns into a clear message and a non-zero exit, and the hints that
messages give: the command as it can be typed here, the next step, the nearest names."""

import os
import shlex
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from pipeline.settings import DEFAULT_OUT

PROG = "energy-index"
# What a newcomer should run when a step finds nothing to work on. The CLI prints it as next_step(OUT)
# words it: for the --out given, and with the command as it can be typed here.
NEXT_STEP = "run 'make' (or 'energy-index refresh --source FOLDER_OR_URL')"


def command_name() -> str:
    """How to type the energy-index command here: its bare name when the shell finds this installation
    on PATH (an activated .venv, pipx), else its path beside this Python, e.g. .venv/bin/energy-index."""
    installed = Path(sys.executable).parent / PROG
    on_path = shutil.which(PROG)
    if not installed.is_file() or (on_path is not None and Path(on_path).resolve() == installed.resolve()):
        return PROG
    relative = os.path.relpath(installed)
    return relative if not relative.startswith("..") else str(installed)


def out_option(out: Path, option: str = "--out ") -> str:
    """' --out DIR' (or another `option`) for an output folder other than the default, shell-quoted; else ''."""
    return "" if Path(out) == DEFAULT_OUT else f" {option}{shlex.quote(str(out))}"


def next_step(out: Path) -> str:
    """NEXT_STEP for the output folder `out`, with the command as it can be typed here."""
    command = f"{command_name()} refresh --source FOLDER_OR_URL{out_option(out)}"
    return f"run 'make{out_option(out, 'OUT=')}' (or '{command}')"


def nearest(name: str, names: Iterable[str], count: int = 3) -> list[str]:
    """The names nearest to `name`, ignoring case: those that begin with it, or else those that contain
    it, each ranked as the SQL macro closest_names ranks them (by edit distance to the whole name or to its
    last path segment, a model id's slug, then by name: 'qwen3' finds Qwen/Qwen3-8B before Qwen/Qwen3-14B);
    or else the closest spelt (difflib's ratio, at least 0.5: none when nothing is near, where closest_names
    lists the three least far however far). At most `count`."""
    import difflib

    wanted = name.lower()
    candidates = sorted(set(names))

    def distance(candidate: str) -> tuple[int, str]:
        lowered = candidate.lower()
        return min(_edit_distance(lowered, wanted), _edit_distance(lowered.rpartition("/")[2], wanted)), candidate

    starting = sorted((n for n in candidates if n.lower().startswith(wanted)), key=distance)
    containing = sorted((n for n in candidates if wanted in n.lower()), key=distance)
    lowered = {n.lower(): n for n in candidates}
    spelt = [lowered[n] for n in difflib.get_close_matches(wanted, list(lowered), n=count, cutoff=0.5)]
    return (starting or containing or spelt)[:count]


def _edit_distance(first: str, second: str) -> int:
    """Levenshtein's distance, as DuckDB's levenshtein() counts it for closest_names (the standard library
    has none; difflib's ratio is another measure). Names are short: the quadratic table costs microseconds."""
    previous = list(range(len(second) + 1))
    for row, left in enumerate(first, start=1):
        current = [row]
        for column, right in enumerate(second, start=1):
            current.append(min(previous[column] + 1, current[column - 1] + 1, previous[column - 1] + (left != right)))
        previous = current
    return previous[-1]


# How much of a name a user gave a message echoes: the longest measured name (a model id) is 45 characters.
SHOWN_CHARACTERS = 80


def shown(name: str, quoted: bool = False) -> str:
    """A name a user gave (a task, model, GPU, snapshot, commit, folder) as a one-line message echoes it:
    with its control characters escaped, `quoted` as Python quotes it, and past SHOWN_CHARACTERS cut, marked
    with … and its length, so that a 10,000-character name gives a line a person can read."""
    cut = name if len(name) <= SHOWN_CHARACTERS else name[:SHOWN_CHARACTERS] + "…"
    text = repr(cut) if quoted else repr(cut)[1:-1]
    return text if cut == name else f"{text} ({len(name):,} characters)"


class PipelineError(Exception):
    """A failure the user can act on: the message names the file, field or row at fault."""

    def __init__(self, message: str, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.details = details or []

    def __reduce__(self) -> tuple[type, tuple[str, list[str]]]:
        # Raised in worker processes too: the details must survive the trip back.
        return type(self), (self.args[0], self.details)

    def __str__(self) -> str:
        return "\n".join([self.args[0], *(f"  - {detail}" for detail in self.details)])


def snapshot_id_for(given: str, commits: Mapping[str, str | None]) -> str:
    """The snapshot id `given` names among `commits` (snapshot id -> its full upstream commit hash, None when
    unknown): the id itself, or a bare commit hash (4 to 40 hex digits, any case, e.g. 7885788) that begins
    the full hash of one snapshot's commit, every digit given compared; `given` unchanged when it names
    none, so that the caller's own error names it. A hash that begins two snapshots' commits is an error."""
    if given in commits or not 4 <= len(given) <= 40 or any(c not in "0123456789abcdef" for c in given.lower()):
        return given
    wanted = given.lower()
    matches = sorted(i for i, commit in commits.items() if commit and commit.lower().startswith(wanted))
    if len(matches) > 1:
        raise PipelineError(f"commit {shown(given)} is ambiguous: snapshots {', '.join(matches)}; give more of the "
                            "hash or the snapshot id")
    return matches[0] if matches else given


def ignore_interrupts() -> None:
    """A worker process's start: Ctrl-C at a terminal reaches every process of its group, and the command
    alone handles it (it stops its workers and says so in one line); a worker would print a traceback."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
