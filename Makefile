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

.PHONY: build test unit vet lint services stop toolchain run bench clean promtool mailservers chromium ui-check mailpit-ui chart compose-check image image-check examples-node examples-go

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

test: toolchain services promtool mailservers chromium examples-node examples-go bin/mailpit vet lint chart compose-check
	@echo "==> go test -race ./... (about 3 minutes; a package's line appears when it has finished)"
	$(WITH_SERVICES) $(GO) test -race -count=1 -timeout 20m ./...
	@scripts/services.sh status

# chart: render the Helm chart deploy/helm/mailsvc with Helm's Go packages (default, roles split,
# monitoring on and off, webhooks and console, other ports) and validate every object against
# the Kubernetes types offline. A module of its own (deploy/helm/chartcheck), so that Helm's
# and Kubernetes' dependencies stay out of go.mod; the first run compiles them (~2 min).
chart:
	@echo "==> go test ./deploy/helm/chartcheck (the Helm chart, rendered and validated offline)"
	cd deploy/helm/chartcheck && $(GO) vet ./... && $(GO) test -count=1 ./...

# compose-check: load deploy/compose.yaml with compose-go, Docker Compose v2's own loader (the
# Compose Specification's schema), in a module of its own (deploy/composecheck).
compose-check:
	@echo "==> go test ./deploy/composecheck (the compose file, loaded as Docker Compose loads it)"
	cd deploy/composecheck && $(GO) vet ./... && $(GO) test -count=1 ./...

# image: build the container image with the Dockerfile (docker, or podman with the docker
# format that keeps HEALTHCHECK). Needs the base images' registries (docker.io, gcr.io).
IMAGE ?= localhost/mailsvc:$(VERSION)
image:
	scripts/image.sh build $(IMAGE)

# image-check: where podman is installed, build an image from this checkout without any
# registry (scripts/image.sh local: the Dockerfile's binaries on an empty base) and run it
# against the test servers: version, migrate, serve until /readyz answers 200.
image-check: services
	$(WITH_SERVICES) scripts/image.sh check

# unit: the quick loop, every test that needs no server (go test -short: the helpers that reach
# PostgreSQL, RabbitMQ, Mailpit, Postfix, Dovecot or Chromium skip their tests; internal/testenv),
# plus the examples' own unit tests. No servers, no -race, and go test's result cache: a rerun
# after a change tests only the packages it touches (seconds); from cold about 60 s of CPU.
unit:
	@echo "==> go test -short ./... (tests that need no server; make test runs them all)"
	$(GO) test -short ./...
	cd examples/go && $(GO) test ./...
	@if command -v node >/dev/null 2>&1; then cd examples/node && node --test >/dev/null && echo "ok  examples/node (node --test)"; \
	else echo "examples/node skipped: node is missing (make examples-node installs it)"; fi

# examples-go: vet and unit-test the Go examples (their own module; e2e TestExamples runs them).
examples-go:
	cd examples/go && $(GO) vet ./... && $(GO) test -count=1 ./...

# examples-node: Node.js and npm (Debian's nodejs, npm as root when missing), npm ci in
# examples/node, and its unit tests; e2e TestExamples runs the examples against mailsvc.
examples-node:
	scripts/examples-node.sh

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

# bench: the benchmark lab first (bench/, a module of its own that make test never builds:
# mailsvc serve vs baselines with the per-mail budget, serve draining a backlog, the priority
# lanes; tables on stdout), then each package's own benchmarks; go test runs benchmarks one
# package at a time.
bench: services bin/mailpit
	$(WITH_SERVICES) cd bench && $(GO) vet . && $(GO) test -count=1 -run TestBench . && $(GO) test -run '^$$' -bench 'EndToEnd|Backlog|Lanes' -benchtime 1x -timeout 30m .
	$(WITH_SERVICES) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 30m ./internal/...

clean:
	rm -rf bin .run

FORCE:
