"""The private folders of queries in the system's temporary directory (energy-index sql's spill and result,
a reading command's spill): each removed on every exit its process sees, and, when its processes were all
killed at once, by the next call. The standard library only: `sql`'s parent imports it."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# What their names begin with, the folder that holds them being shared (other programs', other users').
PRIVATE_PREFIX = "energy-index-sql-"


@contextmanager
def private_folder() -> Iterator[Path]:
    """Yield a new folder in the temporary directory, removed on every exit this process sees. It is
    locked (flock on the folder itself) as long as this process or a child forked from it is alive, so
    that the next call can tell a folder that processes killed all at once left behind (SIGKILL to the
    group: `timeout -s KILL`, a service manager, the out-of-memory killer) from a live call's
    (sweep_private_folders)."""
    import fcntl

    while True:
        folder = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(descriptor).st_nlink > 0:  # not removed by a sweep between its making and the lock
                break
        except BlockingIOError:  # a sweep holds it, to remove it
            pass
        os.close(descriptor)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # while locked: no sweep removes it under this process
        os.close(descriptor)


def sweep_private_folders() -> None:
    """Remove the private folders (private_folder) no live process holds: those of calls killed with their
    children at once. Another user's are not ours to open, and are left."""
    import fcntl

    for folder in Path(tempfile.gettempdir()).glob(f"{PRIVATE_PREFIX}*"):
        try:
            descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(folder, ignore_errors=True)
        except BlockingIOError:  # a live call's
            pass
        finally:
            os.close(descriptor)
