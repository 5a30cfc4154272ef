# The two commands of the README's quick start, plus the steps they are made of.
#   make demo   set up, start the testbed (built and cached on first use) and run the agent against it
#   make test   set up, build the container image, then lint, type-check and run every test (unit,
#               integration, e2e with a 3-minute soak, the image's own) on a fresh testbed, every benchmark at a
#               small size, and the unit tier again under shifted clocks
#   make image  build the container image (Debian's buildah, no daemon)
#   make quick  the pure core's and the engine's unit tests, in under a minute (the edit-test loop)
#   make lock   refresh constraints.txt (the pinned versions CI and the image install)
#   make soak   a 10-minute soak with invariants on a fresh testbed (see below)
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TESTBED_DIR ?= .testbed

.PHONY: setup system-deps image-deps image lock testbed-build lint test unit quick unit-shifted bench-smoke soak demo testbed-up testbed-down clean chart-files fault-tables

# pyproject.toml keeps version ranges (for people who install the package into their own environment);
# constraints.txt pins every package in those ranges, so CI, a developer's virtualenv and the image install the
# same versions. `make lock` refreshes it to the newest versions the ranges allow.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python >= 3.11 is required")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 --upgrade --quiet \
	  --custom-compile-command 'make lock' --output-file constraints.txt
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP) system-deps

# promtool (the alert-rule unit tests) and the prometheus server binary (the e2e test that runs the shipped
# alerts and dashboard against a real Prometheus) both come from Debian's prometheus package, and faketime (the
# unit tier under a shifted clock) from Debian's faketime package; openssl, Go, Java and Maven are checked by
# the testbed build, which names what is missing.
APT_INSTALL = DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends
system-deps:
	@{ command -v promtool >/dev/null && prometheus --version 2>&1 | grep -q '^prometheus, version'; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing promtool and the prometheus server (Debian package prometheus)"; \
	    (apt-get update -qq && $(APT_INSTALL) prometheus >/dev/null) \
	      || { echo "could not install promtool and prometheus: apt-get install prometheus failed"; exit 1; }; \
	  else echo "promtool or the prometheus server is missing: install Debian's 'prometheus' package (or put both on PATH)"; exit 1; fi; }
	@prometheus --version 2>&1 | grep -q '^prometheus, version' || { echo "'prometheus' on PATH is not the Prometheus server"; exit 1; }
	@command -v faketime >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing faketime (Debian package faketime)"; \
	    ($(APT_INSTALL) faketime >/dev/null || { apt-get update -qq && $(APT_INSTALL) faketime >/dev/null; }) \
	      || { echo "could not install faketime: apt-get install faketime failed"; exit 1; }; \
	  else echo "faketime is missing: install Debian's 'faketime' package (or put faketime on PATH)"; exit 1; fi; }
	@command -v kubectl >/dev/null || { echo "kubectl is missing (needed for 'kubectl kustomize' in the deploy tests)"; exit 1; }

# The container image: `make image` builds the Dockerfile with Debian's buildah (no daemon; vfs storage and
# chroot isolation, as root) on the official python image, or, when no registry is reachable, on a Debian
# bookworm base that mmdebstrap makes from Debian packages once and caches (testbed/image.py). The image e2e
# test (tests/e2e/test_image.py) runs what this built.
IMAGE_TAG ?= localhost/fault-agent:0.1.0
image-deps:
	@{ command -v buildah >/dev/null && command -v mmdebstrap >/dev/null; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing buildah and mmdebstrap (Debian packages buildah, mmdebstrap)"; \
	    ($(APT_INSTALL) buildah mmdebstrap >/dev/null || { apt-get update -qq && $(APT_INSTALL) buildah mmdebstrap >/dev/null; }) \
	      || { echo "could not install buildah and mmdebstrap: apt-get install buildah mmdebstrap failed"; exit 1; }; \
	  else echo "buildah or mmdebstrap is missing: install Debian's 'buildah' and 'mmdebstrap' packages (make image runs as root)"; exit 1; fi; }

image: $(STAMP) image-deps
	$(BIN)/python -m testbed.image build --tag $(IMAGE_TAG)

testbed-build: $(STAMP)
	$(BIN)/python -m testbed build

lint: $(STAMP)
	$(BIN)/ruff check agent testbed tests bench
	$(BIN)/ruff format --check agent testbed tests bench
	$(BIN)/mypy --strict agent testbed
	$(BIN)/lint-imports
	$(BIN)/python -m pytest tests/tools/test_layering.py -q -p no:cacheprovider  # the clock and I/O rules an import graph cannot express

# The unit tier (tests/unit, one directory per package of agent/) is pure: no testbed, no tool, no child process.
# The tools tier (tests/tools) runs promtool, kubectl kustomize, helm, make, lint-imports and the agent as a child
# process, still without a testbed. Both run on every core (pytest-xdist). Integration and e2e share one testbed
# per pytest run, so they run in one process.
UNIT_WORKERS ?= auto
UNIT_TIERS := tests/unit tests/tools
unit: $(STAMP)
	$(BIN)/python -m pytest $(UNIT_TIERS) -q -n $(UNIT_WORKERS)

# The loop under a minute: the pure core's and the engine's tables (tests/unit/core, tests/unit/engine) on every
# core. README, "Testing", has the figures.
QUICK_TESTS := tests/unit/core tests/unit/engine
quick: $(STAMP)
	$(BIN)/python -m pytest $(QUICK_TESTS) -q -p no:cacheprovider -n $(UNIT_WORKERS)

# The unit tier again with the clock 40 days ahead and 1 day behind (libfaketime): no test may depend on the
# calendar date. tests/unit only: it holds every test of code that reads or compares dates (the agent's code runs
# in-process there); tests/tools runs promtool, kubectl kustomize, helm, make, git and lint-imports, which a shifted
# Python clock does not reach, and its one check of the agent's own dated output, the replay goldens, runs itself
# under `faketime -f +40d` (tests/tools/test_replay_golden.py). The two shifts run side by side,
# in one process each (`-n 0`; on 2 cores as fast as one after the other on two workers, without the workers'
# start-up and the tail where one worker waits for the other).
SHIFTED_TESTS := tests/unit
SHIFTED_WORKERS ?= 0
unit-shifted: $(STAMP) system-deps
	faketime -f '+40d' $(BIN)/python -m pytest $(SHIFTED_TESTS) -q -p no:cacheprovider -n $(SHIFTED_WORKERS) \
	  > .unit-shifted-plus40d.log 2>&1 & plus=$$!; \
	faketime -f '-1d' $(BIN)/python -m pytest $(SHIFTED_TESTS) -q -p no:cacheprovider -n $(SHIFTED_WORKERS) \
	  > .unit-shifted-minus1d.log 2>&1 & minus=$$!; \
	wait $$plus; a=$$?; wait $$minus; b=$$?; \
	echo "--- +40d (exit $$a; whole log .unit-shifted-plus40d.log)"; tail -n 25 .unit-shifted-plus40d.log; \
	echo "--- -1d (exit $$b; whole log .unit-shifted-minus1d.log)"; tail -n 25 .unit-shifted-minus1d.log; \
	[ $$a = 0 ] && [ $$b = 0 ]

# Every benchmark at a small size on a fresh testbed of its own, writing nothing: a benchmark that stops
# working fails the build (bench/RESULTS.md comes from a full `python bench/run_all.py`).
bench-smoke: $(STAMP) testbed-build
	$(BIN)/python bench/run_all.py --smoke

# The soak (testbed/soak/): a seeded random schedule of faults and disruptions on a fresh testbed with two
# agents, every invariant checked; a failure prints its seed and the shortest schedule that still fails.
# 10 minutes by default; e.g. `make soak SOAK_ARGS="--seed 42 --duration 180"` (or FAULT_AGENT_SOAK_SEED,
# FAULT_AGENT_SOAK_DURATION). `make test` runs 3 minutes of it on its own testbed (tests/e2e/test_soak.py).
SOAK_ARGS ?=
soak: $(STAMP) testbed-build
	$(BIN)/python -m testbed.soak $(SOAK_ARGS)

# Each step through .ci/step, which prints its wall time; the table of every step's time closes the log (also
# when a step fails and ends the run).
test: export CI_STEPS := $(CURDIR)/.ci-steps.tsv
test:
	@rm -f "$$CI_STEPS"; trap '.ci/step --summary' EXIT; set -e; \
	.ci/step setup $(MAKE) --no-print-directory setup; \
	.ci/step testbed-build $(MAKE) --no-print-directory testbed-build; \
	.ci/step lint $(MAKE) --no-print-directory lint; \
	.ci/step image $(MAKE) --no-print-directory image; \
	.ci/step unit+tools $(BIN)/python -m pytest $(UNIT_TIERS) -q -p no:cacheprovider -n $(UNIT_WORKERS); \
	.ci/step integration+e2e $(BIN)/python -m pytest tests/integration tests/e2e -q -p no:cacheprovider \
	  --durations=25; \
	.ci/step bench-smoke $(MAKE) --no-print-directory bench-smoke; \
	.ci/step unit-shifted $(MAKE) --no-print-directory unit-shifted

# The Helm chart packages copies of the alert rules and the dashboard (deploy/ holds the originals, which promtool
# and the e2e alert test check), and its values.schema.json carries the agent's settings schema under `settings`
# (testbed/tools/gen_chart_schema.py); tests/tools/test_deploy_chart.py fails when either is stale.
chart-files: $(STAMP)
	cp deploy/prometheusrule.yaml deploy/fault-agent-dashboard.json deploy/chart/files/
	$(BIN)/python -m testbed.tools.gen_chart_schema

# Regenerate the default fault tables (agent/core/detect/data/*.yaml, config/fault_levels.yaml) from MindCluster's release
# files in a git mirror of Ascend/mind-cluster (MINDCLUSTER_GIT_DIR, MINDCLUSTER_COMMIT; defaults in the script).
MINDCLUSTER_COMMIT ?= 22bb3d987bc0208c3eb7395e222b661276133c58
fault-tables: $(STAMP)
	$(BIN)/python -m testbed.tools.gen_fault_tables --commit $(MINDCLUSTER_COMMIT)

# The testbed needs only the virtualenv (promtool, faketime and kubectl are for the tests: `make setup`).
testbed-up: $(STAMP)
	$(BIN)/python -m testbed up --dir $(TESTBED_DIR)

testbed-down:
	$(BIN)/python -m testbed down --dir $(TESTBED_DIR)

# The demo needs only the virtualenv and the testbed (no promtool/kubectl, which only the tests use).
demo: $(STAMP) testbed-build
	$(BIN)/python -m testbed.demo --dir $(TESTBED_DIR)

clean:
	-$(BIN)/python -m testbed down --dir $(TESTBED_DIR)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
