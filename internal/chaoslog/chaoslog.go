// Package chaoslog is the two logs a chaos run writes for `toolmesh check`
// to read (docs/faults.md): the workload's acknowledged writes, and the
// faults injected. Both are JSON lines, one record a line, so that a run
// killed half-way leaves every line it finished.
//
//	err := chaoslog.Write(path, acks)
//	acks, err := chaoslog.Read[chaoslog.Ack](path)
package chaoslog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// Ack is one write the mesh acknowledged to a workload. Domain says where
// it must be; ID is the id the mesh answered with, Key the idempotency key
// (for credits: the ledger reference) it was sent with, and Agent the
// caller, whose key it is.
type Ack struct {
	Domain string    `json:"domain"` // tasks, messages, memory, credits, owner, workflows
	ID     string    `json:"id,omitempty"`
	Key    string    `json:"key,omitempty"`
	Agent  string    `json:"agent,omitempty"`
	At     time.Time `json:"at"` // when the answer came back
}

// Fault is one fault a chaos run injected. Sent and Landed bracket the
// moment the signal took effect; Ended is when the process served again
// (a kill: up reported it ready; a freeze: it was continued), zero when
// the run did not see it.
type Fault struct {
	Kind   string    `json:"kind"`   // kill, freeze, db-crash
	Target string    `json:"target"` // the process as up names it, temporal-server, postgres
	Sent   time.Time `json:"sent"`
	Landed time.Time `json:"landed"`
	Ended  time.Time `json:"ended,omitzero"`
	Note   string    `json:"note,omitempty"`
}

// Write writes records to path, one JSON line each.
func Write[T any](path string, records []T) error {
	var b strings.Builder
	for _, r := range records {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// Read reads a JSON-lines file of T; none when path is empty.
func Read[T any](path string) ([]T, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
