# The two commands of the README. Each works from a fresh clone.
.PHONY: qualify test lint bench model clean

VENV := .venv
PYTEST := $(VENV)/bin/pytest

## Command 1: set up, then qualify the embedded default recipe (tiny-cpu) and write a report.
qualify:
	scripts/setup.sh
	$(PYTEST) --recipe=tiny-cpu

## Command 2: set up, lint, type-check, then run the project's own tests (CI runs exactly this).
test:
	scripts/setup.sh --browser
	$(VENV)/bin/ruff check pytest_vllmqual suites tests fixtures benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/python fixtures/model/build_tiny_model.py
	$(PYTEST) tests

lint:
	$(VENV)/bin/ruff check pytest_vllmqual suites tests fixtures benchmarks
	$(VENV)/bin/mypy

bench:
	scripts/setup.sh
	$(VENV)/bin/python benchmarks/bench_prompts.py

model:
	$(VENV)/bin/python fixtures/model/build_tiny_model.py

clean:
	rm -rf reports/private reports/*.json reports/*.html
