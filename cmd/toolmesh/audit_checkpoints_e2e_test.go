package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// buildWithKeys builds the toolmesh binary and runs its keygen into a data
// directory beside it.
func buildWithKeys(tb testing.TB) (bin, data string) {
	tb.Helper()
	dir := tb.TempDir()
	bin, data = filepath.Join(dir, "toolmesh"), filepath.Join(dir, "data")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		tb.Fatalf("build toolmesh: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "keygen", "--data", data).CombinedOutput(); err != nil {
		tb.Fatalf("keygen: %v\n%s", err, out)
	}
	return bin, data
}

// childProcess is the built binary running one command, its stderr (the
// JSON log) collected.
type childProcess struct {
	cmd     *exec.Cmd
	logs    *logtest.Buffer
	done    chan error
	stopped sync.Once
}

// startBinary runs bin with args until stop, and waits until health
// answers 200.
func startBinary(t *testing.T, bin, health string, env []string, args ...string) *childProcess {
	t.Helper()
	p := &childProcess{cmd: exec.Command(bin, args...), logs: &logtest.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dead := make(chan struct{})
	go func() { p.done <- p.cmd.Wait(); close(dead) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("toolmesh %s log:\n%s", strings.Join(args[:2], " "), p.logs)
		}
	})
	if err := waitHealthy(t.Context(), health, dead, 30*time.Second); err != nil {
		t.Fatalf("toolmesh %v did not become healthy: %v\n%s", args, err, p.logs)
	}
	return p
}

// stop interrupts the process (Ctrl-C) and waits for it to exit cleanly.
func (p *childProcess) stop(t *testing.T) {
	t.Helper()
	p.stopped.Do(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		if err := <-p.done; err != nil {
			t.Errorf("toolmesh %s: %v", strings.Join(p.cmd.Args[1:3], " "), err)
		}
	})
}

// TestCutAuditTailIsCaughtAcrossProcesses is a cut-off tail (the tamper a
// hash chain alone misses, docs/audit.md) against the real processes: admin calls through `toolmesh edge` leave
// audit records in `toolmesh serve audit`, which signs checkpoints; with the
// mesh stopped, the last record is deleted from the SQLite file and the head
// row rewritten to the record before (after dropping the append-only
// trigger). The chain alone checks out; `toolmesh audit verify` and the
// audit_verify tool report the cut, with the signed checkpoint that proves
// it.
func TestCutAuditTailIsCaughtAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts processes")
	}
	bin, data := buildWithKeys(t)
	agentsAddr, auditAddr, edgeAddr := porttest.Addr(t), porttest.Addr(t), porttest.Addr(t)
	pub := filepath.Join(data, "mesh.pub")
	startBinary(t, bin, "http://"+agentsAddr+"/healthz", []string{agentsSeedEnv + "=local"},
		"serve", "agents", "--addr", agentsAddr, "--data", data, "--mesh-public-key", pub)
	serveAudit := func() *childProcess {
		return startBinary(t, bin, "http://"+auditAddr+"/healthz", nil,
			"serve", "audit", "--addr", auditAddr, "--data", data, "--mesh-public-key", pub, "--agents-url", "http://"+agentsAddr)
	}
	auditProc := serveAudit()
	startBinary(t, bin, "http://"+edgeAddr+"/healthz", nil,
		"edge", "--addr", edgeAddr, "--data", data, "--dev-agent", "local",
		"--service", "agents=http://"+agentsAddr, "--service", "audit=http://"+auditAddr)
	s := mcpSession(t, "http://"+edgeAddr+"/mcp", &atomic.Int32{})

	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"agents_register", map[string]any{"agent_id": "research-bot", "confirm": true, "reason": "onboard the research bot"}},
		{"agents_register", map[string]any{"agent_id": "billing-bot", "confirm": true, "reason": "onboard the billing bot"}},
		{"agents_set_status", map[string]any{"agent_id": "billing-bot", "status": "AGENT_STATUS_RETIRED", "confirm": true, "reason": "billing moved"}},
	} {
		if env := callTool(t, s, c.tool, c.args); env.Status != "ok" {
			t.Fatalf("%s = %+v, want ok", c.tool, env)
		}
	}
	// Stopping the audit service signs a checkpoint of the last append
	// (unless the one after the append already did).
	auditProc.stop(t)

	verifyOffline := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"audit", "verify", "--data", data}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("toolmesh audit verify: %v", err)
		}
		return stdout.String() + stderr.String(), cmd.ProcessState.ExitCode()
	}
	if out, code := verifyOffline(); code != 0 || !strings.Contains(out, ": INTACT") || !strings.Contains(out, "the latest names record 3") {
		t.Fatalf("audit verify before tampering = exit %d:\n%s\nwant intact, checked against a checkpoint of record 3", code, out)
	}

	// The tamper, with the mesh stopped.
	db, err := sqldb.Open(t.Context(), filepath.Join(data, "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP TRIGGER audit_records_no_delete`,
		`DELETE FROM audit_records WHERE seq = 3`,
		`UPDATE audit_head SET seq = 2, hash = (SELECT hash FROM audit_records WHERE seq = 2) WHERE id = 1`,
	} {
		if _, err := db.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	out, code := verifyOffline()
	if code != exitNotIntact || !strings.Contains(out, ": NOT INTACT") || !strings.Contains(out, "record 3: truncated") ||
		!strings.Contains(out, "proof        the signed checkpoint at "+filepath.Join(data, "audit-checkpoints.log")) {
		t.Errorf("audit verify after the cut = exit %d:\n%s\nwant exit %d, record 3 truncated, with the proof", code, out, exitNotIntact)
	}
	t.Logf("toolmesh audit verify after the cut:\n%s", out)
	type result struct {
		Intact   bool `json:"intact"`
		FirstBad struct {
			Seq        string `json:"seq"`
			Problem    string `json:"problem"`
			Checkpoint struct {
				Seq  string `json:"seq"`
				Note string `json:"note"`
			} `json:"checkpoint"`
		} `json:"first_bad"`
	}
	out, code = verifyOffline("--json")
	var offline result
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &offline); err != nil || code != exitNotIntact {
		t.Fatalf("audit verify --json = exit %d, %v:\n%s", code, err, out)
	}
	if offline.Intact || offline.FirstBad.Seq != "3" || offline.FirstBad.Problem != "PROBLEM_TRUNCATED" || offline.FirstBad.Checkpoint.Seq != "3" {
		t.Errorf("audit verify --json = %+v, want record 3 truncated, proved by the checkpoint of record 3", offline)
	}

	// The restarted service refuses to sign the cut trail, and audit_verify
	// through the edge reports the cut.
	restarted := serveAudit()
	env := callTool(t, s, "audit_verify", map[string]any{})
	var online result
	if err := json.Unmarshal(env.Data, &online); err != nil || env.Status != "ok" {
		t.Fatalf("audit_verify = %+v, %v", env, err)
	}
	if online.Intact || online.FirstBad.Seq != "3" || online.FirstBad.Problem != "PROBLEM_TRUNCATED" || online.FirstBad.Checkpoint.Seq != "3" ||
		online.FirstBad.Checkpoint.Note != offline.FirstBad.Checkpoint.Note {
		t.Errorf("audit_verify = %s, want record 3 truncated, with the checkpoint audit verify showed", env.Data)
	}
	restarted.stop(t)
	if refused := restarted.logs.Events("audit.checkpoint_refused"); len(refused) == 0 {
		t.Errorf("the restarted audit service signed a checkpoint of the cut trail (no audit.checkpoint_refused):\n%s", restarted.logs)
	}
}
