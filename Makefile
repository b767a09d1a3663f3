# The everyday commands. The README's two quick-start commands stay the
# reference (deploy/demo.sh and `go vet ./... && go test -race ./...`); these
# are shorthands for them and for the longer runs (CONTRIBUTING.md).
#
#   make build   the four commands into ./bin (BIN=dir), with the git revision
#   make test    go vet + the whole test suite under -race (the README's command)
#   make lint    golangci-lint v2 (.golangci.yml) over the three modules (., bench,
#                deploy/k8s/validate), fetched through the module proxy; CI
#                passes GOLANGCI_LINT=its installed binary
#   make demo    deploy/demo.sh: an agent and a three-node cluster on loopback
#   make bench   the performance report (bench/report.md, under 10 minutes)
#   make fuzz    every fuzz target for FUZZTIME (default 30s)

GO            ?= go
FUZZTIME      ?= 30s
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
REVISION      := $(shell git rev-parse HEAD 2>/dev/null)
BIN           ?= bin
LDFLAGS       := -X github.com/tckclk/tckclk/internal/version.Revision=$(REVISION)

.PHONY: build test lint demo bench fuzz

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/ticketd ./cmd/ticketctl ./cmd/tckclk-agent ./cmd/tckclk-conformance

test:
	$(GO) vet ./... && $(GO) vet -tags tckclk_testfaults ./cmd/ticketd ./node && $(GO) test -race -timeout 20m ./...

lint:
	$(GOLANGCI_LINT) run ./...
	cd bench && $(GOLANGCI_LINT) run ./...
	cd deploy/k8s/validate && $(GOLANGCI_LINT) run ./...

demo:
	deploy/demo.sh

bench:
	cd bench && $(GO) run ./cmd/tckbench

fuzz:
	fuzz/run.sh $(FUZZTIME)
