# mailsvc: `make run` starts the demo stack, `make test` runs every test against real servers.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/mailsvc/mailsvc/internal/buildinfo.Version=$(VERSION) \
	-X github.com/mailsvc/mailsvc/internal/buildinfo.Commit=$(COMMIT)
export MAILSVC_MAILPIT_BIN := $(CURDIR)/bin/mailpit

.PHONY: build test vet lint services run bench clean promtool

build: bin/mailsvc

bin/mailsvc: FORCE
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/mailsvc ./cmd/mailsvc

bin/mailpit: tools/go.mod
	cd tools && $(GO) build -o ../bin/mailpit github.com/axllent/mailpit

# golangci-lint, pinned in a module of its own so that its dependencies and Mailpit's
# never move each other's versions.
bin/golangci-lint: tools/golangci/go.mod
	cd tools/golangci && $(GO) build -o ../../bin/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint

services:
	scripts/services.sh

vet:
	$(GO) vet ./...

# lint: depguard keeps each SDK in its one package, plus the linters that pass today (.golangci.yml).
lint: bin/golangci-lint
	bin/golangci-lint run ./...

test: services bin/mailpit vet lint promtool
	$(GO) test -race -count=1 -timeout 20m ./...

# promtool: check the alert rules and run their unit tests (installs promtool when missing).
promtool:
	scripts/promtool.sh

run: bin/mailsvc bin/mailpit
	scripts/run.sh

# bench: the end-to-end benchmark first (mailsvc serve vs a raw baseline, table on stdout),
# then each package's own benchmarks; go test runs benchmarks one package at a time.
bench: services bin/mailpit
	$(GO) test -run '^$$' -bench EndToEnd -benchtime 1x -timeout 20m ./e2e/
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./internal/...

clean:
	rm -rf bin .run

FORCE:
