//go:build faults

package faults

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// serviceProc is one `toolmesh serve <domain>` run by a test itself, outside
// `toolmesh up`, so that the test decides when it dies and restarts.
type serviceProc struct {
	domain, addr, data string
	args               []string // extra arguments of serve
	env                []string
	logs               *logtest.Buffer
	cmd                *exec.Cmd
	exited             chan struct{}
}

// newServiceProc prepares a service on a free port with its own data dir
// and mesh keys; start runs it.
func newServiceProc(t *testing.T, domain string, env []string, args ...string) *serviceProc {
	t.Helper()
	data := t.TempDir()
	if out, err := exec.Command(suite.bin, "keygen", "--data", data).CombinedOutput(); err != nil {
		t.Fatalf("toolmesh keygen: %v\n%s", err, out)
	}
	return &serviceProc{domain: domain, addr: porttest.Addr(t), data: data, args: args, env: env, logs: &logtest.Buffer{}}
}

func (s *serviceProc) url() string { return "http://" + s.addr }

// start runs the service and waits until /healthz answers 200.
func (s *serviceProc) start(t *testing.T) {
	t.Helper()
	args := append([]string{"serve", s.domain, "--addr", s.addr, "--data", s.data}, s.args...)
	s.cmd = exec.Command(suite.bin, args...)
	s.cmd.Env = append(os.Environ(), s.env...)
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	s.exited = exited
	cmd := s.cmd
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.url() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("serve %s exited at start:\n%s", s.domain, tail(s.logs.String()))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve %s not healthy after 30s:\n%s", s.domain, tail(s.logs.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signal sends sig and waits for the process to exit.
func (s *serviceProc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve %s did not exit after %v", s.domain, sig)
	}
}

// token mints a mesh token signed with the service's mesh key.
func (s *serviceProc) token(t *testing.T, agent string) string {
	t.Helper()
	out, err := exec.Command(suite.bin, "token", "--agent", agent, "--data", s.data).Output()
	if err != nil {
		t.Fatalf("toolmesh token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func (s *serviceProc) dbPath() string { return filepath.Join(s.data, s.domain+".db") }

// percentile returns the p-th percentile (0-100) of sorted values.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
