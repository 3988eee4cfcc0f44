# Every target bootstraps what it needs, so each works first on a fresh machine.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install test test-fast test-slow lint typecheck demo bench bench-quick corpus clean

FORK   := $(shell find vendor/pyfuse3/pyproject.toml vendor/pyfuse3/Include vendor/pyfuse3/src/pyfuse3 vendor/pyfuse3/util -type f ! -name __init__.c ! -name '*.so' ! -name '*.pyc')

$(STAMP): pyproject.toml scripts/bootstrap.sh $(FORK)
	sh scripts/bootstrap.sh

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not mount and not slow" $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check cli swfs parsers mountd tests bench
	$(VENV)/bin/ruff format --check cli swfs parsers mountd tests bench

typecheck: $(STAMP)
	$(VENV)/bin/mypy

demo: $(STAMP)
	$(PY) -m swfs.demo

bench: $(STAMP)
	$(PY) -m bench

bench-quick: $(STAMP)
	$(PY) -m bench --quick

# What swfs makes of a folder of real documents, per format (DIR is copied, never written).
corpus: $(STAMP)
	@test -n "$(CORPUS)" || { echo "usage: make corpus CORPUS=DIR" >&2; exit 2; }
	$(PY) scripts/corpus_report.py "$(CORPUS)"

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
