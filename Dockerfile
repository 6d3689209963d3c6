# syntax=docker/dockerfile:1
# mailsvc container image: one static Go binary (CGO_ENABLED=0, -trimpath) on distroless
# static, which has CA certificates, time zone data (templates.time_zone) and the non-root
# user 65532, and no shell. Nothing is written to the root filesystem, so the container runs
# with a read-only root. Build from the repository root:
#
#   docker build -t localhost/mailsvc:dev \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg COMMIT="$(git rev-parse --short HEAD)" .
#
# (podman build takes the same arguments; `make image` runs whichever engine is installed.)
# `docker run --rm localhost/mailsvc:dev version` prints the injected version and commit.
# Every base image is named in full (registry/namespace/name:tag): podman and buildah refuse
# short names by default, and deploy/images_test.go keeps it so.
# Probes: GET /healthz (alive) and /readyz (database, schema and broker usable) on http.addr
# (default :8080), which also serves /metrics. deploy/deploy_test.go builds the binary with
# the flags of the `go build` below and checks it is static and reports its version.

ARG GO_VERSION=1.26

FROM docker.io/library/golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/mailsvc/mailsvc/internal/buildinfo.Version=${VERSION} -X github.com/mailsvc/mailsvc/internal/buildinfo.Commit=${COMMIT}" \
      -o /out/mailsvc ./cmd/mailsvc && \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/healthprobe ./deploy/healthprobe

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="mailsvc" \
      org.opencontainers.image.description="Turns order events into customer e-mails, never losing one" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
COPY --from=build /out/mailsvc /out/healthprobe /usr/local/bin/
# 65532 is distroless's "nonroot"; numeric so that runAsNonRoot can verify it.
USER 65532:65532
EXPOSE 8080
# Liveness for plain Docker; Kubernetes ignores this and uses the probes in deploy/kubernetes.
# The probe reads MAILSVC_HTTP_ADDR, so it follows an overridden http.addr.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/healthprobe", "/healthz"]
ENTRYPOINT ["mailsvc"]
CMD ["serve"]
