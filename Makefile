# tidelog: every target sets itself up on a fresh machine (creates .venv, installs from PyPI).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DATA   ?= ./data

.PHONY: setup run test bench soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: setup
	$(VENV)/bin/tidelog --data-dir $(DATA) serve

test: setup
	$(PY) -m pytest -q -n 2 --dist loadgroup -p no:cacheprovider

bench: setup
	$(PY) -m bench.run

# Long reliability runs (crash, fault and fuzz at full length); make test runs their short versions.
soak: setup
	$(PY) -m pytest -q -n 2 --dist loadgroup -p no:cacheprovider -m soak

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
