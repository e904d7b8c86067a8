"""A fetch decompresses within bounds of memory as well as of bytes: a compression bomb is refused as it
expands, before its bytes reach the disk and a parse of them the memory."""

import gzip
import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).with_name("energy-index"))
BOMB_MB = 400  # spaces, which gzip packs about 1,000 to 1: under the fetch's 1 GiB cap on a file's size


@pytest.fixture(scope="module")
def bomb_server() -> Iterator[str]:
    """An HTTP server whose every file is a gzip bomb (Content-Encoding: gzip): BOMB_MB of spaces, as
    concatenated gzip members of 1 MB each (one member compressed once)."""
    member = gzip.compress(b" " * (1 << 20), compresslevel=9)
    body = member * BOMB_MB

    class Bomb(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Bomb)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/data"
    finally:
        server.shutdown()
        server.server_close()


def test_a_gzip_bomb_is_refused_within_bounded_memory(bomb_server: str, tmp_path: Path) -> None:
    measure = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, r.returncode); "
               "print(r.stderr, end='')")
    printed = subprocess.run([sys.executable, "-c", measure, CLI, "fetch", "--source", bomb_server, "--out",
                              str(tmp_path / "out")], capture_output=True, text=True, timeout=300, check=True).stdout
    first, stderr = printed.split("\n", 1)
    peak_mb, code = map(int, first.split())
    assert code == 1
    assert stderr.endswith("refused as a compression bomb\n") and stderr.count("error:") == 1, stderr
    assert f"{bomb_server}/index.json: its compressed body expands more than 200 times" in stderr
    assert peak_mb < 150, peak_mb  # the interpreter and the fetch's modules; not the bomb's 400 MB
    assert not list((tmp_path / "out").rglob("index.json"))  # nothing of it kept


def test_a_fetch_with_the_longest_deadlines_allowed_works(tmp_path: Path) -> None:
    """--timeout and --fetch-deadline take up to a day (LONGEST_LIMIT_S): the longest works (1e308 once made the
    socket's timeout and the deadline's timer raise OverflowError in a traceback; it is a usage error now)."""
    from functools import partial

    from conftest import NEWEST

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(NEWEST)))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        result = subprocess.run([CLI, "fetch", "--source", f"http://127.0.0.1:{server.server_address[1]}", "--out",
                                 str(tmp_path / "out"), "--timeout", "86400", "--fetch-deadline", "86400"],
                                capture_output=True, text=True, timeout=300)
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "fetch: 70 files" in result.stderr
