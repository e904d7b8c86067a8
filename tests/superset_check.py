"""Run inside Superset's environment (tests/test_publish_visibility.py starts it, with SUPERSET_CONFIG_PATH
naming a superset_config.py that holds docs/querying.md's settings): set Superset up as a new install is
(its metadata database migrated, its roles, an admin), add the published database through Superset's REST
API as docs/querying.md says, then answer each line "query" on stdin with one JSON line on stdout: what
build_parameters.itl_deadline_ms is through SQL Lab (the REST call the SQL editor makes) and through a
chart's path (Database.get_df), with the superset_config.py as written and with its DB_CONNECTION_MUTATOR
switched off.

Usage: python superset_check.py DATABASE ENGINE_PARAMETERS_JSON

Before the first answer two connections made by Superset's engine are opened and kept open, as a
dashboard's parallel or long queries keep them, one with the mutator and one without: on DuckDB before 1.5
such a connection makes a new one to the same path see the database it holds.
"""

import json
import os
import sys
from importlib.metadata import version

# Superset prints to stdout when it loads its configuration: the answers get a stream of their own.
ANSWERS = os.fdopen(os.dup(sys.stdout.fileno()), "w")
os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

QUERY = "select itl_deadline_ms from build_parameters"
ADMIN = {"username": "admin", "password": "not-a-secret"}  # a throwaway metadata database's only user


def main() -> None:
    database_path, engine_parameters = sys.argv[1], json.loads(sys.argv[2])
    import duckdb
    import sqlalchemy
    from flask_migrate import upgrade

    from superset.app import create_app

    app = create_app()
    with app.app_context():
        from superset.extensions import appbuilder, db, security_manager
        from superset.models.core import Database

        import superset.cli.main  # noqa: F401 - the `superset` command loads (its test_db module needs rich)

        upgrade()  # what `superset db upgrade` runs
        appbuilder.add_permissions(update_perms=True)  # and `superset init`
        security_manager.sync_role_definitions()
        security_manager.add_user(ADMIN["username"], "a", "b", "admin@example.org",
                                  security_manager.find_role("Admin"), password=ADMIN["password"])
        db.session.commit()

    client = app.test_client()
    login = client.post("/api/v1/security/login", json={**ADMIN, "provider": "db"})
    assert login.status_code == 200, login.text
    headers = {"Authorization": f"Bearer {login.json['access_token']}"}
    # The form that adds a database lists the engines Superset has drivers for: DuckDB among them.
    available = client.get("/api/v1/database/available/", headers=headers)
    assert available.status_code == 200, available.text
    assert "duckdb" in {engine["engine"] for engine in available.json["databases"]}, available.json
    added = client.post("/api/v1/database/", headers=headers, json={
        "database_name": "energy_index", "sqlalchemy_uri": f"duckdb:///{database_path}",
        "extra": json.dumps({"engine_params": engine_parameters}), "expose_in_sqllab": True})
    assert added.status_code == 201, added.text
    database_id = added.json["id"]

    def sql_lab() -> float:
        executed = client.post("/api/v1/sqllab/execute/", headers=headers,
                               json={"database_id": database_id, "sql": QUERY, "runAsync": False})
        assert executed.status_code == 200, executed.text
        return executed.json["data"][0]["itl_deadline_ms"]

    def chart() -> float:
        with app.app_context():
            return float(db.session.get(Database, database_id).get_df(QUERY)["itl_deadline_ms"][0])

    mutator = app.config["DB_CONNECTION_MUTATOR"]

    def without_mutator(read):  # noqa: ANN001, ANN202
        app.config["DB_CONNECTION_MUTATOR"] = None
        try:
            return read()
        finally:
            app.config["DB_CONNECTION_MUTATOR"] = mutator

    held = []
    for config in ("as written", "without mutator"):
        def hold() -> None:
            with app.app_context(), db.session.get(Database, database_id).get_sqla_engine() as engine:
                connection = engine.connect()
                connection.execute(sqlalchemy.text(QUERY)).fetchall()
                held.append(connection)

        hold() if config == "as written" else without_mutator(hold)

    for _line in sys.stdin:
        answer = {"sql_lab": sql_lab(), "chart": chart(), "sql_lab_without_mutator": without_mutator(sql_lab),
                  "chart_without_mutator": without_mutator(chart), "duckdb": duckdb.__version__,
                  "superset": version("apache-superset")}
        print(json.dumps(answer), file=ANSWERS, flush=True)
    for connection in held:
        connection.close()


if __name__ == "__main__":
    main()
