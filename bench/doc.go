// Package bench is mailsvc's benchmark lab, a module of its own so that
// `make test` never builds it and `make bench` is its only door: `mailsvc
// serve` against baselines that do less (raw, recorded, the floor) on the
// same PostgreSQL and RabbitMQ, the per-mail budget, the backlog drain and
// the priority lanes (docs/benchmarks.md). Everything is in its _test.go
// files; this file only names the package.
package bench
