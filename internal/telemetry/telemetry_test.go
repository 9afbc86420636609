package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolmesh/toolmesh/internal/telemetry"
)

// TestTransportCarriesTheSpanOfTheRequest: a request made inside a span
// tells the server which span it came from; one made outside any span, or
// whose traceparent was already set (by a client span), is sent as it is.
func TestTransportCarriesTheSpanOfTheRequest(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got <- r.Header.Get("Traceparent") }))
	defer srv.Close()
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	p := telemetry.Providers{TracerProvider: tp}
	client := &http.Client{Transport: p.Transport(nil)}
	send := func(ctx context.Context, header string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		if header != "" {
			req.Header.Set("Traceparent", header)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if header != "" && req.Header.Get("Traceparent") != header {
			t.Errorf("the transport changed the caller's request")
		}
		return <-got
	}

	ctx, span := p.Tracer().Start(context.Background(), "activity")
	defer span.End()
	sc := span.SpanContext()
	if h := send(ctx, ""); !strings.Contains(h, sc.TraceID().String()+"-"+sc.SpanID().String()) {
		t.Errorf("traceparent inside span %s = %q, want that span", sc.SpanID(), h)
	}
	if h := send(context.Background(), ""); h != "" {
		t.Errorf("traceparent outside any span = %q, want none", h)
	}
	const upstream = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if h := send(ctx, upstream); h != upstream {
		t.Errorf("traceparent set by the caller = %q, want it unchanged (%s)", h, upstream)
	}
}
