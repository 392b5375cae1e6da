# The two commands of the README. Each works from a fresh clone.
.PHONY: qualify test lint bench model docker-image clean

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
	scripts/docker_setup.sh
	$(PYTEST) tests

lint:
	$(VENV)/bin/ruff check pytest_vllmqual suites tests fixtures benchmarks
	$(VENV)/bin/mypy

## Every figure of docs/PERFORMANCE.md against the real tiny-cpu server (about 6 minutes);
## exits 1 when a figure is past its regression guard. Results: reports/bench/latest.json.
bench:
	scripts/setup.sh --bench
	$(VENV)/bin/python fixtures/model/build_tiny_model.py
	$(VENV)/bin/python benchmarks/run_all.py

model:
	$(VENV)/bin/python fixtures/model/build_tiny_model.py

## The tiny-docker image: Docker and the local registry (installed and started as root when
## missing), then the vllm-cpu image built here and pushed by digest (cached: seconds).
docker-image:
	scripts/setup.sh
	scripts/docker_setup.sh

clean:
	rm -rf reports/private reports/*.json reports/*.html
