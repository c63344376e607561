# hooklane — run `make help` for the targets.
SHELL := /bin/bash
GO    ?= go
SUDO  := $(if $(filter 0,$(shell id -u)),,sudo)

# The OpenAPI linters make lint runs, pinned, installed with npm into
# .hooklane/node (once per pair of versions); make test and make run need
# no Node.
SPECTRAL_VERSION := 6.16.3
REDOCLY_VERSION  := 2.77.0
NODE_DIR         := .hooklane/node
LINTERS          := $(NODE_DIR)/installed-spectral-$(SPECTRAL_VERSION)-redocly-$(REDOCLY_VERSION)

# make test's binaries and logs; TEST_FIRST: the packages whose tests are
# light (no worker processes, no browser, no timing bounds), run side by
# side once everything is built; then the rest one package at a time, the
# worker package (TEST_LEAD, its timing tests) first. In two runs where it
# followed web's browser tests it took 312-319 s instead of 194-202 s.
TESTBIN    := .hooklane/test
TEST_FIRST := ./limits ./tasks ./producer ./deploy ./deploy/testkit
TEST_LEAD  := ./worker

.PHONY: help run run-fresh build test test-short lint bench bench-deferral chaos fuzz redis-server chromium

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-15s %s\n", $$1, $$2}'

run: redis-server ## the demo: its own redis-server (data and token kept in .hooklane/dev), worker, web UI/API and a demo receiver, in one process
	$(GO) run . dev

run-fresh: redis-server ## make run from zero: a new token, the demo's Redis data deleted
	$(GO) run . dev -fresh

build: ## build the hooklane binary into .hooklane/bin/hooklane (or `go install .` puts it in your Go bin folder)
	$(GO) build -o .hooklane/bin/hooklane .

test: redis-server chromium ## run the whole test suite under the race detector and go vet (each package starts its own redis-server and checks for leaked goroutines)
	@# Every package's test binary is built and vetted in one go test -c
	@# (each is linked once, not again to run it; the worker-process tests
	@# start the root package's as the hooklane command, HOOKLANE_TEST_BIN):
	@# one build keeps both cores busy to the end, where a first stage for
	@# the light packages left the links of the second in a line (189 s of
	@# building against 141 s, cold, 2026-12-03). Each binary runs in its
	@# package's folder as go test runs it. The light packages' tests run
	@# side by side; then the rest one package at a time, so that the
	@# browser tests' Chromium and the worker processes of one package do
	@# not skew another's timing assertions; inside a package, parallel
	@# tests wait on Redis and HTTP more than on the CPU (the worker
	@# package's, 6 at a time: 29 s and 0.8 of a core, 4 at a time: 39 s
	@# and 0.6).
	@rm -rf $(TESTBIN) && mkdir -p $(TESTBIN)
	$(GO) test -c -race -vet=all -o $(TESTBIN)/ ./...
	@set -o pipefail; \
	rest=$$($(GO) list ./... | grep -v -x -F "$$($(GO) list $(TEST_FIRST))") || exit 1; \
	lead=$$($(GO) list $(TEST_LEAD)) && rest="$$lead $$(grep -v -x -F "$$lead" <<<"$$rest")" || exit 1; \
	one() { \
		path=$${1%%:*}; dir=$${1#*:}; log=$(CURDIR)/$(TESTBIN)/$${path##*/}.log; start=$$EPOCHREALTIME; \
		if (cd "$$dir" && HOOKLANE_TEST_BIN=$(CURDIR)/$(TESTBIN)/hooklane.test $(CURDIR)/$(TESTBIN)/$${path##*/}.test \
			-test.v -test.paniconexit0 -test.parallel 6 -test.count 1 -test.timeout 40m >"$$log" 2>&1); then \
			result=ok; \
		else \
			grep -v -E '^(=== (RUN|PAUSE|CONT|NAME)|[[:space:]]*--- (PASS|SKIP))' "$$log"; result=FAIL; \
		fi; \
		awk -v r=$$result -v p="$$path" -v a=$$start -v b=$$EPOCHREALTIME 'BEGIN { printf "%-4s\t%s\t%.1fs\n", r, p, b - a }'; \
		[ $$result = ok ]; \
	}; \
	pkgs() { $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}:{{.Dir}}{{end}}' "$$@"; }; \
	fail=0; first=$$(pkgs $(TEST_FIRST)) && [ -n "$$first" ] || exit 1; \
	res() { p=$${1%%:*}; echo $(TESTBIN)/$${p##*/}.result; }; \
	for pkg in $$first; do one "$$pkg" >"$$(res "$$pkg")" 2>&1 & done; \
	for pkg in $$first; do wait -n || fail=1; done; \
	for pkg in $$first; do cat "$$(res "$$pkg")"; done; \
	later=$$(pkgs $$rest) && [ -n "$$later" ] || exit 1; \
	for pkg in $$later; do one "$$pkg" || fail=1; done; \
	echo "slowest tests (each package's -test.v log is in $(TESTBIN)/):"; \
	grep -h -E '^--- (PASS|FAIL)' $(TESTBIN)/*.log | sed -E 's/^--- [A-Z]+: ([^ ]+) \(([0-9.]+)s\)$$/\2s \1/' | sort -rn | head -10; \
	exit $$fail

test-short: redis-server ## the quick loop (under a minute here once built): the suite without the Cluster, Sentinel, worker-process and browser tests, no race detector
	@# -parallel 8: without the race detector the parallel tests wait on
	@# timers and Redis far more than on the two cores.
	$(GO) test -short -parallel 8 -count=1 ./...

lint: $(LINTERS) ## gofmt, go vet, and web/openapi.json through spectral and redocly (installed with npm into .hooklane/node)
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	@# From web/, where each linter finds its configuration (.spectral.yaml,
	@# redocly.yaml and .redocly.lint-ignore.yaml): a warning fails too.
	cd web && ../$(NODE_DIR)/node_modules/.bin/spectral lint --fail-severity=warn openapi.json
	cd web && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true ../$(NODE_DIR)/node_modules/.bin/redocly lint openapi.json

$(LINTERS):
	@command -v npm >/dev/null || { echo "make lint needs Node.js and npm (apt-get install nodejs npm)"; exit 1; }
	rm -rf $(NODE_DIR) && mkdir -p $(NODE_DIR) && echo '{"private": true}' > $(NODE_DIR)/package.json
	npm install --prefix $(NODE_DIR) --save-exact --no-audit --no-fund --loglevel=error \
		@stoplight/spectral-cli@$(SPECTRAL_VERSION) @redocly/cli@$(REDOCLY_VERSION)
	touch $@

bench: redis-server build ## load harness (deploy/BENCHMARKS.md), ~8 min; scale with BENCH_FLAGS='-scale 2 -hold 60s'
	.hooklane/bin/hooklane bench -out .hooklane/bench $(BENCH_FLAGS)

bench-deferral: redis-server ## deferral benchmark: 5,000 events to one subscriber at 100/s
	$(GO) test -run '^$$' -bench ThrottledBacklog -benchtime 1x ./worker/

chaos: redis-server ## the chaos run (issue 32): 3 workers, 40 subscribers, 20,000 events, kill -9 every 5-15 s and a Redis restart during 3 min, then the drain (4-5 min here); report in .hooklane/chaos/
	@# TestChaos at its full size, under the race detector as in make test
	@# (its short size is part of make test). The report is printed and
	@# kept in .hooklane/chaos/summary-full.txt; deploy/BENCHMARKS.md keeps
	@# the last one. HOOKLANE_CHAOS_SEED=<seed> repeats a run's schedule.
	HOOKLANE_CHAOS=full HOOKLANE_CHAOS_OUT=$(CURDIR)/.hooklane/chaos $(GO) test -race -count=1 -timeout 20m -run '^TestChaos$$' -v ./worker/

fuzz: redis-server ## run each fuzz target for 15s (make test runs their seed corpora)
	$(GO) test -run '^$$' -fuzz FuzzParseRetryAfter -fuzztime 15s ./limits/
	$(GO) test -run '^$$' -fuzz FuzzDecodeTask -fuzztime 15s ./tasks/
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
