package main

import (
	"log/slog"
	"testing"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
)

// keptLog is a logger for an in-process part of a test (a service, a
// worker, an edge): its lines are kept and, when the test fails, the last
// of them are printed under name, so a failure seen once can be read.
func keptLog(tb testing.TB, name string) *slog.Logger {
	b := &logtest.Buffer{}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("%s log:\n%s", name, tail(b.String()))
		}
	})
	return slog.New(slog.NewJSONHandler(b, nil))
}
