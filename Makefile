# toolmesh — run `make help` for the targets.
#
# Every tool is pinned and installed with `go install pkg@version` into ./bin;
# nothing is downloaded at run time except Go modules from the Go proxy.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)
export GOBIN := $(BIN)

BUF_VERSION                   := v1.75.0
PROTOC_GEN_GO_VERSION         := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
PROTOC_GEN_GO_GRPC_VERSION    := v1.6.2
GRPC_GATEWAY_VERSION          := v2.33.0
TEMPORAL_CLI_VERSION          := v1.5.1
# The Temporal server the pinned CLI embeds: a `temporal` on PATH that
# embeds it is used instead of building the CLI.
TEMPORAL_SERVER_VERSION       := 1.29.1
STATICCHECK_VERSION           := v0.8.2
WORKFLOWCHECK_VERSION         := v0.6.0
# buf/validate/validate.proto is copied from this Go module in the module cache.
PROTOVALIDATE_PROTO_VERSION   := v1.2.2

# Domains with protos under proto/toolmesh/<domain>/v1 and a REST gateway config.
DOMAINS := $(notdir $(patsubst %/v1/,%,$(dir $(wildcard proto/toolmesh/*/v1/*_gateway.yaml))))
GO_PACKAGES := ./...

.PHONY: help
help: ## Show the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-z-]+:.*## /{printf "  \033[1m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# --- tools -------------------------------------------------------------------

$(BIN)/buf:
	go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-connect-go:
	go install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(BIN)/protoc-gen-grpc-gateway:
	go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION)
$(BIN)/protoc-gen-openapiv2:
	go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
# The Temporal CLI embeds the dev server and the Web UI; it takes minutes to
# build, so it is built once and reused, or taken from PATH when one there
# embeds the pinned server.
$(BIN)/temporal:
	@scripts/temporal-cli.sh $@ $(TEMPORAL_CLI_VERSION) $(TEMPORAL_SERVER_VERSION)
$(BIN)/staticcheck:
	go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
# Temporal's determinism linter: what a workflow calls must decide alike
# when the workflow replays.
$(BIN)/workflowcheck:
	go install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

PROTO_TOOLS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-connect-go $(BIN)/protoc-gen-go-grpc \
	$(BIN)/protoc-gen-grpc-gateway $(BIN)/protoc-gen-openapiv2

.PHONY: tools
tools: $(PROTO_TOOLS) $(BIN)/temporal $(BIN)/staticcheck $(BIN)/workflowcheck ## Install the pinned tools into ./bin

# --- code generation ---------------------------------------------------------

.build/protovalidate/buf/validate/validate.proto:
	@dir=$$(go mod download -json github.com/bufbuild/protovalidate@$(PROTOVALIDATE_PROTO_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	mkdir -p $(@D); install -m 0644 "$$dir/proto/protovalidate/buf/validate/validate.proto" $@

.PHONY: generate
generate: $(PROTO_TOOLS) .build/protovalidate/buf/validate/validate.proto ## Regenerate proto/gen from proto/
	rm -rf proto/gen
	buf generate
	@for d in $(DOMAINS); do \
	  buf generate proto --path proto/toolmesh/$$d/v1 --template "$$(scripts/gateway-template.sh $$d)"; \
	done
	scripts/descriptorset.sh
	scripts/assets.sh

.PHONY: checkgenerate
checkgenerate: generate ## Fail when the committed generated code is stale
	@if [ -n "$$(git status --porcelain -- proto/gen)" ]; then \
	  git status --porcelain -- proto/gen; echo "generated code is stale: run make generate and commit proto/gen"; exit 1; fi

# --- lint and test -----------------------------------------------------------

.PHONY: lint
lint: $(BIN)/buf $(BIN)/staticcheck $(BIN)/workflowcheck .build/protovalidate/buf/validate/validate.proto ## gofmt, go mod tidy, go vet, staticcheck, workflowcheck, buf lint, buf breaking, import rules
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^proto/gen/') 2>&1); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@go mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy"; exit 1; }
	go vet $(GO_PACKAGES)
	go vet -tags faults ./faults ./cmd/toolmesh
	go vet -tags conformance ./conformance ./cmd/toolmesh
	CGO_ENABLED=0 go vet ./cmd/toolmesh ./services/projects/...
	staticcheck $(GO_PACKAGES)
	staticcheck -tags faults ./faults ./cmd/toolmesh
	staticcheck -tags conformance ./conformance ./cmd/toolmesh
	go vet -tags chaosbroken ./cmd/internal/invariants ./services/credits/creditsstore
	staticcheck -tags chaosbroken ./cmd/internal/invariants ./services/credits/creditsstore
	workflowcheck -config workflowcheck.yaml ./workers/...
	buf lint
	scripts/buf-breaking.sh
	go test -count=1 ./internal/archtest

# Store tests start their own throwaway PostgreSQL (internal/testsupport/pgtest): they
# need initdb and postgres (PostgreSQL 15) on PATH or in
# /usr/lib/postgresql/*/bin, and, as root, the postgres system user.
# Every test runs under the race detector: stores, the edge, the workers and
# the servers are concurrent by design, and their tests race them on purpose.
# The race detector needs cgo, so the projects domain's tree-sitter parsers
# (C) are tested with it; the parsers package runs once more without cgo,
# where those languages answer ErrNoTreeSitter (docs/projects.md).
.PHONY: test
test: $(BIN)/temporal ## Run every test with the race detector (installs what the tests need)
	go test -race -count=1 -timeout 45m $(GO_PACKAGES)
	CGO_ENABLED=0 go test -count=1 ./services/projects/code

# The fast lane for the edit-test loop: -short skips everything that needs
# PostgreSQL, a Temporal dev server or a built toolmesh binary (the SQLite
# store suites and in-process service tests still run), under the race
# detector. Two things only the fast lane does, to spend its time on tests:
# the race detector does not wait a second at the exit of each of the ~65
# test binaries for straggling goroutines (atexit_sleep_ms; make test
# does), and test binaries are linked without DWARF (-ldflags=-w; race
# reports are symbolized without it).
.PHONY: test-short
test-short: ## Run the fast tests (-short -race: no PostgreSQL, Temporal or built binary)
	GORACE=atexit_sleep_ms=0 go test -short -race -ldflags=-w -timeout 10m $(GO_PACKAGES)

# The fault suite (docs/faults.md) builds toolmesh with -tags faults (which
# adds the test-only testing domain), starts the real processes on a free
# port offset, kills them under load and ends with one table of figures.
# The tag keeps make test from building it.
.PHONY: faults
faults: $(BIN)/temporal ## Run the fault suite: kill real processes under load, print the figures
	go test -tags faults -count=1 -timeout 20m -v ./faults

# The conformance lane (docs/testing.md): the official MCP conformance
# suite, pinned in conformance/package-lock.json with the Node.js 22 it
# needs, installed into .build/conformance (npm ci), against the real edge of
# a `toolmesh up` built with -tags conformance (the test-only fixture
# domain); one table, failing on a failure expected-failures.yaml does not
# list. One scenario: make conformance SCENARIO=tools-call-image [VERSION=2026-07-28].
SCENARIO ?=
VERSION ?=
.PHONY: conformance
conformance: $(BIN)/temporal ## Run the official MCP conformance suite against the edge, print the table
	SCENARIO=$(SCENARIO) VERSION=$(VERSION) go test -tags conformance -count=1 -timeout 20m -v ./conformance

# The chaos run (docs/faults.md): a mesh of its own under a mixed workload
# while a seeded schedule kills and freezes its processes, then toolmesh
# check over its databases. Flags go in CHAOS_FLAGS: -chaos.duration,
# -chaos.seed (replays a schedule), -chaos.rate (fault events a minute),
# -chaos.postgres (every domain on PostgreSQL, crashed among the faults).
CHAOS_FLAGS ?= -chaos.duration 5m
.PHONY: chaos
# It first proves the checker catches a broken invariant: the chaosbroken
# build of the credits store skips a ledger row.
chaos: $(BIN)/temporal ## Run the chaos workload under random seeded faults, then check the invariants
	go test -tags chaosbroken -count=1 -run '^TestBrokenStoreIsCaught$$' -v ./cmd/internal/invariants
	go test -tags faults -count=1 -timeout 40m -v -run '^TestChaos$$' ./faults -args $(CHAOS_FLAGS)

.PHONY: bench
# Elicitation rounds are measured over a fixed number of calls (200) against
# a real Temporal dev server, apart from the time-based benchmarks.
bench: $(BIN)/temporal ## Run the benchmarks (edge vs direct Connect, elicitation rounds, ...)
	go test -run '^$$' -bench 'Benchmark[^E]' -benchmem -benchtime 3s ./edge/...
	go test -run '^$$' -bench ElicitationRounds -benchtime 200x ./edge/
	go test -run '^$$' -bench AskRoundTrip -benchtime 200x ./cmd/toolmesh
	go test -run '^$$' -bench ApprovalToFirstRun -benchtime 20x ./cmd/toolmesh

# The mesh as users meet it: the processes `make run` starts, driven by
# load generators of their own (see docs/performance.md). Flags go in
# BENCH_MESH_FLAGS, e.g. BENCH_MESH_FLAGS="--rounds 3" or "--profile .build/profiles".
BENCH_MESH_FLAGS ?=
.PHONY: bench-mesh
bench-mesh: $(BIN)/temporal ## Benchmark the running mesh: edge vs direct Connect vs a stock go-sdk server (JSON in .build/)
	@mkdir -p .build
	go run ./cmd/benchmesh --out .build/bench-mesh.json $(BENCH_MESH_FLAGS)

# --- run ---------------------------------------------------------------------

.PHONY: build
build: ## Build ./bin/toolmesh
	@if [[ ! -x $(BIN)/toolmesh ]]; then echo "toolmesh: building $(BIN)/toolmesh (first use: downloads the Go modules, then compiles; several minutes on 2 cores) ..."; fi
	@start=$$SECONDS; go build -o $(BIN)/toolmesh ./cmd/toolmesh; echo "toolmesh: built in $$((SECONDS - start)) s"

# The toolmesh binary and the Temporal CLI build side by side.
.PHONY: run
run: ## Start the whole mesh locally (Ctrl-C stops it)
	@$(MAKE) --no-print-directory -j2 build $(BIN)/temporal
	$(BIN)/toolmesh up

.PHONY: dev
dev: ## Start the mesh under Tilt (tilt up; options after --, see Tiltfile)
	@command -v tilt >/dev/null || { echo "make dev runs the mesh under Tilt, which is not installed: see https://docs.tilt.dev/install.html"; \
		echo "make run starts the same mesh and needs nothing else."; exit 1; }
	@$(MAKE) --no-print-directory -j2 build $(BIN)/temporal
	tilt up

.PHONY: clean
clean: ## Remove build output and local data
	rm -rf .build .toolmesh $(BIN)/toolmesh
