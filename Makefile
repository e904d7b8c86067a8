# energy-index: thin wrappers over the energy-index CLI. `make` refreshes, `make test` tests.
# `make help` lists the targets and the variables with their defaults.

PYTHON ?= python3
VENV ?= .venv
# The CLI's default output folder, read where it is declared (pipeline/settings.py). Empty SOURCE,
# COMMIT, ITL_DEADLINE_MS ... take the CLI's defaults, declared there too (`make help` lists them).
ifeq ($(origin OUT),undefined)
OUT := $(shell sed -n 's/^OUT = Setting."--out", Path."\([^"]*\)".*/\1/p' pipeline/settings.py)
endif
SOURCE ?=
COMMIT ?=
AS_OF ?=
RETRIEVED ?=
COMMIT_TIME ?=
ITL_DEADLINE_MS ?=
# QUIET=1: the commands print nothing unless something needs attention (--quiet; docs/operating.md).
QUIET ?=
# ALERT=1: refresh and history fail when the build published has audit findings the previous one did not
# have (--alert-new-findings, the CLI's status 3). GNU make exits 0, 1 or 2 only: the 3 reaches a cron line
# through make as make's 2, its last line "make: *** [Makefile:N: refresh] Error 3" (docs/operating.md).
ALERT ?=
HISTORY ?= ../shared/upstream/ml-energy-leaderboard
BENCH_SCALES ?= 1,100
BENCH_RUNS ?= 3
BENCH_BEFORE ?=
N ?= 200
SCALE ?= 10
SYNTH_SOURCE ?= ../shared/upstream/ml-energy-leaderboard/2026-02-16-7885788

# Values reach the CLI through the environment, never through a recipe's text: the shell expands
# "$$EI_SOURCE" as one word whatever quotes, spaces, $ or ; it holds, and runs none of it. $(value)
# keeps a $ in a path from being read as a Make variable.
export EI_SOURCE := $(value SOURCE)
export EI_COMMIT := $(value COMMIT)
export EI_OUT := $(value OUT)
export EI_AS_OF := $(value AS_OF)
export EI_RETRIEVED := $(value RETRIEVED)
export EI_COMMIT_TIME := $(value COMMIT_TIME)
export EI_ITL_DEADLINE_MS := $(value ITL_DEADLINE_MS)
export EI_QUIET := $(value QUIET)
export EI_ALERT := $(value ALERT)
export EI_HISTORY := $(value HISTORY)
export EI_BENCH_SCALES := $(value BENCH_SCALES)
export EI_BENCH_RUNS := $(value BENCH_RUNS)
export EI_BENCH_BEFORE := $(value BENCH_BEFORE)
export EI_SCALE := $(value SCALE)
export EI_N := $(value N)
export EI_SYNTH_SOURCE := $(value SYNTH_SOURCE)
ifeq ($(origin SYNTH_DIR),undefined)
export EI_SYNTH_DIR := $(value OUT)/synth-$(value SCALE)
else
export EI_SYNTH_DIR := $(value SYNTH_DIR)
endif

# DuckDB releases the published database is opened with in the test suite, besides the project's own
# (the newest): the oldest supported and the newest 1.x, each in its own environment under .engines/
# (DuckDB 1.x's Python client needs pytz to return times with a time zone).
ENGINE_VERSIONS := 1.1.3 1.5.6
ENGINES := $(foreach version,$(ENGINE_VERSIONS),.engines/duckdb-$(version)/.installed)

# Spark, for the test that runs every view on it (make test-all): pyspark in an environment of its own,
# because pandera imports an installed pyspark (and warns on stderr) at every step; a Java runtime
# from Debian's packages when there is none.
SPARK_VERSION := 4.3.0
SPARK := .engines/pyspark-$(SPARK_VERSION)/.installed

# What Superset 6.1 connects with (its pins: sqlalchemy<2; its [duckdb] extra: duckdb>=1.4.2,<2 and
# duckdb-engine>=0.17), at the oldest DuckDB it allows, which keeps an open database for a new connection
# to the same path: the publish-visibility tests run the documented settings in it.
SUPERSET_STACK := .engines/superset-stack/.installed

# Superset itself, for the slow test that publishes twice and reads through Superset's SQL Lab and chart
# paths with the superset_config.py docs/querying.md gives (make test-all): about 300 packages and three
# minutes, kept out of make test. Its [duckdb] extra at the DuckDB of the stack above, where the config
# matters; and what its wheel's open ranges let in that breaks it (docs/querying.md): Flask-Caching 2.5
# (the app does not start), Flask-Limiter 4 (no rich, which the superset command imports), no cachetools
# (the form that adds a database fails). Flask-Caching 2.4.1 is the version Superset 6.1 locks.
SUPERSET_VERSION := 6.1.0
SUPERSET := .engines/superset-$(SUPERSET_VERSION)/.installed

# The DuckDB CLI (PyPI's duckdb-cli wraps the release binary): the publish-visibility test drives an
# interactive session of it.
DUCKDB_CLI_VERSION := 1.5.6
DUCKDB_CLI := .engines/duckdb-cli-$(DUCKDB_CLI_VERSION)/.installed

CLI := $(VENV)/bin/energy-index
INSTALLED := $(VENV)/.installed
# The project with the report extra, what a refresh and a report need; make test adds the dev extra (the
# test tools: pandera imports an installed hypothesis at every step, about 0.15 s of each refresh) and the interop
# extra (validators, SQL clients, a browser driver), whose tests are skipped where it is missing.
TEST_INSTALLED := $(VENV)/.installed-interop
QUIET_ARG = $${EI_QUIET:+--quiet}
ALERT_ARG = $${EI_ALERT:+--alert-new-findings}
BUILD_ARGS = --out "$$EI_OUT" $(QUIET_ARG) $${EI_ITL_DEADLINE_MS:+--itl-deadline-ms "$$EI_ITL_DEADLINE_MS"} \
	$${EI_AS_OF:+--as-of "$$EI_AS_OF"} $${EI_RETRIEVED:+--retrieved "$$EI_RETRIEVED"}

.PHONY: all refresh history verify java test test-all bench bench-light bench-history synth report release docs clean help

# Every run asks the CLI, which decides under its lock whether anything changed (content digests,
# parameters, code) and otherwise does nothing; Make keeps no state of its own in OUT.
all: refresh ## (default) fetch SOURCE (or the upstream's newest), ingest, build and export; nothing is written when nothing changed

refresh: $(INSTALLED) ## the same as all
	@"$(CLI)" refresh $${EI_SOURCE:+--source "$$EI_SOURCE"} $${EI_COMMIT:+--commit "$$EI_COMMIT"} $${EI_COMMIT_TIME:+--commit-time "$$EI_COMMIT_TIME"} $(BUILD_ARGS) $(ALERT_ARG)

$(INSTALLED): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[report]'
	touch $@

$(TEST_INSTALLED): $(INSTALLED)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[report,dev,interop]'
	touch $@

history: $(INSTALLED) ## ingest every snapshot under HISTORY into one database (the newest in the index)
	@"$(CLI)" history --source "$$EI_HISTORY" $(BUILD_ARGS) $(ALERT_ARG)

verify: $(INSTALLED) ## read every published file and the raw archive against their records; name each damaged file and its repair
	@"$(CLI)" verify --out "$$EI_OUT" $(QUIET_ARG)

.engines/duckdb-%/.installed:
	test -x .engines/duckdb-$*/bin/python || $(PYTHON) -m venv .engines/duckdb-$*
	.engines/duckdb-$*/bin/python -m pip install --quiet --disable-pip-version-check 'duckdb==$*' pytz
	touch $@

# --dist worksteal: a worker that runs out of tests takes over some of the other's, so that the run does
# not end on one core.
test: $(TEST_INSTALLED) ## the everyday suite on both cores, about 2½ minutes (the tests marked slow, engines, validators, sweep, make and report are left to test-all)
	@echo "make test: about 2½ minutes on 2 cores; each dot is a passed test; make test-all runs every test"
	$(VENV)/bin/python -m pytest -q -n 2 --dist worksteal

$(SUPERSET_STACK):
	test -x .engines/superset-stack/bin/python || $(PYTHON) -m venv .engines/superset-stack
	.engines/superset-stack/bin/python -m pip install --quiet --disable-pip-version-check 'sqlalchemy>=1.4,<2' 'duckdb==1.4.5' 'duckdb-engine>=0.17' pytz
	touch $@

$(SUPERSET):
	test -x .engines/superset-$(SUPERSET_VERSION)/bin/python || $(PYTHON) -m venv .engines/superset-$(SUPERSET_VERSION)
	.engines/superset-$(SUPERSET_VERSION)/bin/python -m pip install --quiet --disable-pip-version-check 'apache-superset[duckdb]==$(SUPERSET_VERSION)' 'duckdb==1.4.5' \
		'flask-caching==2.4.1' 'flask-limiter<4' cachetools
	touch $@

$(DUCKDB_CLI):
	test -x .engines/duckdb-cli-$(DUCKDB_CLI_VERSION)/bin/python || $(PYTHON) -m venv .engines/duckdb-cli-$(DUCKDB_CLI_VERSION)
	.engines/duckdb-cli-$(DUCKDB_CLI_VERSION)/bin/python -m pip install --quiet --disable-pip-version-check 'duckdb-cli==$(DUCKDB_CLI_VERSION)'
	touch $@

$(SPARK):
	test -x .engines/pyspark-$(SPARK_VERSION)/bin/python || $(PYTHON) -m venv .engines/pyspark-$(SPARK_VERSION)
	.engines/pyspark-$(SPARK_VERSION)/bin/python -m pip install --quiet --disable-pip-version-check 'pyspark==$(SPARK_VERSION)'
	touch $@

java: ## a Java runtime for Spark (Debian's openjdk-17-jre-headless) unless there is one
	@command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless; } \
		|| echo "make java: no Java runtime and none could be installed; the Spark test will be skipped" >&2

test-all: $(TEST_INSTALLED) $(ENGINES) $(SUPERSET_STACK) $(DUCKDB_CLI) $(SUPERSET) $(SPARK) java ## every test: make test's, the other engines, the validators, Spark, the sweeps over every snapshot, and every property's full examples (60 hostile inputs)
	@echo "make test-all: about 15 minutes on 2 cores (the first run installs Superset and Spark)"
	EXAMPLES=full $(VENV)/bin/python -m pytest -q -n 2 --dist worksteal -m ''

bench: $(INSTALLED) ## time the pipeline against its floors at BENCH_SCALES (default 1,100; 1000 takes about 30 minutes), each target met or not; the 1x refresh against BENCH_BEFORE (an energy-index of the code to compare with)
	$(VENV)/bin/python bench/run.py --scales "$$EI_BENCH_SCALES" --runs "$$EI_BENCH_RUNS" --out "$$EI_OUT/bench" $${EI_BENCH_BEFORE:+--before "$$EI_BENCH_BEFORE"}

bench-light: $(INSTALLED) ## time only the light commands (--version, sql, estimate, plan, a no-op make) against their floors
	$(VENV)/bin/python bench/run.py --light --runs "$$EI_BENCH_RUNS" --out "$$EI_OUT/bench"

bench-history: $(INSTALLED) ## time history build, weekly refresh and every view over N chained synthetic snapshots
	$(VENV)/bin/python bench/history.py --count "$$EI_N" --out "$$EI_OUT/bench"

synth: $(INSTALLED) ## write a synthetic snapshot SCALE times SYNTH_SOURCE into SYNTH_DIR
	"$(CLI)" synth --scale "$$EI_SCALE" --source "$$EI_SYNTH_SOURCE" --target "$$EI_SYNTH_DIR"

report: $(INSTALLED) ## write OUT/report/index.html (tables and charts, self-contained) and a PNG per chart
	@"$(CLI)" report --out "$$EI_OUT" $(QUIET_ARG)

release: $(INSTALLED) ## write OUT/release/<snapshot-id>/: data, Frictionless and Croissant metadata, citation, checksums
	@"$(CLI)" release --out "$$EI_OUT" $(QUIET_ARG)

docs: $(TEST_INSTALLED) ## regenerate the docs' generated sections with cog (from the code, and the build in OUT)
	$(VENV)/bin/cog -r -D out="$$EI_OUT" docs/cli.md docs/querying.md docs/index-files.md docs/data-dictionary.md docs/fits.md

clean: ## remove OUT (not the virtual environment)
	rm -rf -- "$$EI_OUT"

help: ## this list
	@echo 'Targets:'
	@grep -E '^[a-z-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | \
		awk -F':.*## ' '{ printf "  %-10s %s\n", $$1, $$2 }'
	@echo 'Variables (make VAR=value), passed to the CLI, with its defaults (pipeline/settings.py):'
	@$(VENV)/bin/python -m pipeline.settings 2>/dev/null || $(PYTHON) -m pipeline.settings
	@echo 'Variables of this Makefile, as set now:'
	@printf '  %-16s %s\n' OUT "$$EI_OUT" QUIET "$$EI_QUIET" ALERT "$$EI_ALERT" HISTORY "$$EI_HISTORY" BENCH_SCALES "$$EI_BENCH_SCALES" BENCH_RUNS "$$EI_BENCH_RUNS" BENCH_BEFORE "$${EI_BENCH_BEFORE:--}" \
		N "$$EI_N" SCALE "$$EI_SCALE" SYNTH_SOURCE "$$EI_SYNTH_SOURCE" SYNTH_DIR "$$EI_SYNTH_DIR" VENV "$(VENV)"
