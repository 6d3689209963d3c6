// Package tracingtest is test support for tracing: an in-process OTLP/HTTP
// trace receiver (the collector side of OTEL_EXPORTER_OTLP_PROTOCOL=
// http/protobuf) that keeps every span exported to it, so that a test
// checks what `mailsvc serve` really exports, through the exporter the
// OTEL_* variables configure.
package tracingtest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one exported span, its ids in lower-case hex as in a
// traceparent header.
type Span struct {
	Name string
	// Kind is OTLP's: "SPAN_KIND_CONSUMER", "SPAN_KIND_CLIENT",
	// "SPAN_KIND_PRODUCER", ...
	Kind                          string
	TraceID, SpanID, ParentSpanID string
	// TraceState is the span's W3C tracestate ("" for none).
	TraceState string
	// Attributes holds the string, int and bool attributes as text.
	Attributes map[string]string
	// Resource holds the resource's string attributes (service.name, ...).
	Resource map[string]string
	// Error is the status message of a span whose status is Error, "" else.
	Error string
}

// Receiver is an OTLP/HTTP trace receiver on loopback.
type Receiver struct {
	// URL is its base URL, the value for OTEL_EXPORTER_OTLP_ENDPOINT; the
	// exporter posts to URL + "/v1/traces".
	URL string

	mu    sync.Mutex
	spans []Span
	bad   []string
}

// NewReceiver starts a receiver that lives until the test ends. Every
// answer closes its connection, so that no exporter connection outlives
// the test.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Connection", "close")
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.reject("unexpected request " + req.Method + " " + req.URL.Path)
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.reject("gzip: " + err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &msg)
	}
	if err != nil {
		r.reject("decode: " + err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg)
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) reject(why string) {
	r.mu.Lock()
	r.bad = append(r.bad, why)
	r.mu.Unlock()
}

func (r *Receiver) add(msg *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range msg.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, spanOf(s, res))
			}
		}
	}
}

func spanOf(s *tracepb.Span, res map[string]string) Span {
	attrs := map[string]string{}
	for _, kv := range s.GetAttributes() {
		attrs[kv.GetKey()] = valueText(kv.GetValue())
	}
	out := Span{Name: s.GetName(), Kind: s.GetKind().String(), TraceID: hex.EncodeToString(s.GetTraceId()),
		SpanID: hex.EncodeToString(s.GetSpanId()), ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
		TraceState: s.GetTraceState(), Attributes: attrs, Resource: res}
	if s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		out.Error = s.GetStatus().GetMessage()
	}
	return out
}

// valueText is v as text: a string as it is, an int in decimal, a bool
// as true or false.
func valueText(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return v.String()
}

// Spans returns a copy of every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the spans received of trace id (hex).
func (r *Receiver) Trace(id string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// WaitTrace waits up to 20 s until trace id has at least n spans and
// returns them; it fails the test when fewer arrive, or when the receiver
// got a request it could not read.
func (r *Receiver) WaitTrace(t testing.TB, id string, n int) []Span {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		bad := append([]string(nil), r.bad...)
		r.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("the OTLP receiver got requests it could not read: %v", bad)
		}
		if got := r.Trace(id); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: want %d spans, got %d (all spans: %+v)", id, n, len(r.Trace(id)), r.Spans())
		}
		<-tick.C
	}
}
