"""Progress for steps that can take more than a couple of seconds: a bar that updates in place on a
terminal (tqdm, which draws only where stderr is one) and nothing at all in a log or under cron."""

import sys
from typing import Any


def progress(total: int | None, label: str, unit: str = "file") -> Any:
    """A tqdm bar of `total` items (a counter when None); call .update(n) and .close(), or use it as a
    context manager."""
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit=unit, leave=False, file=sys.stderr, ncols=100,
                disable=not sys.stderr.isatty() or total == 0, mininterval=0.5)
