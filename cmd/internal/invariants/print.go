package invariants

import (
	"fmt"
	"io"
	"time"

	"github.com/toolmesh/toolmesh/internal/chaoslog"
)

// FaultWindow is how far either side of a violation's records Print shows
// the faults injected: a fault that broke a write landed shortly before it
// was acknowledged, or while it was being written.
const FaultWindow = 30 * time.Second

// Print writes a check's result for a person: one line per invariant, then
// each violation with its key, its records and the faults injected within
// FaultWindow of them (all of them when the records carry no time).
func Print(w io.Writer, res Result, faults []chaoslog.Fault) {
	for _, c := range res.Checks {
		switch {
		case c.Skipped:
			fmt.Fprintf(w, "SKIP  %s (no database given)\n", c.Invariant)
		case c.Violations > 0:
			fmt.Fprintf(w, "FAIL  %s: %d of %d checked broke it\n", c.Invariant, c.Violations, c.Items)
		default:
			fmt.Fprintf(w, "ok    %s: %d checked\n", c.Invariant, c.Items)
		}
	}
	for _, v := range res.Violations {
		fmt.Fprintf(w, "\nviolation: %s\n  key      %s\n", v.Invariant, v.Key)
		for _, r := range v.Records {
			fmt.Fprintf(w, "  record   %s\n", r)
		}
		near := Near(faults, v.At, FaultWindow)
		if len(near) == 0 {
			fmt.Fprintf(w, "  faults   none within %s\n", FaultWindow)
		}
		for _, f := range near {
			fmt.Fprintf(w, "  fault    %s\n", describe(f, v.At))
		}
	}
	if res.Held() {
		fmt.Fprintln(w, "\nevery invariant held")
	} else {
		fmt.Fprintf(w, "\n%d violations\n", len(res.Violations))
	}
}

// Near returns the faults that were in effect within window of at: sent
// before at+window and not over before at-window. A zero at is unknown:
// every fault is near it.
func Near(faults []chaoslog.Fault, at time.Time, window time.Duration) []chaoslog.Fault {
	if at.IsZero() {
		return faults
	}
	var out []chaoslog.Fault
	for _, f := range faults {
		end := f.Ended
		if end.IsZero() {
			end = f.Landed
		}
		if f.Sent.Before(at.Add(window)) && end.After(at.Add(-window)) {
			out = append(out, f)
		}
	}
	return out
}

func describe(f chaoslog.Fault, at time.Time) string {
	s := fmt.Sprintf("%s %s sent %s", f.Kind, f.Target, f.Sent.UTC().Format("15:04:05.000"))
	if !at.IsZero() {
		s += fmt.Sprintf(" (%+.1fs from the records)", f.Sent.Sub(at).Seconds())
	}
	if !f.Ended.IsZero() {
		s += fmt.Sprintf(", serving again after %.2fs", f.Ended.Sub(f.Sent).Seconds())
	}
	return s
}
