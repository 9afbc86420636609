package workflowrun_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/workflowrun"
)

func TestWithin(t *testing.T) {
	ended := func(context.Context) (string, error) { return "answered", nil }
	blocks := func(ctx context.Context) (string, error) { <-ctx.Done(); return "", ctx.Err() }
	broken := errors.New("temporal is down")
	fails := func(context.Context) (string, error) { return "", broken }

	if out, done, err := workflowrun.Within(context.Background(), time.Second, 0, ended); !done || err != nil || out != "answered" {
		t.Errorf("a workflow that ends: %q, %v, %v", out, done, err)
	}
	if _, done, err := workflowrun.Within(context.Background(), 10*time.Millisecond, 0, blocks); done || err != nil {
		t.Errorf("a wait that runs out: done %v, err %v; want neither", done, err)
	}
	if _, done, err := workflowrun.Within(context.Background(), time.Second, 0, fails); done || !errors.Is(err, broken) {
		t.Errorf("a failing wait: done %v, err %v", done, err)
	}
	// No budget, or none left before the deadline less the margin: no wait.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	called := false
	_, done, err := workflowrun.Within(ctx, time.Minute, 2*time.Second, func(context.Context) (string, error) { called = true; return "", nil })
	if done || err != nil || called {
		t.Errorf("a deadline inside the margin: done %v, err %v, waited %v; want no wait", done, err, called)
	}
}
