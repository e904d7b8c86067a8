"""energy-index sql: one read-only statement against the published database, run in a child process
(forked: no second start of Python), where the bounds hold whatever the query calls: DuckDB holds its
buffers to the memory limit and the operating system caps the data segment a quarter above it, beyond
what the connection holds (RLIMIT_DATA, which counts memory written to; an address-space cap would count
the 64 MB each of malloc's arenas reserves and never uses), every file it writes at that size too
(RLIMIT_FSIZE: the result, each spill file), the spill at the limit in all (DuckDB's
max_temp_directory_size), and the parent kills it at the time limit. The private folder the query spills
and writes into is the parent's: removed on every exit, a kill of the child or a Ctrl-C or stop of the
parent; a child whose parent was killed outright removes it and ends; one whose both were killed at once
is removed by the next call (private_folder). DuckDB writes the results: a box
table, or CSV, JSON lines or Parquet, copied to standard output or --output once the query has finished.

The parent never imports DuckDB; the child imports it, and opens the locked-down connection
(pipeline/query.py: session). A child forked from a process that has loaded DuckDB took about 18 ms more
to start it and answer `select 1` than one that loads it itself (docs/performance.md).
"""

import functools
import json
import os
import resource
import select
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import redirect_stdout, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from pipeline.errors import NEXT_STEP, PipelineError
from pipeline.paths import Paths
from pipeline.private_folders import private_folder, sweep_private_folders
from pipeline.settings import size_bytes

if TYPE_CHECKING:
    import duckdb

COPY_OPTIONS = {"csv": "format csv, header false", "jsonl": "format json", "parquet": "format parquet"}
# In the private folder: what the query wrote, and how it ended (the child's answer to the parent).
RESULT, OUTCOME = "result", "outcome.json"
# DuckDB's buffer manager holds a query to the memory limit (it spills beyond it); the operating system's cap
# is this much above it, for what DuckDB allocates outside its buffers and the allocator's slack: an
# aggregation that spills at 200MB measured 1.2 times that of written data segment (and 200MB resident).
OS_CAP_SHARE = 1.25
# Signals that only another process sends the query's: the bounds end it by SIGKILL (the time limit, the
# out-of-memory killer) or by an error of its own, never by these.
STOPS = {signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}  # (it ignores SIGINT: the parent decides)
# The longest single wait on the child: a platform's timer holds no more, whatever --timeout says.
LONGEST_WAIT_S = 3600.0


@dataclass(frozen=True)
class _Outcome:
    """How the child's query ended: a refusal or failure said in one line, or the rows written (to a file)
    and the CSV header to print before them."""

    error: str | None = None
    rows: int | None = None
    header: str | None = None


def run_sql(paths: Paths, sql: str, parameters: dict[str, Any], output_format: str | None, output: Path | None,
            timeout_s: float, memory_limit: str) -> int | None:
    """Run one read-only statement within its bounds and write its result in `output_format` (None: a
    table on a terminal, else CSV) to `output` or standard output; the number of rows written to a file."""
    if output_format == "parquet" and output is None:
        raise PipelineError("--format parquet needs --output FILE")
    if not paths.database.is_file():
        raise PipelineError(f"{paths.out}: no database has been built there yet; {NEXT_STEP}")
    terminal = sys.stdout.isatty()
    sweep_private_folders()  # what calls killed with their query's process at once left
    with private_folder() as private:
        answer = functools.partial(_answer, paths, sql, parameters, output_format, output is not None, terminal,
                                   private, memory_limit)
        outcome = _bounded(answer, private, timeout_s, memory_limit)
        if outcome.error is not None:
            raise PipelineError(outcome.error)
        if output is not None:
            from pipeline.files import atomic_path

            with atomic_path(output) as temporary:
                shutil.copyfile(private / RESULT, temporary)
            return outcome.rows
        sys.stdout.write(outcome.header or "")
        sys.stdout.flush()
        with open(private / RESULT, "rb") as written:
            shutil.copyfileobj(written, sys.stdout.buffer)
        sys.stdout.flush()
    return None


def _bounded(answer: Callable[[], _Outcome], private: Path, timeout_s: float, memory_limit: str) -> _Outcome:
    """`answer`'s outcome, computed in a forked child held to the bounds (module docstring); killed at
    `timeout_s`, or when this process stops (Ctrl-C, a stop, any error)."""
    # os.fork and two pipes rather than multiprocessing's Process, whose import and start (the parent's
    # sentinel among it) cost `sql "select 1"` about 11 ms (docs/performance.md). The child holds
    # `child_alive` open until it exits, so `child_ended` reads its end of file then; this process holds
    # `parent_alive`, whose end of file tells the child's watcher that this process has gone.
    pipes = (*os.pipe(), *os.pipe())
    child_ended, child_alive, parent_gone, parent_alive = pipes
    for stream in (sys.stdout, sys.stderr):  # else the child would write what this process has buffered
        stream.flush()
    # Ctrl-C and stops wait until each side has set up its own handling: the child then ignores them, and
    # this process kills and reaps the child on its way out.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        pid = os.fork()
    except OSError as error:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        for end in pipes:
            os.close(end)
        raise PipelineError(f"could not start the query's process: {error.strerror}") from None
    if pid == 0:
        _child(answer, private, parent_gone, (child_ended, parent_alive), held)
    os.close(child_alive)
    os.close(parent_gone)
    finished = False
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        ended = select.poll()
        ended.register(child_ended, select.POLLIN)
        deadline = time.monotonic() + timeout_s
        while not finished and (left := deadline - time.monotonic()) > 0:
            finished = bool(ended.poll(1000 * min(left, LONGEST_WAIT_S)))
    finally:
        if not finished:
            os.kill(pid, signal.SIGKILL)
        exit_code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        os.close(child_ended)
        os.close(parent_alive)
    if exit_code == -signal.SIGKILL and time.monotonic() >= deadline:
        raise PipelineError(f"the query was stopped at its time limit of {timeout_s:g} s; --timeout SECONDS "
                            "allows more")
    try:
        return _Outcome(**json.loads((private / OUTCOME).read_bytes()))
    except (OSError, ValueError, TypeError):
        if -exit_code in STOPS:  # no limit of ours ends it so: someone stopped it
            raise PipelineError(f"the query's process was stopped by {signal.Signals(-exit_code).name} from "
                                "another process, before it answered; nothing was written. Run it again") from None
        how = (f"was ended by {signal.Signals(-exit_code).name}" if exit_code < 0
               else f"exited with status {exit_code}")
        raise PipelineError(f"the query's process {how} without an answer (its memory limit is "
                            f"{memory_limit}; --memory-limit SIZE allows more)") from None


def _child(answer: Callable[[], _Outcome], private: Path, parent_gone: int, parents_ends: tuple[int, int],
           held: set[signal.Signals]) -> NoReturn:
    """The forked child, start to end, never returning into the parent's code: the parent alone decides on
    Ctrl-C and stops; a write past RLIMIT_FSIZE fails (EFBIG) rather than killing it unexplained; it ends,
    removing the private folder, if the parent is killed. Status 0 once it has written its outcome, 1
    after an error it could not word (its traceback printed)."""
    exit_code = 1
    try:
        for end in parents_ends:
            os.close(end)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        threading.Thread(target=_end_with_parent, args=(private, parent_gone), daemon=True).start()
        try:
            outcome = answer()
        except PipelineError as error:
            outcome = _Outcome(error=str(error))
        (private / OUTCOME).write_text(json.dumps(asdict(outcome)), encoding="utf-8")
        exit_code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with suppress(Exception):
            sys.stderr.flush()
        os._exit(exit_code)


def _end_with_parent(private: Path, parent_gone: int) -> None:
    os.read(parent_gone, 1)  # end of file once the parent has gone, however it ended
    shutil.rmtree(private, ignore_errors=True)
    os._exit(1)


def _hold_to(limit: int) -> None:
    """Cap this process's data segment at `limit` bytes beyond what it holds now (the interpreter and the
    open connection), and every file it writes at `limit` bytes. Neither can be raised again."""
    with open("/proc/self/status", encoding="ascii") as status:
        held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    for kind, bound in ((resource.RLIMIT_DATA, held + limit), (resource.RLIMIT_FSIZE, limit)):
        hard = resource.getrlimit(kind)[1]
        bound = bound if hard == resource.RLIM_INFINITY else min(bound, hard)
        resource.setrlimit(kind, (bound, bound))


def _answer(paths: Paths, sql: str, parameters: dict[str, Any], output_format: str | None, to_file: bool,
            terminal: bool, private: Path, memory_limit: str) -> _Outcome:
    """In the child: run the statement and write its result into the private folder."""
    import duckdb

    from pipeline.query import session, sql_quoted

    with session(paths, memory_limit=memory_limit, private=private, users_statement=True) as (connection, _):
        _hold_to(int((size_bytes(memory_limit) or 0) * OS_CAP_SHARE))
        statement = _statement(connection, sql)
        explain = statement.type == duckdb.StatementType.EXPLAIN
        if output_format is None:
            output_format = "table" if explain or (terminal and not to_file) else "csv"
        result = private / RESULT
        if output_format == "table":
            relation = connection.sql(sql, params=parameters or None)
            if terminal:  # fitted to the terminal, for reading
                relation = relation.project(_rounded_columns(relation))
            width = shutil.get_terminal_size().columns if terminal else 10_000
            with open(result, "w", encoding=sys.stdout.encoding, errors=sys.stdout.errors) as printed:
                if terminal and not explain and (records := _records_wider_than(relation, width)) is not None:
                    printed.write(records)
                else:
                    with redirect_stdout(printed):
                        relation.show(max_width=width, max_rows=TERMINAL_ROWS)
            return _Outcome()
        if explain:
            raise PipelineError("an explain statement prints as a table: --format table")
        # On its own lines, so that a comment ending the query cannot swallow the parenthesis.
        query = f"(\n{_without_terminator(statement.query)}\n)"
        # The result's columns as DuckDB binds them, without running the query (a relation costs more to start).
        columns = connection.execute(f"describe {query}", parameters or None).fetchall()
        options = COPY_OPTIONS[output_format]
        quoted = [name for name, kind, *_ in columns if kind == "VARCHAR"]
        if output_format == "csv" and not to_file and quoted:  # strings quoted, as the header is
            options += f", force_quote ({', '.join(map(_identifier, quoted))})"
        elif output_format == "csv" and to_file:
            options = "format csv, header true"
        copy = f"copy {query} to '{sql_quoted(result)}' ({options})"
        count = connection.execute(copy, parameters or None).fetchone()[0]
        header = ",".join(_identifier(name) for name, *_ in columns) + "\n"
        return _Outcome(rows=count, header=header if output_format == "csv" and not to_file else None)


# The most rows a terminal table shows (DuckDB's box and the one-field-per-line form alike).
TERMINAL_ROWS = 10_000


def _records_wider_than(relation: "duckdb.DuckDBPyRelation", width: int) -> str | None:
    """The result one field per line, record after record, when DuckDB's box would be wider than `width`
    (the box would drop middle columns, which may be the ones that tell the rows apart); None when it fits.
    A value longer than the line continues on the next, indented."""
    rows = relation.limit(TERMINAL_ROWS).fetchall()
    names = relation.columns
    cells = [["NULL" if value is None else str(value) for value in row] for row in rows]
    # DuckDB's box: a border, then per column its widest cell (name, type or value), a space each side and a border.
    widths = [max([len(name), len(str(kind)), *(len(row[i]) for row in cells)])
              for i, (name, kind) in enumerate(zip(names, relation.types))]
    if 1 + sum(w + 3 for w in widths) <= width:
        return None
    label = min(max(map(len, names)), max(10, width // 3))
    room = max(20, width - label - 3)
    lines = []
    for number, row in enumerate(cells, 1):
        lines.append(f"-[ record {number} of {len(cells)} ]".ljust(min(width, 40), "-"))
        for name, value in zip(names, row):
            parts = [value[start:start + room] for start in range(0, len(value), room)] or [""]
            lines.append(f"{name[:label].ljust(label)} | {parts[0]}")
            lines += [f"{'':{label}} | {part}" for part in parts[1:]]
    if not cells:
        lines.append(f"(no rows; columns: {', '.join(names)})")
    return "\n".join(lines) + "\n"


def _rounded_columns(relation: "duckdb.DuckDBPyRelation") -> str:
    """The columns for reading on a terminal: floating-point numbers rounded to 4 significant digits
    (whole numbers kept whole); everything else as it is. Piped output keeps full precision."""
    columns = []
    for name, kind in zip(relation.columns, relation.types):
        name = _identifier(name)
        if str(kind) in ("DOUBLE", "FLOAT"):
            columns.append(f"case when {name} = 0 or not isfinite({name}) then {name} "
                           f"else round({name}, greatest(0, 3 - floor(log10(abs({name})))::int)) end as {name}")
        else:
            columns.append(name)
    return ", ".join(columns) or "*"


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _statement(connection: "duckdb.DuckDBPyConnection", sql: str) -> Any:
    """The one read-only statement in `sql`, or a PipelineError saying why not."""
    import duckdb

    from pipeline.query import one_line

    try:
        statements = connection.extract_statements(sql)
    except duckdb.ParserException as error:
        raise PipelineError(f"the query does not parse: {one_line(error)}") from None
    if len(statements) != 1:
        raise PipelineError(f"give exactly one statement (got {len(statements)})")
    try:
        kind = statements[0].type.name
    except ValueError:  # a statement type this DuckDB's Python client has no name for (update extensions)
        kind = ""
    if kind not in ("SELECT", "EXPLAIN"):
        raise PipelineError(
            f"refused: {f'a {kind}' if kind else 'this kind of'} statement. energy-index sql runs read-only queries "
            "(select, with, from, describe, show, summarize, explain); it never writes, attaches, installs, loads or "
            "reads files"
        )
    return statements[0]


def _without_terminator(query: str) -> str:
    """The statement without its closing semicolon and what follows it, so that it can sit in parentheses
    (DuckDB's extracted statement keeps both). Tokenizing costs DuckDB milliseconds on first use: only when
    there may be a semicolon."""
    if ";" not in query:
        return query
    import duckdb

    tokens = [position for position, kind in duckdb.tokenize(query) if kind != duckdb.token_type.comment]
    return query[: tokens[-1]] if tokens and query[tokens[-1]] == ";" else query
