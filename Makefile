# tidelog: every target sets itself up on a fresh machine (creates .venv, installs from PyPI).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DATA   ?= ./data

.PHONY: setup weed prometheus run test bench soak fuzz shape clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# SeaweedFS's weed, the real S3 store of the remote-tier tests (object_store_oracle): built from the Go module proxy
# once per machine into ~/.cache/tidelog/seaweedfs-<version>/ ($TIDELOG_CACHE overrides), a no-op when
# cached. Cold: 10.5 min wall, 12 min CPU on 2 shared cores (load 3-5), 1.3 GiB of Go modules, 1.8 GiB of Go build cache. make run needs none of it.
weed: setup
	$(PY) -m object_store_oracle

# Prometheus (prometheus_oracle), the real scraper of the observability tests: on PATH, or Debian's `prometheus`
# package installed once per machine (root or passwordless sudo; --no-install-recommends; no daemon started or
# left enabled), a no-op when present. Cold: ~11 s. Where it cannot be installed, says so and those tests skip.
prometheus: setup
	$(PY) -m prometheus_oracle

run: setup
	$(VENV)/bin/tidelog --data-dir $(DATA) serve

# --timeout: no test of make test takes minutes; one that hangs fails with its stack instead of stalling the run
test: setup weed prometheus
	$(PY) -m pytest -q -n 2 --dist loadgroup -p no:cacheprovider --timeout 900

bench: setup
	$(PY) -m bench.run

# Long reliability runs (crash, fault and fuzz at full length); make test runs their short versions.
soak: setup weed prometheus
	$(PY) -m pytest -q -n 2 --dist loadgroup -p no:cacheprovider -m soak

# Coverage-guided fuzzing (atheris) of every decoder and loader, FUZZ_SECONDS each; prints executions per
# target, exits non-zero with the crashing input saved as crash-* in fuzz-artifacts/ if one is found.
# make test leaves atheris out: ~40 s of CPU for even 1,000 executions per target (instrumenting tidelog's
# imports in 8 processes), while tests/fuzz already runs the same targets in-process under Hypothesis.
FUZZ_SECONDS ?= 60
fuzz: setup
	$(PY) -m pip install -q -e '.[test,fuzz]'
	mkdir -p fuzz-artifacts
	$(PY) -m fuzz.run all --seconds $(FUZZ_SECONDS) --artifacts fuzz-artifacts/

# The code's shape against the architecture targets: module sizes, function lengths, upward imports,
# package cycles (exit 1 while a target is not met; not part of make test).
shape: setup
	$(PY) tests/shape_report.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis fuzz-artifacts
