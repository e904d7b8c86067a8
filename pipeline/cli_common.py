"""What every command of the command line shares: the parameter types (each a function that returns the value
or says why not), the options several commands take, and how a command's handler runs (step): its lock or
its generation, and every failure as one line. The commands themselves are in cli_steps.py, cli_readers.py
and cli_outputs.py; pipeline/cli.py is the entry point that loads only the module of the command run."""

import datetime
import errno
import functools
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from pipeline import settings
from pipeline.errors import NEXT_STEP, PROG, PipelineError, nearest, next_step, shown
from pipeline.paths import Paths
from pipeline.progress import say, set_quiet


# ---- parameter types: each a function that returns the value or raises ValueError saying why, which click
# (8.4 on) reports as "Invalid value for '--option': why", a usage error (exit 2). One rule: a value not of
# the option's form or range is a usage error; a file or folder that does not exist is not (the command line
# is well formed; what it names is missing): PipelineError, which main() reports with exit 1. Every number is
# finite and positive; a limit (seconds, bytes) also has its maximum (settings.LONGEST_LIMIT_S, LARGEST_SIZE),
# so that no value means "no limit" ----

def _read(kind: Callable[[str], float], text: str, form: str) -> float:
    """`text` read as `kind` (float or int), or the usage error naming the form it lacks."""
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{form}: {text!r}") from None


def positive_number(text: str) -> float:
    value = _read(float, text, "not a number")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a positive number, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A time limit: a positive number of seconds, at most settings.LONGEST_LIMIT_S (a day)."""
    value = _read(float, text, "not a number")
    if not 0 < value <= settings.LONGEST_LIMIT_S:  # nan and inf fail it too
        raise ValueError(f"must be a positive number of seconds, at most {settings.LONGEST_LIMIT_S} (a day), "
                         f"got {text!r}")
    return value


def byte_count(text: str) -> int:
    """A size limit: a whole number of bytes from 1 to settings.LARGEST_SIZE (1 EiB)."""
    value = int(_read(int, text, "not a whole number of bytes"))
    if not 1 <= value <= settings.LARGEST_SIZE:
        raise ValueError(f"must be from 1 to {settings.LARGEST_SIZE} bytes (1 EiB), got {text!r}")
    return value


def existing_file(option: str) -> Callable[[str], Path]:
    """The type of an option naming a file that must exist; a missing one is named with exit 1, as a missing
    SOURCE is."""
    def existing(text: str) -> Path:
        if not Path(text).is_file():
            problem = "a folder, not a file" if Path(text).is_dir() else "no such file"
            raise PipelineError(f"{option} {text!r}: {problem}")
        return Path(text)

    return existing


def calendar_date(text: str) -> str:
    """A real calendar date, YYYY-MM-DD, checked before any work (it reaches the public files)."""
    with suppress(ValueError):
        if datetime.date.fromisoformat(text).isoformat() == text:  # not 20260927, which it reads too
            return text
    raise ValueError(f"{text!r} is not a calendar date written YYYY-MM-DD, e.g. 2026-09-27")


def iso_time(text: str) -> str:
    """An ISO 8601 time with its zone (settings.time_problem), checked before any work."""
    if (problem := settings.time_problem(text)) is not None:
        raise ValueError(f"{text!r} {problem}")
    return text


def source(text: str) -> str:
    """A URL, or a local folder that exists, with the nearest folders beside a missing one."""
    folder = Path(text)
    try:
        if settings.is_url(text) or folder.exists():
            return text
    except OSError:  # a name longer than the file system allows (ENAMETOOLONG): no such folder either
        pass
    try:
        close = nearest(folder.name, [c.name for c in folder.parent.iterdir() if c.is_dir()]) if folder.name else []
    except OSError:
        close = []
    hint = f"; did you mean {' or '.join(repr(str(folder.parent / name)) for name in close)}?" if close else ""
    raise PipelineError(f"{shown(text, quoted=True)}: no such folder{hint} (SOURCE must be a local public/data "
                        "folder or a URL)")


def commit_hash(text: str) -> str:
    if not settings.COMMIT_PATTERN.match(text):
        raise ValueError(f"{shown(text, quoted=True)} is not a commit hash (7 to 40 lower-case hex digits, e.g. "
                         "7885788)")
    return text


def memory_size(text: str) -> str:
    if (size := settings.size_bytes(text)) is None:
        raise ValueError(f"{text!r} is not a size, e.g. 500MB or 8GB")
    low, high = settings.SQL_MEMORY_RANGE
    if not low <= size <= high:
        raise ValueError(f"{text!r} is outside the sizes a query can run within ({low // 1000 ** 2}MB to "
                         f"{high // 1024 ** 6}EiB)")
    return text.strip()


def parameter(text: str) -> tuple[str, Any]:
    """NAME=VALUE; a value that reads as a whole or decimal number is bound as one, else as text."""
    name, equals, value = text.partition("=")
    if not equals or not name.isidentifier():
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    for kind in (int, float):
        with suppress(ValueError):
            return name, kind(value)
    return name, value


def non_negative_number(text: str) -> float:
    """A finite number of 0 or more (a grid of 0 gCO2e per kWh is a real answer: all-renewable supply)."""
    value = _read(float, text, "not a number")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"must be a number of 0 or more, got {text!r}")
    return value


def most(kind: str, largest: float, per: str) -> Callable[[str], float]:
    """The type of a positive number with a maximum beyond which no sensible answer lies (plan's demand)."""
    def number(text: str) -> float:
        value = positive_number(text)
        if value > largest:
            raise ValueError(f"beyond any sensible fleet: at most {largest:.4g} {kind} {per}, got {text!r}")
        return value

    return number


POSITIVE_INTEGER = click.IntRange(min=1)


# ---- options many commands share, each written once ----

def option(setting: settings.Setting, **kwargs: Any) -> Callable:
    """A click option for a setting: its name, default and help from pipeline/settings.py."""
    default = settings.shown(setting)
    return click.option(setting.name, default=setting.default, help=setting.help + (
        f" (default: {default})" if default else ""), **kwargs)


def options(*decorators: Callable) -> Callable:
    """Several option decorators as one, applied in the order written (a set several commands take)."""
    return lambda function: functools.reduce(lambda f, decorate: decorate(f), reversed(decorators), function)


OUT = option(settings.OUT, type=click.Path(path_type=Path), metavar="DIR")
# Every command that writes: quiet when all went well and nothing needs a person (cron mails what is printed).
QUIET = click.option("--quiet", "-q", is_flag=True, help="print nothing unless it needs attention: a failure, a "
                     "warning, or (refresh and history only) audit findings the previous published build did not have")
# The commands that publish: an exit status of its own for new audit findings, for whoever wants an alert on them.
ALERT = click.option("--alert-new-findings", is_flag=True, help="exit with status 3 (not 0) when the build "
                     "published has audit findings the previous published build did not have (docs/operating.md)")


def examples(*lines: str) -> str:
    """A command's epilog: its example command lines, kept as written (click's \\b: no rewrapping)."""
    return "\b\nexamples:\n" + "\n".join(f"  {line}" for line in lines)


def one_of(args: SimpleNamespace, first: str, second: str, required: bool = False) -> None:
    """A usage error when both options are given, or (`required`) neither."""
    given = [name for name in (first, second) if getattr(args, name)]
    if len(given) == 2 or (required and not given):
        raise click.UsageError(f"give --{first} or --{second}{'' if required else ', not both'}")


def step(mode: str, check: Callable[[SimpleNamespace], None] | None = None) -> Callable:
    """A command's handler(args, paths) run as `mode` says: "read" (no lock; a reader that has gone is
    the end of the output), "lock" (one writer per OUT) or "stage" (into a new generation, published
    if it completes). Every failure is one line: 1 for the pipeline's, 2 for usage (before any work); a
    handler may return another status (3: published with new audit findings, when asked for)."""

    def decorate(handler: Callable[[SimpleNamespace, Paths], None]) -> Callable[..., int]:
        @functools.wraps(handler)
        def run(**values: Any) -> int:
            args = SimpleNamespace(**values)
            if check is not None:
                check(args)
            paths = Paths(values.get("out", settings.DEFAULT_OUT))
            set_quiet(bool(values.get("quiet")))
            status = None  # a reader that has gone ends the handler without one
            published = _published(paths)
            try:
                with ExitStack() as stack:
                    if mode == "read":
                        stack.enter_context(_reader_may_leave())
                    else:
                        from pipeline.publish import exclusive_lock, new_generation  # never loaded by readers

                        stack.enter_context(exclusive_lock(paths))
                        if mode == "stage":
                            paths = stack.enter_context(new_generation(paths))
                    status = handler(args, paths)
            except (Exception, KeyboardInterrupt) as error:
                if (message := _failure(error, paths.out, _published(paths) != published)) is None:
                    raise
                say(f"{PROG}: error: {message}")
                return 1
            return status or 0

        return run

    return decorate


# The stop signals this process received (their names), first first: pipeline/cli.py's handler appends each and
# its main() clears them for each run; _failure reads them (an error after a stop is the stop).
STOPPED_BY: list[str] = []


def _published(paths: Paths) -> str | None:
    """The generation OUT/current names (None: none), to tell whether a command that failed had published."""
    try:
        return os.readlink(paths.current)
    except OSError:
        return None


def _failure(error: BaseException, out: Path, published: bool = False) -> str | None:
    """The one line that reports a failure; None for a bug, which keeps its traceback. A failure of the
    machine rather than the input says what, where and what to do. Any error after a stop signal is the
    stop (DuckDB reports the KeyboardInterrupt raised in a query as RuntimeError('Query interrupted'));
    `published`: the command had switched OUT/current to its build when it failed."""
    unchanged = (f"the new build was published in {out} before it stopped" if published
                 else f"the last published build in {out} is unchanged")
    if isinstance(error, PipelineError) and not STOPPED_BY:
        return str(error).replace(NEXT_STEP, next_step(out))
    if isinstance(error, KeyboardInterrupt) or STOPPED_BY:
        return f"interrupted{'' if STOPPED_BY[:1] in ([], ['SIGINT']) else f' by {STOPPED_BY[0]}'}; {unchanged}"
    if type(error).__module__.split(".")[0] in ("duckdb", "_duckdb"):
        if "No space left on device" not in str(error):
            return f"the database engine failed: {str(error).splitlines()[0]}; {unchanged}"
        error = OSError(errno.ENOSPC, "no space")
    if not isinstance(error, OSError):
        return None
    advice = {
        errno.ENOSPC: "no space left on the device; free some space and run again",
        errno.EDQUOT: "disk quota exceeded; free some space and run again",
        errno.EACCES: "permission denied; run as a user who may write there, or choose another --out",
        errno.EPERM: "operation not permitted; run as a user who may write there, or choose another --out",
        errno.EROFS: "read-only file system; choose an --out on a writable file system",
    }.get(error.errno, error.strerror or str(error))
    return f"{error.filename or out}: {advice}; {unchanged}"


@contextmanager
def _reader_may_leave() -> Iterator[None]:
    """The reader of standard output may go (`| head -1`): the output ends there, quietly. What is still
    buffered is dropped, so that Python's flush at exit does not fail on the closed pipe again."""
    try:
        yield
        sys.stdout.flush()  # a reader that has gone is met here, not in Python's flush at exit
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def checked(paths: Paths, full: bool = False) -> Paths:
    """`paths`, once the published files are checked against what was published (published.check_published)."""
    from pipeline.published import check_published

    check_published(paths, full=full)
    return paths
