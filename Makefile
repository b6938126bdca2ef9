# dslrun — set-up and everyday commands. Everything installs into .venv, nothing by hand.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DATA   := data/synthetic
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: install test test-fast demo bench-validate schema docs lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found; install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e ".[train,dev]"
	touch $(STAMP)

# The whole test suite, plus the shipped pipelines must validate.
test: install
	$(BIN)/dslrun validate pipelines/
	$(BIN)/python -m pytest -q

# Everything but the end-to-end training runs.
test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not multiprocess"

$(DATA)/train.csv: | install
	$(BIN)/dslrun data synthetic --out $(DATA)

# Install, generate the small learnable data set if missing, train the quickstart pipeline.
demo: install $(DATA)/train.csv
	$(BIN)/dslrun validate pipelines/
	$(BIN)/dslrun pipelines/quickstart.yaml

bench-validate: install
	$(BIN)/python bench/validate_speed.py

# Regenerate the committed files that come from the component registry.
schema: install
	$(BIN)/dslrun schema --output schemas/pipeline.schema.json
	$(BIN)/dslrun list --markdown > docs/components.md

lint: install
	$(BIN)/python -m pip install --quiet ruff
	$(BIN)/python -m ruff check dsl backends tests

clean:
	rm -rf $(VENV) runs data .pytest_cache
