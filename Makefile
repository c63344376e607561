# hooklane — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go
SUDO  := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: help run test lint bench bench-deferral fuzz redis-server chromium

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

run: redis-server ## the demo: local redis-server, worker, web UI/API and a demo receiver, in one process
	$(GO) run . dev

test: redis-server chromium ## run the whole test suite under the race detector (each package starts its own redis-server and checks for leaked goroutines)
	$(GO) vet ./...
	@# -p 1: one package at a time, so that the browser test's Chromium and the
	@# 12,000-delivery ledger test do not skew the worker's timing assertions.
	$(GO) test -race -p 1 -count=1 -timeout 40m ./...

lint: ## gofmt and go vet
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

bench: redis-server ## load harness (deploy/BENCHMARKS.md), ~5 min; scale with BENCH_FLAGS='-scale 2 -hold 60s'
	$(GO) build -o .hooklane/bin/hooklane .
	.hooklane/bin/hooklane bench -out .hooklane/bench $(BENCH_FLAGS)

bench-deferral: redis-server ## deferral benchmark: 5,000 events to one subscriber at 100/s
	$(GO) test -run '^$$' -bench ThrottledBacklog -benchtime 1x ./worker/

fuzz: redis-server ## run each fuzz target for 15s (make test runs their seed corpora)
	$(GO) test -run '^$$' -fuzz FuzzParseRetryAfter -fuzztime 15s ./limits/
	$(GO) test -run '^$$' -fuzz FuzzDecodeDelivery -fuzztime 15s ./tasks/
	$(GO) test -run '^$$' -fuzz FuzzAPIRequests -fuzztime 15s ./web/
	$(GO) test -run '^$$' -fuzz FuzzRedact -fuzztime 15s ./web/

redis-server: ## install redis-server (and redis-cli, for the Cluster tests) with apt-get when missing
	@{ command -v redis-server && command -v redis-cli; } >/dev/null || { \
		echo "redis-server or redis-cli not found: installing them with apt-get"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools; }

chromium: ## install Debian's chromium (for the browser test) with apt-get when it is missing
	@test -x /usr/bin/chromium || { \
		echo "chromium not found: installing it with apt-get"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
