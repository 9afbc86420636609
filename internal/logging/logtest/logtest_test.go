package logtest_test

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
)

func TestEventsFromConcurrentLoggers(t *testing.T) {
	var buf logtest.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { log.Info("hit", "i", i) })
	}
	wg.Wait()
	log.Info("other")
	if _, err := buf.Write([]byte("not json\n")); err != nil {
		t.Fatal(err)
	}
	if got := len(buf.Events("hit")); got != 20 {
		t.Errorf("Events(hit) = %d events, want 20", got)
	}
	if got := buf.Events("other"); len(got) != 1 || got[0]["level"] != "INFO" {
		t.Errorf("Events(other) = %v, want one INFO event", got)
	}
}
