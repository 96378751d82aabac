# tau: every developer task is a target here; .ci/run calls `make check`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SCHEDULER ?= local
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: venv man-links demo check quick lint test bats typecheck man completions bench bench-slurm bench-collect-tasks mutation system-deps slurm-up slurm-down azurite-up azurite-down clean

## venv: the virtual environment .venv with tau installed editable (every other target depends on it)
venv: $(STAMP)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	$(MAKE) --no-print-directory man-links
	touch $(STAMP)

## man-links: the man pages linked into .venv/share/man, where man finds them while .venv/bin is on PATH (an
## editable install copies no data files; a wheel's install puts them there itself)
man-links:
	@for page in man/*.[157]; do \
	  mkdir -p $(VENV)/share/man/man$${page##*.} && ln -sfn $(CURDIR)/$$page $(VENV)/share/man/man$${page##*.}/; \
	done

## demo: a complete example run (8 shards, one fails once, retry, winners, collection); SCHEDULER=local|slurm
demo: venv
	@if [ "$(SCHEDULER)" = slurm ]; then contrib/slurm/cluster-up.sh; fi
	SCHEDULER=$(SCHEDULER) contrib/demo/run-demo.sh

## system-deps: the system packages the tests need (bats, mandoc, jq, zsh, fish), installed when missing (as root)
system-deps:
	@contrib/ci/system-deps.sh

## slurm-up / slurm-down: the single-node test cluster (installs Slurm, munge, MariaDB when missing; as root)
slurm-up:
	contrib/slurm/cluster-up.sh

slurm-down:
	contrib/slurm/cluster-down.sh

## azurite-up / azurite-down: Azurite's blob service on 127.0.0.1:$(AZURITE_PORT) (installed with npm into .azurite/
## when missing; stopped by its PID file). make check runs its own on port 10100 for the tests.
AZURITE_PORT ?= 10000
azurite-up:
	AZURITE_PORT=$(AZURITE_PORT) contrib/azure/azurite-up.sh

azurite-down:
	AZURITE_PORT=$(AZURITE_PORT) contrib/azure/azurite-down.sh

## check: every test (pytest and bats); ends with "N passed, N failed"
check: venv system-deps
	tests/run-all.sh

## lint: ruff over the code, the tests and the tools (as tests/test_lint.py does), and mandoc's lint of the man pages
LINT_PATHS := taulib tests bench man contrib
lint: venv
	$(PY) -m ruff check $(LINT_PATHS)
	$(PY) man/build.py --lint-only

## quick: the inner loop, about 90 s on 2 cores: ruff, mypy (make typecheck), then every test that needs no
## service, no root and no wheel build and is not slow (the markers of pyproject.toml); make check runs them all
QUICK_TESTS ?= not slurm and not azurite and not root and not install and not slow and not containers
quick: venv
	$(PY) -m ruff check $(LINT_PATHS)
	@$(MAKE) --no-print-directory typecheck
	$(PY) -m pytest -q -n "$${TAU_TEST_WORKERS:-2}" --dist loadgroup -m "$(QUICK_TESTS)" tests

test: venv
	$(PY) -m pytest -q tests

bats: venv system-deps
	bats tests/bats

## typecheck: mypy over taulib with pyproject.toml's [tool.mypy] (--strict over all of taulib); make check runs it as a test
typecheck: venv
	$(PY) -m mypy

## man: render every man page and lint it
man: venv
	$(PY) man/build.py
	$(MAKE) --no-print-directory man-links

## completions: write the shell completion files in share/ again from the code (tau completion bash|zsh|fish)
completions: venv
	$(PY) contrib/completion/build.py

## bench: the benchmarks, with ratios against their baselines measured in the same run
bench: venv
	$(PY) bench/run.py

## bench-slurm: the Slurm scale benchmark (bench/slurm_scale.py), apart from make bench because it needs the test
## cluster (make slurm-up): a BENCH_SHARDS-shard run (default 5000) drained by the cron line, its observe | reconcile
## cycles and their squeue and sacct calls against one sacct per job; 30-60 minutes on 2 cores
bench-slurm: venv
	$(PY) bench/slurm_scale.py

## bench-collect-tasks: tau-collect --tasks 2 against --tasks 1 on the test cluster (bench/collect_tasks.py), apart
## from make bench because it needs the cluster (make slurm-up); about 6 minutes at the default 2 GB on 2 cores
bench-collect-tasks: venv
	$(PY) bench/collect_tasks.py

## mutation: mutation testing of taulib/rules, the journal and the winner's publication (bench/mutation.py, with
## mutmut from the mutation extra): prints each module's score and every mutant no test kills; fails below 97% for
## the rules. About 6 minutes on 2 cores (3,238 mutants); not part of make check
mutation: venv
	$(PY) -m pip install --quiet -e '.[mutation]'
	$(PY) bench/mutation.py

clean:
	rm -rf demo build .pytest_cache .mypy_cache mutants
