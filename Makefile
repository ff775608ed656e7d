# zmqueue — the two commands of the README are `make demo` and `make test`.
# Each installs what it needs first (a virtualenv in .venv with the package
# and its test tools, and Consul 1.8.7 from Debian 11's archive into
# ~/.cache/zmqueue), so a fresh clone needs nothing else. The Python packages'
# versions are pinned by ops/constraints.txt (what main was last tested with).

VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)

.PHONY: install demo test lint unit soak bench clean

install: $(STAMP)

$(STAMP): pyproject.toml ops/constraints.txt ops/consul/install.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -c ops/constraints.txt -e '.[dev,analytics]'
	bash ops/install-test-deps.sh
	touch $(STAMP)

demo: install
	$(VENV)/bin/zmqueue demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: install lint
	$(PY) -m pytest -n auto -q

unit: install
	$(PY) -m pytest -n auto -q tests/unit

# the long chaos soak (bounded; about 30-60 minutes): SEEDS=20 by default
SEEDS ?= 20
soak: install
	$(PY) -m tests.chaos.soak --seeds $(SEEDS)

clean:
	rm -rf $(VENV) .zmqueue .pytest_cache .mypy_cache .ruff_cache
