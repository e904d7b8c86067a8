"""Progress for steps that can take more than a couple of seconds: a bar that updates in place on a
terminal (tqdm, which draws only where stderr is one); in a log or under cron nothing, or one line per
item when the caller asks for it."""

import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

Item = TypeVar("Item")
# --quiet: only what needs a person prints, the lines of NOTEWORTHY and those said with always=True.
_quiet = False
# A failure ("energy-index: error: ...") or a warning ("fetch: warning: ..."), in the project's wording.
NOTEWORTHY = re.compile(r"^[\w-]+: (error|warning): ")


def set_quiet(quiet: bool) -> None:
    """--quiet: say() prints only failures, warnings and what is said with always=True; no progress bars."""
    global _quiet
    _quiet = quiet


def progress(total: int | None, label: str, unit: str = "file") -> Any:
    """A tqdm bar of `total` items (a counter when None); call .update(n) and .close(), or use it as a
    context manager."""
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit=unit, leave=False, file=sys.stderr, ncols=100,
                disable=_quiet or not sys.stderr.isatty() or total == 0, mininterval=0.5)


def say(message: str, always: bool = False) -> None:
    """One line on stderr: above a progress bar being drawn on a terminal (not through it), else plain. With
    --quiet, only a failure, a warning or a message said `always`."""
    if _quiet and not always and not NOTEWORTHY.match(message):
        return
    if sys.stderr.isatty():
        from tqdm import tqdm

        tqdm.write(message, file=sys.stderr)
    else:
        print(message, file=sys.stderr, flush=True)


def each(items: Iterable[Item], label: str, unit: str = "item", logged: bool = False) -> Iterator[Item]:
    """Yield `items` under a bar on a terminal; elsewhere, one line per item when `logged`."""
    items = list(items)
    counted = logged and not sys.stderr.isatty()
    with progress(len(items), label, unit) as bar:  # drawn on a terminal only
        for number, item in enumerate(items, start=1):
            if counted:
                say(f"{label} {number}/{len(items)}: {item}")
            yield item
            bar.update(1)


def seconds_since(started: float) -> str:
    """The time since `started` (time.perf_counter()), as every step's closing line states it."""
    return f"{time.perf_counter() - started:.2f} s"
