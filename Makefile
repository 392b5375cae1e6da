# The two commands of the README. Each works from a fresh clone.
.PHONY: qualify test test-fast lint bench model docker-image clean

VENV := .venv
PYTEST := $(VENV)/bin/pytest
LINT_PATHS := pytest_vllmqual suites tests fixtures benchmarks
## Each step of `make test` is timed into $(VLLMQUAL_TIMES_DIR) for the CI time table (scripts/ci_times.py),
## which compares it with the committed reports/ci-times/baseline.json (outside the folder emptied here).
TIMED := scripts/timed.sh
## mypy's cache lives in the user cache, as the fixture model does, so a fresh clone on the same
## machine type-checks in seconds instead of minutes (mypy checks each cached file's hash).
MYPY := $(VENV)/bin/mypy --cache-dir "$${VLLMQUAL_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/vllmqual}/mypy"
export VLLMQUAL_TIMES_DIR ?= $(CURDIR)/reports/ci-times/latest

## Command 1: set up, then qualify the embedded default recipe (tiny-cpu) and write a report.
qualify:
	scripts/setup.sh
	$(PYTEST) --recipe=tiny-cpu

## Command 2: set up, lint, type-check, then run the project's own tests (CI runs exactly this).
## The tests run two at a time, in two rounds (scripts/run_tests.sh). Debian's chromium (a minute on
## a fresh machine) and the docker image are set up beside lint, the model and the first round, and
## the type check (half a minute without its cache) runs beside them at a lower priority
## (scripts/beside.sh): the HTML page tests wait for chromium, the docker tests for the image
## (tests/docker/conftest.py), and the fleet round starts only after all three ended (built beside
## the fleet round, the image slowed a fresh machine's fleet boots past their cold-start limit); a
## failed one fails the run.
test:
	@rm -rf "$(VLLMQUAL_TIMES_DIR)"
	$(TIMED) setup scripts/setup.sh
	scripts/beside.sh start browser $(TIMED) browser scripts/browser_setup.sh
	scripts/beside.sh start docker-image $(TIMED) docker-image scripts/docker_setup.sh
	$(TIMED) lint $(VENV)/bin/ruff check $(LINT_PATHS)
	scripts/beside.sh start typecheck $(TIMED) typecheck nice -n 10 $(MYPY)
	$(TIMED) model $(VENV)/bin/python fixtures/model/build_tiny_model.py
	$(TIMED) tests env PYTEST=$(PYTEST) scripts/run_tests.sh

## The quick loop after an edit (environment already set up): lint, type check, and the unit and
## pytester tests that need no server, two at a time. A few of them read the fixture model's
## vocabulary, so it is built first when missing (minutes once, then cached: seconds).
test-fast:
	$(VENV)/bin/python fixtures/model/build_tiny_model.py
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(MYPY)
	$(PYTEST) -q -n 2 -p no:vllmqual -m "not real_vllm" tests/unit tests/plugin

lint:
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(MYPY)

## Every figure of docs/PERFORMANCE.md against the real tiny-cpu server (about 27 minutes on the idle
## 2-core machine, 2026-12-06; the run's last line prints its own duration); exits 1 when a figure
## is past its regression guard. Results: reports/bench/latest.json.
bench:
	scripts/setup.sh --bench
	$(VENV)/bin/python fixtures/model/build_tiny_model.py
	$(VENV)/bin/python -m benchmarks.run_all

model:
	$(VENV)/bin/python fixtures/model/build_tiny_model.py

## The tiny-docker image: Docker and the local registry (installed and started as root when
## missing), then the vllm-cpu image built here and pushed by digest (cached: seconds).
docker-image:
	scripts/setup.sh
	scripts/docker_setup.sh

clean:
	rm -rf reports/private reports/*.json reports/*.html
