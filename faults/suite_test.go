//go:build faults

// Package faults is the fault suite (`make faults`): it builds the toolmesh
// binary, starts the real processes — `toolmesh up` on a free port offset,
// single services, a PostgreSQL cluster — kills them under load, and counts
// what was lost. Each test prints its figures and fails when one is wrong;
// the suite ends with one table of every figure (docs/faults.md).
//
// The files carry the faults build tag, so `go test ./...` (make test) does
// not build or run them; `make faults` runs
// `go test -tags faults -count=1 ./faults`.
package faults

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"
)

// suite is what every test of the binary shares.
var suite struct {
	// bin is the toolmesh binary of the fault suite's build (-tags faults:
	// with the test-only testing domain); temporal the pinned Temporal CLI.
	bin, temporal string
	// dir holds the binary and every test's state; removed at the end
	// unless a test failed.
	dir string

	mu      sync.Mutex
	figures []figureRow
	shared  *mesh // the `toolmesh up` the mesh tests share; nil until one asks
}

func TestMain(m *testing.M) { os.Exit(runSuite(m)) }

func runSuite(m *testing.M) int {
	start := time.Now()
	dir, err := os.MkdirTemp("", "toolmesh-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	suite.dir = dir
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	suite.temporal = filepath.Join(root, "bin", "temporal")
	if _, err := os.Stat(suite.temporal); err != nil {
		fmt.Fprintln(os.Stderr, "faults: the pinned Temporal CLI is missing (make tools):", err)
		return 2
	}
	suite.bin = filepath.Join(dir, "toolmesh")
	build := exec.Command("go", "build", "-tags", "faults", "-o", suite.bin, "./cmd/toolmesh")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "faults: build toolmesh: %v\n%s", err, out)
		return 2
	}
	code := m.Run()
	if suite.shared != nil {
		suite.shared.stop()
	}
	printFigures(os.Stdout, time.Since(start))
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Printf("\nThe suite's state and logs are kept in %s (the shared mesh's log: mesh/up.log).\n", dir)
	}
	return code
}

// figureRow is one measured figure of one test.
type figureRow struct {
	test, name, value, want string
	ok                      bool
}

// figure records a figure of t that the case asserts: the suite's table
// shows it, and t fails when ok is false. Assert only what does not hang on
// how loaded the machine is (a count, an order, a bound the fault itself
// sets); a timing goes in with report.
func figure(t *testing.T, name string, value any, want string, ok bool) {
	t.Helper()
	v := formatFigure(value)
	suite.mu.Lock()
	suite.figures = append(suite.figures, figureRow{test: t.Name(), name: name, value: v, want: want, ok: ok})
	suite.mu.Unlock()
	if ok {
		t.Logf("figure: %s = %s (want %s)", name, v, want)
	} else {
		t.Errorf("figure: %s = %s, want %s", name, v, want)
	}
}

// report records a figure of t that depends on how loaded the machine is —
// a recovery time, an overrun, a latency — beside the target it is read
// against. It never fails t: the case asserts what the figure is evidence
// of (the process came back, the call did not wait for the work) with a
// bound the fault sets, and the table marks a figure past its target for a
// person to read.
func report(t *testing.T, name string, value any, target string, withinTarget bool) {
	t.Helper()
	v := formatFigure(value)
	want := "reported; target " + target
	if !withinTarget {
		want += " (past target)"
	}
	suite.mu.Lock()
	suite.figures = append(suite.figures, figureRow{test: t.Name(), name: name, value: v, want: want, ok: true})
	suite.mu.Unlock()
	t.Logf("figure: %s = %s (%s)", name, v, want)
}

func formatFigure(value any) string {
	if f, isFloat := value.(float64); isFloat {
		return fmt.Sprintf("%.2f", f)
	}
	return fmt.Sprint(value)
}

func printFigures(w io.Writer, took time.Duration) {
	suite.mu.Lock()
	defer suite.mu.Unlock()
	fmt.Fprintf(w, "\nFault suite figures (%s, %s):\n\n", time.Now().UTC().Format("2006-01-02"), took.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tFIGURE\tVALUE\tWANT\t")
	for _, f := range suite.figures {
		mark := ""
		if !f.ok {
			mark = "FAILED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", strings.TrimPrefix(f.test, "Test"), f.name, f.value, f.want, mark)
	}
	_ = tw.Flush()
}
