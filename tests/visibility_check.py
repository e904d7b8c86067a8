"""Run inside a client's environment (tests/test_publish_visibility.py starts it): open the published
database one way (MODE), then answer each line "query" on stdin with one JSON line on stdout holding
build_parameters.itl_deadline_ms as that client sees it now, so the test can tell which build it reads.

Usage: python visibility_check.py MODE DATABASE

Modes, each as docs/querying.md ("Seeing a new publish") configures the client:
  duckdb-reconnect   a new connection per query to the fixed path, another connection kept open
  duckdb-resolved    a new connection per query to the path resolved (os.path.realpath), another kept open
  pool-default       SQLAlchemy (duckdb-engine) with its default pool
  pool-null          SQLAlchemy with NullPool (Superset's own setting), no other connection open
  pool-null-busy     SQLAlchemy with NullPool while another connection of the engine stays open
  pool-null-resolved SQLAlchemy with NullPool and the URL's path resolved per engine, as Superset's
                     DB_CONNECTION_MUTATOR below does, another connection kept open
  pool-null-event    SQLAlchemy with NullPool and a do_connect listener opening the resolved path, another
                     connection kept open
  pool-recycle       SQLAlchemy's default pool with pool_recycle=RECYCLE_S and pool_pre_ping: a line "wait"
                     (sent once the publish has finished) is answered by one query made when the pooled
                     connection is older than RECYCLE_S, the moment the setting promises the new build
"""

import json
import os
import sys
import time

import duckdb

QUERY = "select itl_deadline_ms from build_parameters"
RECYCLE_S = 1


def DB_CONNECTION_MUTATOR(uri, params, username, security_manager, source):  # noqa: N802 - Superset's name
    """The superset_config.py hook docs/querying.md gives: the published path resolved to the generation it
    names now, so that a new engine opens the newest build whatever DuckDB keeps open for the old path."""
    if uri.drivername == "duckdb" and uri.database:
        uri = uri.set(database=os.path.realpath(uri.database))
    return uri, params


def main() -> None:
    mode, database = sys.argv[1], sys.argv[2]
    held = None
    if mode.startswith("duckdb"):
        held = duckdb.connect(database, read_only=True)
        held.execute(QUERY).fetchall()

        def query() -> float:
            path = os.path.realpath(database) if mode == "duckdb-resolved" else database
            connection = duckdb.connect(path, read_only=True)
            try:
                return connection.execute(QUERY).fetchall()[0][0]
            finally:
                connection.close()
    else:
        import sqlalchemy
        from sqlalchemy.pool import NullPool

        url = sqlalchemy.engine.make_url(f"duckdb:///{database}")
        params = {"connect_args": {"read_only": True}}
        if mode.startswith("pool-null"):
            params["poolclass"] = NullPool
        elif mode == "pool-recycle":
            params.update(pool_recycle=RECYCLE_S, pool_pre_ping=True)

        def engine() -> "sqlalchemy.engine.Engine":
            # Superset makes an engine per query (models/core.py _get_sqla_engine), the mutator applied each time.
            if mode == "pool-null-resolved":
                mutated_url, mutated_params = DB_CONNECTION_MUTATOR(url, dict(params), None, None, None)
                return sqlalchemy.create_engine(mutated_url, **mutated_params)
            return shared

        shared = sqlalchemy.create_engine(url, **params)
        opened = [0.0]  # when the pool last opened a connection, in time.time() as the pool records it

        @sqlalchemy.event.listens_for(shared, "connect")
        def note_when_opened(dbapi_connection, record):  # noqa: ANN001, ARG001 - SQLAlchemy's signature
            opened.append(time.time())

        if mode == "pool-null-event":
            @sqlalchemy.event.listens_for(shared, "do_connect")
            def open_the_current_build(dialect, record, cargs, cparams):  # noqa: ANN001, ARG001 - as documented
                cparams["database"] = os.path.realpath(database)
        if mode in ("pool-null-busy", "pool-null-resolved", "pool-null-event"):
            held = engine().connect()
            held.execute(sqlalchemy.text(QUERY)).fetchall()

        def query() -> float:
            with engine().connect() as connection:
                return connection.execute(sqlalchemy.text(QUERY)).scalar()
    for line in sys.stdin:
        started = time.monotonic()
        if line.strip() == "wait":
            # pool_recycle is a time: the pool replaces a connection at the first checkout after it is
            # RECYCLE_S old (SQLAlchemy notes its start just before the "connect" event), and not before,
            # so the wait is to just past that moment (older means strictly), once, at most RECYCLE_S;
            # no event says "the build changed".
            time.sleep(max(0.0, opened[-1] + RECYCLE_S - time.time()) + 0.01)
        value = query()
        print(json.dumps({"itl_deadline_ms": value, "duckdb": duckdb.__version__,
                          "seconds": round(time.monotonic() - started, 1)}), flush=True)


if __name__ == "__main__":
    main()
