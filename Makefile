# skiplock: `make demo` runs the quickstart end to end, `make test` runs every check.
SHELL := /bin/bash
GO ?= go
DATABASE_URL ?=
export DATABASE_URL
DSN = $(if $(DATABASE_URL),$(DATABASE_URL),postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)
# The short fuzz run's budgets count executions (-fuzztime Nx; about 5 s each here): a
# duration-based -fuzztime can fail at its deadline with a bare "context deadline
# exceeded" and no failing input, a race in Go's fuzz coordinator (golang/go#75804, fixed
# in Go 1.27) that a CI run hit. FUZZTIME (e.g. 30s) overrides both.
FUZZTIME ?=
FUZZ_ENQUEUE ?= 5000x
FUZZ_DECODE ?= 300x

## DEPS_ENFORCE: the packages whose shape `make vet` enforces (internal/tools/filedeps: file
## loops, files using each other both ways, long functions, engine packages under internal/
## importing the root). It prints the report for every package; these are the ones that
## pass: the root (the API), the engine's packages, ui, the tools; add each package as it
## passes. Empty enforces every package (`make vet DEPS_ENFORCE=`).
DEPS_ENFORCE ?= .,./internal/claim,./internal/migrate,./internal/sealed,./internal/durable,./internal/enqueue,./internal/execute,./internal/groupcommit,./internal/jobtype,./internal/maintenance,./internal/notify,./internal/ownership,./internal/periodic,./internal/pgutil,./internal/record,./internal/settle,./internal/waiting,./ui,./ui/internal/query,./cron,./internal/blackhole,./internal/chaos/audit,./internal/chaos/cmd/...,./internal/chaos/worker,./internal/lifecycle,./internal/pgbouncer,./internal/pgtest/...,./internal/testbridge,./internal/tools/...,./migrations,./skiplocktest,./cmd/skiplock,./examples/quickstart

.PHONY: test fmt-check vet unit fuzz-short demo db bench bench-quick bench-scale bench-scale-quick chaos chaos-failover env env-test ui

## test: gofmt check, go vet, the race-enabled test suite (with the reduced chaos run) and a short fuzz run.
test: env-test fmt-check vet unit fuzz-short

## env: a Postgres that answers (started or installed when missing). env-test: that,
## pgbouncer for the PgBouncer test, chromium for the dashboard's, python3-psycopg for
## the Python SQL-enqueue example and libfaketime for the clock-step tests; only `test`
## (and `chaos`, for libfaketime) ask for them, so `demo` installs nothing more.
env:
	@./scripts/ensure-env.sh

env-test:
	@./scripts/ensure-env.sh --pgbouncer --chromium --sql-examples --faketime

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	$(GO) run ./internal/tools/filedeps -report -only '$(DEPS_ENFORCE)' ./...
	cd bench && $(GO) vet ./...
	cd ui/browsertest && $(GO) vet ./...
	cd otel && $(GO) vet ./...
	# TestDocs_EveryGoBlockCompiles builds the docs' blocks with GOPROXY=off against the
	# root and otel modules: their whole module graphs must be in the module cache.
	$(GO) mod download
	cd otel && $(GO) mod download
	cd internal/pgtest/dockerpg && $(GO) vet ./...

unit:
	$(GO) test -race -count=1 -timeout 15m ./...
	cd ui/browsertest && $(GO) test -race -count=1 -timeout 5m ./...
	cd otel && $(GO) test -race -count=1 -timeout 5m ./...

fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzEnqueueValidation$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_ENQUEUE)) .
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeJobRow$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_DECODE)) .

## demo: find or start Postgres, migrate, run the quickstart example to the end.
demo: env
	DATABASE_URL='$(DSN)' $(GO) run ./examples/quickstart

## ui: run the demo in the schema skiplock_demo (kept), then serve the dashboard on its data
## at http://$(UI_LISTEN)/ (Ctrl-C stops it). `make demo` alone uses a schema of its own per run.
UI_LISTEN ?= 127.0.0.1:8080
ui: env
	DATABASE_URL='$(DSN)' SKIPLOCK_DEMO_SCHEMA=skiplock_demo $(GO) run ./examples/quickstart
	DATABASE_URL='$(DSN)' $(GO) run ./cmd/skiplock ui --schema skiplock_demo --listen '$(UI_LISTEN)' --trust-loopback

## db: make sure a Postgres answers and print its connection string.
db: env
	@echo '$(DSN)'

## bench: skiplock, River, gue and the bare SQL floors side by side, with autovacuum off (the
## server at DSN) and on (a throwaway cluster the bench starts); bench-quick: reduced
## sizes, skiplock, River and the bare SQL floors, the workloads this round changed.
BENCH_QUICK_WORKLOADS ?= bulk,single,storm,queues,drain,latency,sustained
bench: env
	cd bench && DATABASE_URL='$(DSN)' $(GO) run . -autovacuum off,on

bench-quick: env
	cd bench && DATABASE_URL='$(DSN)' $(GO) run . -quick -autovacuum off,on -systems skiplock,river,bare -workloads $(BENCH_QUICK_WORKLOADS)

## bench-scale: how skiplock's figures move as the work grows, beside the bare SQL floor
## (a backlog of 10^4-10^7 jobs, an archive of 10^6-10^7 rows, 10-10,000 queues, 1-16
## worker processes, latency under 50/90 % load); tables and PNG plots in bench/results/.
bench-scale: env
	cd bench && DATABASE_URL='$(DSN)' $(GO) run . -scale all -scale-runs 2

bench-scale-quick: env
	cd bench && DATABASE_URL='$(DSN)' $(GO) run . -scale all -quick -scale-runs 1

## chaos: the full-size fault run (kill -9, Postgres restart, terminated backends, rolling
## deploy, black hole, CPU starvation, a step of the server's clock under libfaketime), then
## the recovery run (24 kill -9s at default leases).
chaos:
	@./scripts/ensure-env.sh --faketime
	$(GO) run ./internal/chaos/cmd/chaos

## chaos-failover: kill -9 the primary of a streaming pair and promote its standby, with
## synchronous replication (must lose nothing), then asynchronous (reports what it lost).
chaos-failover:
	$(GO) run ./internal/chaos/cmd/chaos -failover sync
	$(GO) run ./internal/chaos/cmd/chaos -failover async
