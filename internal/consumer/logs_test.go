package consumer_test

import (
	"context"
	"log/slog"
	"sync"
)

// logRecord is one log record a test consumer wrote, its attributes as
// strings.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logRecorder is a slog.Handler that keeps every record at its level or
// above (warn unless a test lowers it before starting a consumer), and
// passes it on to next.
type logRecorder struct {
	next    slog.Handler
	mu      *sync.Mutex
	records *[]logRecord
	with    []slog.Attr
	level   *slog.LevelVar
}

func newLogRecorder(next slog.Handler) *logRecorder {
	lv := &slog.LevelVar{}
	lv.Set(slog.LevelWarn)
	return &logRecorder{next: next, mu: &sync.Mutex{}, records: &[]logRecord{}, level: lv}
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < h.level.Level() {
		return nil
	}
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.with {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	*h.records = append(*h.records, rec)
	h.mu.Unlock()
	if r.Level < slog.LevelWarn {
		return nil // kept, not printed
	}
	return h.next.Handle(ctx, r)
}

func (h *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.with = append(append([]slog.Attr(nil), h.with...), as...)
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *logRecorder) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// matching returns the records so far whose message is msg.
func (h *logRecorder) matching(msg string) []logRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []logRecord
	for _, r := range *h.records {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}
