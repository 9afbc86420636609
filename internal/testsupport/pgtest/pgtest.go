// Package pgtest starts throwaway PostgreSQL clusters for tests.
//
// A cluster lives in a fresh temporary directory: initdb'd with trust
// authentication, fsync off, listening on 127.0.0.1 at a free port with its
// unix socket inside that directory. Each test gets its own database from
// NewDatabase. Stop shuts the server down and removes the directory.
//
// Text sorts as on a typical production server, not bytewise: the default
// collation is ICU's en-US, which ignores punctuation at first ("agent_c"
// before "agent-b"). A store that relies on SQLite's bytewise order fails its
// suite here rather than in production.
//
// The postmaster runs as a child of the test process (not daemonised by
// pg_ctl) so that the kernel stops it when the test process dies for any
// reason — a panic, a -timeout, SIGKILL — and no cluster outlives its tests.
// Directories left behind by killed test processes are removed by the next
// Start.
//
// Running as root, initdb and postgres run as the "postgres" system user,
// because initdb refuses to run as root. The server binaries are looked up
// on PATH and then in /usr/lib/postgresql/<version>/bin; when they are
// missing, Start fails the test: these tests are never skipped silently.
// The one exception is `go test -short` (make test-short), the fast lane
// that runs no PostgreSQL: there Start and Shared.NewDatabase skip the test
// and say why.
package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver

	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

const (
	// dirPrefix names the temporary directories, so stale ones can be found.
	dirPrefix = "pgtest-"
	// ownerFile holds the pid of the test process that made the directory.
	ownerFile = "owner.pid"
	// superuser is the cluster's superuser; trust authentication, no password.
	superuser = "postgres"
	// runAsUser runs the cluster when the tests run as root.
	runAsUser = "postgres"

	startTimeout = time.Minute
	stopTimeout  = 15 * time.Second
)

// fallbackBinGlob is searched, newest version first, when the server
// binaries are not on PATH (Debian and Ubuntu install them there).
const fallbackBinGlob = "/usr/lib/postgresql/*/bin"

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	dir      string // temporary directory: data/, the socket, postgres.log
	port     int
	postgres string // the server binary
	runAs    *account
	durable  bool
	proc     *os.Process // the postmaster
	admin    *sql.DB

	exited  chan struct{} // closed when the postmaster has exited
	waitErr error         // the postmaster's exit status, set before exited closes

	dbs      atomic.Int64
	stopOnce sync.Once
	stopErr  error
}

// Start starts a cluster for tb and stops it, removing its files, when tb
// and its subtests finish. It fails tb when the cluster cannot start.
func Start(tb testing.TB) *Cluster {
	tb.Helper()
	return StartWith(tb, Options{})
}

// Options tune a cluster.
type Options struct {
	// Durable keeps PostgreSQL's durability settings (fsync,
	// synchronous_commit, full_page_writes on), for tests that crash the
	// server and count what survived; other clusters turn them off for
	// speed.
	Durable bool
}

// StartWith starts a cluster as Start does, tuned by opts.
func StartWith(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	SkipShort(tb)
	c, err := start(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return c
}

// Shared is one cluster for a whole test binary: the first NewDatabase
// starts it and Run stops it after the last test. Use it when several
// top-level tests need PostgreSQL:
//
//	var pg pgtest.Shared
//
//	func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }
//
//	func TestX(t *testing.T) { dsn := pg.NewDatabase(t); ... }
type Shared struct {
	running bool
	once    sync.Once
	c       *Cluster
	err     error
}

// Run runs the tests and then stops the cluster if one was started. It
// returns the exit code for os.Exit, failing when the cluster did not stop
// cleanly.
func (s *Shared) Run(m *testing.M) int {
	s.running = true
	code := m.Run()
	if s.c != nil {
		if err := s.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// NewDatabase starts the shared cluster if needed and returns the DSN of a
// new, empty database for tb (see Cluster.NewDatabase).
func (s *Shared) NewDatabase(tb testing.TB) string {
	tb.Helper()
	SkipShort(tb)
	if !s.running {
		tb.Fatal("pgtest: Shared.NewDatabase called outside Shared.Run; call os.Exit(pg.Run(m)) from TestMain so the cluster is stopped")
	}
	s.once.Do(func() { s.c, s.err = start(Options{}) })
	if s.err != nil {
		tb.Fatal(s.err)
	}
	return s.c.NewDatabase(tb)
}

// SkipShort skips tb under -short, the fast lane that runs no PostgreSQL.
func SkipShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs PostgreSQL, which -short does not start (make test runs it)")
	}
}

// NewDatabase creates an empty database for tb and returns its
// postgres:// DSN; the database is dropped when tb finishes.
func (c *Cluster) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := fmt.Sprintf("t%d_%s", c.dbs.Add(1), strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(tb.Name())))
	if len(name) > 63 { // NAMEDATALEN - 1
		name = name[:63]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// FILE_COPY copies the small template's files; PostgreSQL 15's default,
	// WAL_LOG, writes them through the WAL too and takes about twice as long,
	// which suites that make a database per test notice.
	if _, err := c.admin.ExecContext(ctx, `CREATE DATABASE "`+name+`" STRATEGY FILE_COPY`); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.admin.ExecContext(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return c.dsn(name)
}

func (c *Cluster) dsn(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.port, database)
}

// Stop shuts the server down (fast shutdown, then immediate, then SIGKILL)
// and removes the cluster's directory. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		if c.admin != nil {
			c.admin.Close()
		}
		c.stopErr = c.stopServer()
		if err := os.RemoveAll(c.dir); err != nil && c.stopErr == nil {
			c.stopErr = fmt.Errorf("pgtest: remove %s: %w", c.dir, err)
		}
	})
	return c.stopErr
}

func (c *Cluster) stopServer() error {
	if c.exited == nil {
		return nil
	}
	for _, step := range []struct {
		sig  os.Signal
		wait time.Duration
	}{
		{syscall.SIGINT, stopTimeout},      // fast shutdown
		{syscall.SIGQUIT, 5 * time.Second}, // immediate shutdown
		{syscall.SIGKILL, 5 * time.Second},
	} {
		select {
		case <-c.exited:
			return nil
		default:
		}
		if err := c.proc.Signal(step.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("pgtest: signal postgres (pid %d): %w", c.proc.Pid, err)
		}
		select {
		case <-c.exited:
			if step.sig != syscall.SIGINT {
				return fmt.Errorf("pgtest: postgres (pid %d) ignored a fast shutdown and was stopped with %v", c.proc.Pid, step.sig)
			}
			return nil
		case <-time.After(step.wait):
		}
	}
	return fmt.Errorf("pgtest: postgres (pid %d) did not exit", c.proc.Pid)
}

// StopImmediate stops the server as a crash would: `pg_ctl stop -m
// immediate` (no checkpoint; the next start replays the WAL). Restart
// starts it again.
func (c *Cluster) StopImmediate() error {
	pgCtl := filepath.Join(filepath.Dir(c.postgres), "pg_ctl")
	cmd := exec.Command(pgCtl, "stop", "-m", "immediate", "-w", "-D", filepath.Join(c.dir, "data"))
	cmd.Dir, cmd.Env, cmd.SysProcAttr = c.dir, childEnv(c.dir), procAttr(c.runAs, false)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", pgCtl, err, out)
	}
	select {
	case <-c.exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("pgtest: postgres (pid %d) did not exit after an immediate shutdown", c.proc.Pid)
	}
}

// Restart starts a stopped server again, on the same port and data.
func (c *Cluster) Restart() error {
	if c.admin != nil {
		c.admin.Close()
		c.admin = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return c.startServer(ctx, c.port)
}

// start makes, initialises and starts a cluster.
func start(opts Options) (c *Cluster, err error) {
	initdb, postgres, err := findBinaries(fallbackBinGlob)
	if err != nil {
		return nil, err
	}
	var runAs *account
	if os.Geteuid() == 0 {
		if runAs, err = lookupAccount(runAsUser); err != nil {
			return nil, fmt.Errorf("pgtest: running as root, and initdb refuses root, so the cluster runs as the %q system user: %w", runAsUser, err)
		}
	}
	base := os.TempDir()
	if runAs != nil {
		if err := runAs.canReach(base); err != nil {
			return nil, fmt.Errorf("pgtest: the cluster runs as user %q, which cannot reach the temporary directory; point TMPDIR at a world-searchable directory such as /tmp: %w", runAsUser, err)
		}
	}
	sweepStale(base)
	dir, err := os.MkdirTemp(base, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	c = &Cluster{dir: dir, postgres: postgres, runAs: runAs, durable: opts.Durable}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if runAs != nil {
		if err := os.Chown(dir, runAs.uid, runAs.gid); err != nil {
			return nil, fmt.Errorf("pgtest: give %s to user %s: %w", dir, runAsUser, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	data := filepath.Join(dir, "data")
	cmd := exec.CommandContext(ctx, initdb, "--pgdata", data, "--username", superuser, "--auth", "trust",
		"--encoding", "UTF8", "--locale", "C", "--locale-provider", "icu", "--icu-locale", "en-US",
		"--no-sync", "--no-instructions")
	cmd.Dir, cmd.Env, cmd.SysProcAttr = dir, childEnv(dir), procAttr(runAs, false)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: %s: %w\n%s", initdb, err, out)
	}

	// The free port can be taken by someone else before postgres binds it;
	// then try another.
	for attempt := 1; ; attempt++ {
		err := c.startServer(ctx, 0)
		if err == nil || !errors.Is(err, errPortTaken) {
			return c, err
		}
		if attempt == 3 {
			return c, fmt.Errorf("pgtest: postgres found no free port in %d tries: %w", attempt, err)
		}
	}
}

var errPortTaken = errors.New("port taken")

// startServer starts the postmaster on port (a free one when 0).
func (c *Cluster) startServer(ctx context.Context, port int) error {
	postgres, data, runAs := c.postgres, filepath.Join(c.dir, "data"), c.runAs
	// A restart keeps the log of the runs before it.
	logFlags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if port == 0 {
		var err error
		if port, err = porttest.Port(); err != nil {
			return err
		}
		logFlags |= os.O_TRUNC
	}
	logPath := filepath.Join(c.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, logFlags, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer logFile.Close() // the child has its own copy
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-h", "127.0.0.1", "-k", c.dir}
	// Fast and quiet: durability is pointless for a database that is
	// thrown away, unless the test is about durability.
	if !c.durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, s := range []string{
		"wal_level=minimal",
		"max_wal_senders=0",
		"autovacuum=off",
		"shared_buffers=32MB",
		"max_connections=200",
		"logging_collector=off",
		"TimeZone=UTC",
	} {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(postgres, args...)
	cmd.Dir, cmd.Env, cmd.SysProcAttr = c.dir, childEnv(c.dir), procAttr(runAs, true)
	cmd.Stdout, cmd.Stderr = logFile, logFile

	// The kernel signals the postmaster when the thread that started it
	// exits (Pdeathsig), so start it from a locked thread that lives exactly
	// as long as the postmaster: it waits for it.
	exited, started := make(chan struct{}), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.waitErr = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pgtest: start %s: %w", postgres, err)
	}
	c.port, c.proc, c.exited = port, cmd.Process, exited

	admin, err := sql.Open("pgx", c.dsn("postgres")+"&connect_timeout=5")
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := admin.PingContext(pctx)
		cancel()
		if err == nil {
			c.admin = admin
			return nil
		}
		select {
		case <-exited:
			admin.Close()
			log := tail(logPath)
			if strings.Contains(log, "could not bind") || strings.Contains(log, "Address already in use") {
				return errPortTaken
			}
			return fmt.Errorf("pgtest: postgres exited during start (%v):\n%s", c.waitErr, log)
		case <-ctx.Done():
			admin.Close()
			return fmt.Errorf("pgtest: postgres not ready after %v (%v):\n%s", startTimeout, err, tail(logPath))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// findBinaries returns the paths of initdb and postgres, from PATH or else
// from the newest directory matching fallbackGlob.
func findBinaries(fallbackGlob string) (initdb, postgres string, err error) {
	initdb, err1 := exec.LookPath("initdb")
	postgres, err2 := exec.LookPath("postgres")
	if err1 == nil && err2 == nil {
		return initdb, postgres, nil
	}
	dirs, _ := filepath.Glob(fallbackGlob)
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isExecutable(i) && isExecutable(p) {
			return i, p, nil
		}
	}
	return "", "", fmt.Errorf("pgtest: the PostgreSQL server binaries (initdb, postgres) are not on PATH nor in %s; "+
		"these tests need a local PostgreSQL 15 (Debian/Ubuntu: apt-get install postgresql-15): %w", fallbackGlob, errors.Join(err1, err2))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// account is a system user to run the cluster as.
type account struct{ uid, gid int }

func lookupAccount(name string) (*account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("uid of %s: %w", name, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("gid of %s: %w", name, err)
	}
	return &account{uid: uid, gid: gid}, nil
}

// childEnv is the whole environment of initdb and postgres: nothing of the
// test's environment (PGDATA, PGPORT, an uninstalled LANG) leaks in.
func childEnv(dir string) []string {
	return []string{"LC_ALL=C", "TZ=UTC", "HOME=" + dir, "PATH=/usr/bin:/bin"}
}

// tail returns the end of the server log, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// sweepStale removes the directories of clusters whose test process is gone
// (killed before it could clean up) and whose postmaster has exited.
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, d := range dirs {
		if owner := readPID(filepath.Join(d, ownerFile)); owner <= 0 || processAlive(owner) {
			continue // still in use, or not ours to judge
		}
		if pm := readPID(filepath.Join(d, "data", "postmaster.pid")); pm > 0 && processAlive(pm) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}

// readPID reads the pid on the first line of path, or returns 0.
func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}
