package mcpdoor

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestDirectSessionKeepsTheSDKsClock: the session fast path serves a
// session only while the SDK, which alone resets the session's idle clock,
// served one of its requests within half of SessionTimeout; and only once
// it is initialized and its client set no log level.
func TestDirectSessionKeepsTheSDKsClock(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ds := newDirectSession(nil, nil, func() time.Time { return now })
	if ds.servable() {
		t.Fatal("served before notifications/initialized")
	}
	ds.ready.Store(true)
	if !ds.servable() {
		t.Fatal("not served once initialized")
	}
	now = now.Add(SessionTimeout/2 - time.Second)
	if !ds.servable() {
		t.Fatal("not served within half of SessionTimeout of the SDK's last request")
	}
	now = now.Add(time.Second)
	if ds.servable() {
		t.Fatal("served half of SessionTimeout after the SDK's last request: the SDK could close the session while the fast path keeps it busy")
	}
	ds.touch()
	if !ds.servable() {
		t.Fatal("not served after the SDK served a request")
	}
	ds.logging.Store(true)
	if ds.servable() {
		t.Fatal("served after the client set a log level")
	}
}

// TestDirectSessionCancelsByTheCancelledID: notifications/cancelled names a
// request by its id as the SDK decodes it; the fast path keeps its calls by
// the id as it came.
func TestDirectSessionCancelsByTheCancelledID(t *testing.T) {
	t.Parallel()
	ds := newDirectSession(nil, nil, time.Now)
	for raw, decoded := range map[string]any{`7`: float64(7), `"a-1"`: "a-1", `-3`: float64(-3)} {
		ctx, cancel := context.WithCancel(context.Background())
		if !ds.track(raw, cancel) {
			t.Fatalf("%s: refused", raw)
		}
		if ds.track(raw, func() {}) {
			t.Errorf("%s: a second call with the id in flight was taken", raw)
		}
		id, err := json.Marshal(decoded)
		if err != nil {
			t.Fatal(err)
		}
		ds.cancel(string(id))
		if ctx.Err() == nil {
			t.Errorf("%s: not cancelled by requestId %v", raw, decoded)
		}
		ds.untrack(raw)
		if !ds.track(raw, cancel) {
			t.Errorf("%s: refused after the first call ended", raw)
		}
		ds.untrack(raw)
	}
}
