# mailsvc: `make run` starts the demo stack, `make test` runs every test against real servers.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/mailsvc/mailsvc/internal/buildinfo.Version=$(VERSION) \
	-X github.com/mailsvc/mailsvc/internal/buildinfo.Commit=$(COMMIT)
export MAILSVC_MAILPIT_BIN := $(CURDIR)/bin/mailpit

# The servers' URLs, written by scripts/services.sh (its own servers use other ports).
WITH_SERVICES := set -a && . .run/services.env && set +a &&

.PHONY: build test vet lint services stop toolchain run bench clean promtool mailservers chromium ui-check mailpit-ui

build: bin/mailsvc

bin/mailsvc: FORCE
	@echo "==> building bin/mailsvc (go build; the first build compiles every dependency, ~30 s)"
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/mailsvc ./cmd/mailsvc

# Mailpit with its web UI (tools/mailpit-ui/dist, committed; see scripts/build-mailpit.sh).
bin/mailpit: tools/go.mod tools/go.sum tools/mailpit-ui/VERSION $(wildcard tools/mailpit-ui/dist/*) scripts/build-mailpit.sh
	scripts/build-mailpit.sh

# mailpit-ui: rebuild tools/mailpit-ui/dist with npm after a Mailpit upgrade in tools/go.mod.
mailpit-ui:
	scripts/mailpit-ui.sh

# golangci-lint, pinned in a module of its own so that its dependencies and Mailpit's
# never move each other's versions.
bin/golangci-lint: tools/golangci/go.mod
	cd tools/golangci && $(GO) build -o ../../bin/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint

services:
	scripts/services.sh

# stop: stop the dev servers mailsvc itself started (never one that was already there).
stop:
	scripts/services.sh stop

# toolchain: a C compiler for go test -race, checked (or installed) before the long steps.
toolchain:
	scripts/toolchain.sh

vet:
	@echo "==> go vet ./... (compiles every package once; ~30 s the first time)"
	$(GO) vet ./...

# lint: depguard keeps each SDK in its one package, plus the linters that pass today (.golangci.yml).
lint: bin/golangci-lint
	@echo "==> golangci-lint run ./... (depguard and friends; the first run builds the linter, ~2 min)"
	bin/golangci-lint run ./...

test: toolchain services promtool mailservers chromium bin/mailpit vet lint
	@echo "==> go test -race ./... (about 3 minutes; a package's line appears when it has finished)"
	$(WITH_SERVICES) $(GO) test -race -count=1 -timeout 20m ./...
	@scripts/services.sh status

# mailservers: Postfix and Dovecot for the bounce tests (installed when missing; never
# configured or started as system services: the tests run private instances).
mailservers:
	scripts/mailservers.sh

# chromium: Debian's headless Chromium for the console's browser tests (installed when missing).
chromium:
	scripts/chromium.sh

# promtool: check the alert rules and run their unit tests (installs promtool when missing).
promtool:
	scripts/promtool.sh

run: bin/mailsvc bin/mailpit bin/demofiles
	scripts/run.sh

# demofiles: make run's stand-in for a shop's object store (the demo's invoice PDF over HTTPS).
bin/demofiles: FORCE
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/demofiles ./scripts/demofiles

# ui-check: with make run going, screenshot Mailpit's inbox in headless Chromium and check
# that the demo's subjects are on the page (installs Debian's chromium as root when missing).
ui-check:
	scripts/ui-check.sh

# bench: the end-to-end benchmarks first (mailsvc serve vs a raw baseline, then serve draining a
# backlog; tables on stdout),
# then each package's own benchmarks; go test runs benchmarks one package at a time.
bench: services bin/mailpit
	$(WITH_SERVICES) $(GO) test -run '^$$' -bench 'EndToEnd|Backlog' -benchtime 1x -timeout 30m ./e2e/
	$(WITH_SERVICES) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./internal/...

clean:
	rm -rf bin .run

FORCE:
