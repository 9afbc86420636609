package pgtest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestClusterServesIsolatedDatabasesAndStopsClean(t *testing.T) {
	SkipShort(t)
	c, err := start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	ctx := t.Context()

	var dsnA, dsnB string
	t.Run("databases", func(t *testing.T) {
		dsnA, dsnB = c.NewDatabase(t), c.NewDatabase(t)
		if dsnA == dsnB {
			t.Fatalf("two NewDatabase calls gave the same DSN %s", dsnA)
		}
		a, b := open(t, dsnA), open(t, dsnB)
		if _, err := a.ExecContext(ctx, `CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hello')`); err != nil {
			t.Fatal(err)
		}
		var body string
		if err := a.QueryRowContext(ctx, `SELECT body FROM notes`).Scan(&body); err != nil || body != "hello" {
			t.Fatalf("read back = %q, %v; want hello", body, err)
		}
		if _, err := b.ExecContext(ctx, `SELECT 1 FROM notes`); err == nil {
			t.Error("a table made in one test database is visible in another")
		}
		// Text sorts as in a dictionary, as on most production servers,
		// so suites catch stores that assume SQLite's bytewise order.
		var first string
		if err := a.QueryRowContext(ctx, `SELECT MIN(id) FROM (VALUES ('agent-b'), ('agent_c')) AS ids (id)`).Scan(&first); err != nil || first != "agent_c" {
			t.Errorf("the first of agent-b and agent_c = %q, %v; want agent_c, as an en-US collation sorts them", first, err)
		}
	})
	if err := ping(ctx, dsnA); err == nil {
		t.Errorf("database %s still accepts connections after its test ended", dsnA)
	}

	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if processAlive(c.proc.Pid) {
		t.Errorf("postmaster %d still runs after Stop", c.proc.Pid)
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster directory %s still exists after Stop (stat: %v)", c.dir, err)
	}
	if err := ping(ctx, c.dsn("postgres")); err == nil {
		t.Error("the server still accepts connections after Stop")
	}
}

// TestKilledTestProcessLeavesNoServer kills a test process that has a
// cluster running and checks that the server and all its backends go away
// with it, and that the next start removes the directory it left.
func TestKilledTestProcessLeavesNoServer(t *testing.T) {
	SkipShort(t)
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal that stops orphaned clusters is Linux-only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartThenWait$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), "PGTEST_HELPER=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	var pid int
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "ready %d %s", &pid, &dir); err == nil {
			break
		}
	}
	if pid == 0 {
		cmd.Process.Kill()
		t.Fatalf("helper did not report a running cluster (wait: %v)", cmd.Wait())
	}
	t.Cleanup(func() { // only matters when the test fails
		for _, p := range append(childrenOf(pid), pid) {
			if processAlive(p) {
				syscallKill(p)
			}
		}
		os.RemoveAll(dir)
	})
	backends := childrenOf(pid)
	if len(backends) == 0 {
		t.Fatalf("postmaster %d has no child processes; cannot check they stop", pid)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	procs := append(backends, pid)
	deadline := time.Now().Add(30 * time.Second)
	for anyAlive(procs) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range procs {
		if processAlive(p) {
			t.Errorf("postgres process %d outlived the killed test process", p)
		}
	}

	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("expected the killed process to leave %s behind: %v", dir, err)
	}
	sweepStale(filepath.Dir(dir))
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale cluster directory %s was not removed (stat: %v)", dir, err)
	}
}

// TestHelperStartThenWait is run by TestKilledTestProcessLeavesNoServer in a
// child process, which it kills.
func TestHelperStartThenWait(t *testing.T) {
	if os.Getenv("PGTEST_HELPER") != "1" {
		return
	}
	c := Start(t)
	db := open(t, c.NewDatabase(t)) // one client backend besides the server's own
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ready %d %s\n", c.proc.Pid, c.dir)
	time.Sleep(time.Minute)
}

func TestMissingBinariesFailWithAClearMessage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, _, err := findBinaries(filepath.Join(t.TempDir(), "*", "bin"))
	if err == nil {
		t.Fatal("findBinaries found server binaries on an empty PATH")
	}
	for _, want := range []string{"initdb", "postgres", "PATH", "PostgreSQL 15"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func ping(ctx context.Context, dsn string) error {
	db, err := sql.Open("pgx", dsn+"&connect_timeout=2")
	if err != nil {
		return err
	}
	defer db.Close()
	return db.PingContext(ctx)
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []int
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
			kids = append(kids, child)
		}
	}
	return kids
}

func anyAlive(pids []int) bool {
	for _, p := range pids {
		if processAlive(p) {
			return true
		}
	}
	return false
}

func syscallKill(pid int) {
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
}

func TestADurableClusterKeepsCommitsThroughAnImmediateStop(t *testing.T) {
	c := StartWith(t, Options{Durable: true})
	dsn := c.NewDatabase(t)
	db := open(t, dsn)
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, `CREATE TABLE acks (n INT)`); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := db.ExecContext(ctx, `INSERT INTO acks VALUES ($1)`, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.StopImmediate(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err == nil {
		t.Fatal("the server still answers after an immediate stop")
	}
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM acks`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 50 {
		t.Errorf("%d of 50 committed rows after the restart", n)
	}
}
