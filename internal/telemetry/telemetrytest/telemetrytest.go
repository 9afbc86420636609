// Package telemetrytest gives tests a process's telemetry with the spans
// kept in memory: the production providers (telemetry.New) with an
// in-memory exporter, so a test sees what an OTLP collector would, and the
// Prometheus page the process would serve.
package telemetrytest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// Telemetry is a process's telemetry whose spans a test can read.
type Telemetry struct {
	*telemetry.Telemetry
	exp *tracetest.InMemoryExporter
}

// New returns telemetry that records every span, shut down when the test
// ends.
func New(tb testing.TB) *Telemetry {
	tb.Helper()
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.New(telemetry.Config{ServiceName: "toolmesh-test", Exporter: exp})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return &Telemetry{Telemetry: tel, exp: exp}
}

// Span is a finished span as a test reads it, from this package's
// recorder or from the stdout exporter's output (ParseStdout).
type Span struct {
	Name     string
	Kind     trace.SpanKind
	TraceID  string
	SpanID   string
	ParentID string // "" for a root span
	// Attrs holds the string attributes.
	Attrs map[string]string
	// Error marks a span whose status is Error.
	Error bool
}

// Spans returns the spans ended so far.
func (t *Telemetry) Spans(tb testing.TB) []Span {
	tb.Helper()
	if err := t.TracerProvider.(*sdktrace.TracerProvider).ForceFlush(context.Background()); err != nil {
		tb.Fatal(err)
	}
	var out []Span
	for _, s := range t.exp.GetSpans() {
		sp := Span{Name: s.Name, Kind: s.SpanKind, TraceID: s.SpanContext.TraceID().String(), SpanID: s.SpanContext.SpanID().String(),
			Attrs: map[string]string{}, Error: s.Status.Code == codes.Error}
		if s.Parent.IsValid() {
			sp.ParentID = s.Parent.SpanID().String()
		}
		for _, a := range s.Attributes {
			if a.Value.Type() == attribute.STRING {
				sp.Attrs[string(a.Key)] = a.Value.AsString()
			}
		}
		out = append(out, sp)
	}
	return out
}

// ParseStdout reads the spans the stdout exporter wrote (one JSON object
// per span).
func ParseStdout(tb testing.TB, out string) []Span {
	tb.Helper()
	var spans []Span
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var s struct {
			Name        string
			SpanKind    trace.SpanKind
			SpanContext struct{ TraceID, SpanID string }
			Parent      struct{ TraceID, SpanID string }
			Attributes  []struct {
				Key   string
				Value struct {
					Type  string
					Value any
				}
			}
			Status struct{ Code json.RawMessage }
		}
		if err := dec.Decode(&s); err != nil {
			tb.Fatalf("stdout exporter output: %v\n%s", err, out)
		}
		sp := Span{Name: s.Name, Kind: s.SpanKind, TraceID: s.SpanContext.TraceID, SpanID: s.SpanContext.SpanID, Attrs: map[string]string{}}
		if s.Parent.SpanID != "" && s.Parent.SpanID != (trace.SpanID{}).String() {
			sp.ParentID = s.Parent.SpanID
		}
		for _, a := range s.Attributes {
			if v, ok := a.Value.Value.(string); ok && a.Value.Type == "STRING" {
				sp.Attrs[a.Key] = v
			}
		}
		code := strings.Trim(string(s.Status.Code), `"`)
		sp.Error = code == "Error" || code == strconv.Itoa(int(codes.Error))
		spans = append(spans, sp)
	}
	return spans
}

// Step is one span of a chain: its name and kind.
type Step struct {
	Name string
	Kind trace.SpanKind
}

// Server, Client and Internal are steps of the given kind.
func Server(name string) Step   { return Step{name, trace.SpanKindServer} }
func Client(name string) Step   { return Step{name, trace.SpanKindClient} }
func Internal(name string) Step { return Step{name, trace.SpanKindInternal} }

func (s Step) String() string { return fmt.Sprintf("%s (%s)", s.Name, s.Kind) }

// Chain finds, among spans, a span per step, each the child of the one
// before, all in one trace; ok is false when there is none.
func Chain(spans []Span, steps ...Step) (chain []Span, ok bool) {
	var walk func(parent *Span, rest []Step) []Span
	walk = func(parent *Span, rest []Step) []Span {
		if len(rest) == 0 {
			return []Span{}
		}
		for i := range spans {
			s := &spans[i]
			if s.Name != rest[0].Name || s.Kind != rest[0].Kind {
				continue
			}
			if parent != nil && (s.ParentID != parent.SpanID || s.TraceID != parent.TraceID) {
				continue
			}
			if tail := walk(s, rest[1:]); tail != nil {
				return append([]Span{*s}, tail...)
			}
		}
		return nil
	}
	chain = walk(nil, steps)
	return chain, chain != nil
}

// Ancestry returns span's ancestors among spans, from its parent to the
// root of what was recorded.
func Ancestry(spans []Span, span Span) []Span {
	byID := map[string]Span{}
	for _, s := range spans {
		byID[s.TraceID+"/"+s.SpanID] = s
	}
	var out []Span
	for cur := span; cur.ParentID != "" && len(out) < len(spans); {
		parent, ok := byID[cur.TraceID+"/"+cur.ParentID]
		if !ok {
			break
		}
		out = append(out, parent)
		cur = parent
	}
	return out
}

// WaitChain waits until spans holding the chain have ended (spans of
// workflows end when the workflow does) and returns it; the test fails,
// listing the spans it saw, when they do not within a minute.
func (t *Telemetry) WaitChain(tb testing.TB, steps ...Step) []Span {
	tb.Helper()
	return WaitChain(tb, []*Telemetry{t}, steps...)
}

// WaitChain is Telemetry.WaitChain over the spans of several processes: a
// trace that crosses them.
func WaitChain(tb testing.TB, procs []*Telemetry, steps ...Step) []Span {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var spans []Span
		for _, p := range procs {
			spans = append(spans, p.Spans(tb)...)
		}
		if chain, ok := Chain(spans, steps...); ok {
			return chain
		}
		if time.Now().After(deadline) {
			tb.Fatalf("no chain of spans %v; spans:\n%s", steps, Describe(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Describe lists spans, one a line, with their ids and parents.
func Describe(spans []Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %s trace=%s span=%s parent=%s\n", s.Name, s.Kind, s.TraceID, s.SpanID, s.ParentID)
	}
	return b.String()
}

// Scrape returns the Prometheus page of the process.
func (t *Telemetry) Scrape(tb testing.TB) string {
	tb.Helper()
	rec := httptest.NewRecorder()
	t.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("/metrics = %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// Get fetches url (a /metrics page) and returns its body.
func Get(tb testing.TB, url string) string {
	tb.Helper()
	res, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s = %d: %s", url, res.StatusCode, b)
	}
	return string(b)
}

// Value returns the sum, over the samples of family name (its full
// Prometheus name, e.g. "toolmesh_tool_calls_total") whose labels include
// labels, of a counter's or gauge's value or a histogram's count. ok is
// false when the page has no such sample.
func Value(tb testing.TB, page, name string, labels map[string]string) (v float64, ok bool) {
	tb.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		tb.Fatalf("parse /metrics: %v", err)
	}
next:
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, want := range labels {
			if have[k] != want {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Histogram != nil:
			v += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			v += m.GetUntyped().GetValue()
		}
	}
	return v, ok
}
