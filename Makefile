# energy-index: thin wrappers over the energy-index CLI. `make` refreshes, `make test` tests.
#
# Variables (each passed to the CLI):
#   SOURCE           local public/data folder or http(s) URL (default: upstream pinned to commit 7885788)
#   OUT              output folder (default: build)
#   AS_OF            the index's updated/data_version date (default: the snapshot's retrieval date)
#   RETRIEVED        the index's source.retrieved date (default: the date the fetch recorded)
#   ITL_DEADLINE_MS  median ITL ceiling for the best configurations (default: 500)

PYTHON ?= python3
VENV ?= .venv
OUT ?= build
SOURCE ?= https://raw.githubusercontent.com/ml-energy/leaderboard/7885788e837b80ad172e02e6e8c47e8d0b85520e/public/data
AS_OF ?=
RETRIEVED ?=
ITL_DEADLINE_MS ?= 500

CLI := $(VENV)/bin/energy-index
INSTALLED := $(VENV)/.installed
REFRESHED := $(OUT)/.refreshed
CODE := pyproject.toml $(wildcard pipeline/*.py pipeline/*.toml schemas/*.py sql/*.sql)
# A pinned URL names immutable content. A local folder has changed when anything in it is newer than
# the last refresh (a file edited, added or removed touches the file or its folder); find stops at the
# first, so a no-op costs one stat per file and no hashing. The refresh itself then compares contents.
SOURCE_CHANGED := $(if $(findstring ://,$(SOURCE)),,$(shell test -e '$(REFRESHED)' && \
	find '$(SOURCE)' -newer '$(REFRESHED)' -print -quit 2>/dev/null))
REFRESH_ARGS := --source '$(SOURCE)' --out '$(OUT)' --itl-deadline-ms '$(ITL_DEADLINE_MS)' \
	$(if $(AS_OF),--as-of '$(AS_OF)') $(if $(RETRIEVED),--retrieved '$(RETRIEVED)')

# The parameters file changes (and so triggers a refresh) only when the parameters do. It is written
# while the Makefile is read, because a rule run on every call would count as a change to Make.
PARAMETERS_FILE := $(OUT)/.parameters
ifeq ($(filter-out all,$(or $(MAKECMDGOALS),all)),)
_ := $(shell mkdir -p '$(OUT)' && echo '$(REFRESH_ARGS)' | cmp -s - '$(PARAMETERS_FILE)' || echo '$(REFRESH_ARGS)' > '$(PARAMETERS_FILE)')
endif

HISTORY ?= ../shared/upstream/ml-energy-leaderboard

.PHONY: all refresh history test test-all bench synth clean help

all: $(REFRESHED)

$(INSTALLED): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

# The stamp takes the time the refresh started: a file changed while it ran is newer, and is seen next time.
$(REFRESHED): $(INSTALLED) $(CODE) $(PARAMETERS_FILE) $(if $(SOURCE_CHANGED),source-changed)
	touch $@.started
	$(CLI) refresh $(REFRESH_ARGS)
	mv $@.started $@

.PHONY: source-changed
source-changed:

refresh: $(INSTALLED) ## refresh even when Make sees nothing changed
	$(CLI) refresh $(REFRESH_ARGS)

history: $(INSTALLED) ## ingest every snapshot under HISTORY into one database (newest in the index)
	$(CLI) history --source '$(HISTORY)' --out '$(OUT)' --itl-deadline-ms '$(ITL_DEADLINE_MS)' \
		$(if $(AS_OF),--as-of '$(AS_OF)') $(if $(RETRIEVED),--retrieved '$(RETRIEVED)')

test: $(INSTALLED) ## the test suite on both cores (slow scale tests excluded)
	$(VENV)/bin/python -m pytest -q -n 2

test-all: $(INSTALLED) ## the test suite with the slow scale tests
	$(VENV)/bin/python -m pytest -q -n 2 -m ''

BENCH_SCALES ?= 1,100
BENCH_RUNS ?= 3
bench: $(INSTALLED) ## the pipeline against DuckDB alone and pandas, per scale (BENCH_SCALES=1,100,1000)
	$(VENV)/bin/python -m pipeline.bench --scales '$(BENCH_SCALES)' --runs '$(BENCH_RUNS)' --out '$(OUT)/bench'

SCALE ?= 10
SYNTH_SOURCE ?= ../shared/upstream/ml-energy-leaderboard/2026-02-16-7885788
SYNTH_DIR ?= $(OUT)/synth-$(SCALE)
synth: $(INSTALLED) ## write a synthetic snapshot SCALE times SYNTH_SOURCE into SYNTH_DIR
	$(CLI) synth --scale '$(SCALE)' --source '$(SYNTH_SOURCE)' --target '$(SYNTH_DIR)'

clean: ## remove the outputs (not the virtual environment)
	rm -rf '$(OUT)'

help:
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/'
