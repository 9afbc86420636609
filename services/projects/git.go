package projects

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/egress"
)

// Git clones the repositories of git projects into a directory of the
// mesh's, one directory per project, with the git command: a shallow clone
// of one branch or tag, refreshed before each health snapshot.
//
// The git command resolves names and connects by itself, so the egress
// guard is applied around it: the URL must be http or https without user
// info, its host must resolve only to allowed addresses, and git is told to
// connect to one of those addresses and nowhere else
// (http.curloptResolve), follows no redirect, uses no proxy, no credential
// helper and no configuration but what is given here. Symbolic links are
// checked out as plain files, so nothing in a clone leads outside it.
type Git struct {
	// Dir holds the clones.
	Dir string
	// Egress decides which addresses a clone may reach.
	Egress egress.Policy
	// Timeout bounds one clone or fetch.
	Timeout time.Duration
	// MaxBytes bounds a clone on disk: a larger one is deleted and refused.
	MaxBytes int64
	// Command is the git binary; "git" on PATH when empty.
	Command string

	versionOnce sync.Once
	versionErr  error
}

// ErrNoGit marks a mesh that cannot run git (not installed, or too old).
var ErrNoGit = errors.New("git is not available")

// ErrGitTimeout marks a clone or fetch that took longer than Git.Timeout.
var ErrGitTimeout = errors.New("took too long")

// minGit is the oldest git that honours http.curloptResolve.
var minGit = [2]int{2, 37}

// command returns the git binary, or ErrNoGit.
func (g *Git) command() (string, error) {
	name := g.Command
	if name == "" {
		name = "git"
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: the git command is not installed where the projects service runs", ErrNoGit)
	}
	g.versionOnce.Do(func() {
		out, err := exec.Command(bin, "version").Output()
		m := regexp.MustCompile(`git version (\d+)\.(\d+)`).FindSubmatch(out)
		if err != nil || m == nil {
			g.versionErr = fmt.Errorf("%w: `git version` did not answer", ErrNoGit)
			return
		}
		major, _ := strconv.Atoi(string(m[1]))
		minor, _ := strconv.Atoi(string(m[2]))
		if major < minGit[0] || major == minGit[0] && minor < minGit[1] {
			g.versionErr = fmt.Errorf("%w: git %d.%d is installed, %d.%d or newer is needed", ErrNoGit, major, minor, minGit[0], minGit[1])
		}
	})
	return bin, g.versionErr
}

// dir is the clone of a project.
func (g *Git) dir(projectID string) string { return filepath.Join(g.Dir, projectID) }

// Clone clones rawURL (its ref, or its default branch) as the code of
// projectID. An existing clone is kept.
func (g *Git) Clone(ctx context.Context, projectID, rawURL, ref string) error {
	if _, err := os.Stat(g.dir(projectID)); err == nil {
		return nil
	}
	if err := os.MkdirAll(g.Dir, 0o750); err != nil {
		return fmt.Errorf("clones directory: %w", err)
	}
	tmp, err := os.MkdirTemp(g.Dir, "."+projectID+"-")
	if err != nil {
		return fmt.Errorf("clones directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	args := []string{"clone", "--quiet", "--depth", "1", "--single-branch", "--no-tags"}
	if ref != "" {
		args = append(args, "--branch", ref)
	}
	if err := g.run(ctx, rawURL, "", append(args, "--", rawURL, tmp)...); err != nil {
		return err
	}
	if err := g.checkSize(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, g.dir(projectID)); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("keep the clone: %w", err)
	}
	return nil
}

// Refresh brings the clone of projectID to the newest commit of ref (or of
// the default branch), cloning it again if it is missing (a new disk).
func (g *Git) Refresh(ctx context.Context, projectID, rawURL, ref string) error {
	dir := g.dir(projectID)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return g.Clone(ctx, projectID, rawURL, ref)
	}
	what := ref
	if what == "" {
		what = "HEAD"
	}
	if err := g.run(ctx, rawURL, dir, "fetch", "--quiet", "--depth", "1", "--no-tags", "origin", what); err != nil {
		return err
	}
	if err := g.run(ctx, rawURL, dir, "reset", "--quiet", "--hard", "FETCH_HEAD"); err != nil {
		return err
	}
	return g.checkSize(dir)
}

// Open opens the clone of projectID for reading.
func (g *Git) Open(projectID string) (*os.Root, error) {
	base, err := os.OpenRoot(g.Dir)
	if err != nil {
		return nil, fmt.Errorf("clones directory: %w", err)
	}
	defer base.Close()
	return base.OpenRoot(projectID)
}

// Remove deletes the clone of projectID.
func (g *Git) Remove(projectID string) error { return os.RemoveAll(g.dir(projectID)) }

// run runs git with args in dir (none for a clone), its network access
// pinned to an allowed address of rawURL's host.
func (g *Git) run(ctx context.Context, rawURL, dir string, args ...string) error {
	bin, err := g.command()
	if err != nil {
		return err
	}
	pin, err := g.Egress.Pin(ctx, rawURL)
	if err != nil {
		return fmt.Errorf("git URL %s: %w", egress.Redact(rawURL), err)
	}
	addr := pin.Addr.String()
	if pin.Addr.Is6() {
		addr = "[" + addr + "]"
	}
	ctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	full := []string{
		"-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "protocol.http.allow=always",
		"-c", "http.followRedirects=false", "-c", "credential.helper=", "-c", "core.symlinks=false",
		"-c", "http.curloptResolve=" + pin.Host + ":" + pin.Port + ":" + addr,
	}
	if dir != "" {
		full = append(full, "-C", dir)
	}
	cmd := exec.CommandContext(ctx, bin, append(full, args...)...)
	cmd.Env = gitEnv(cmd.Environ())
	var stderr bytes.Buffer
	cmd.Stderr = &capped{w: &stderr, left: 8 << 10}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("git %s of %s %w (%s)", args[0], egress.Redact(rawURL), ErrGitTimeout, g.Timeout)
		}
		return fmt.Errorf("git %s of %s failed: %s", args[0], egress.Redact(rawURL), lastLine(stderr.String(), rawURL))
	}
	return nil
}

// gitEnv is the environment of a git command: the service's without its
// proxies and git settings, with git's own configuration files and
// prompts turned off.
func gitEnv(inherited []string) []string {
	out := make([]string, 0, len(inherited)+4)
	for _, kv := range inherited {
		name, _, _ := strings.Cut(kv, "=")
		switch upper := strings.ToUpper(name); {
		case strings.HasSuffix(upper, "_PROXY"), strings.HasPrefix(upper, "GIT_"):
			continue
		}
		out = append(out, kv)
	}
	return append(out, "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_ASKPASS=")
}

// lastLine is the last line git wrote, without the URL (which may carry a
// token in its query).
func lastLine(stderr, rawURL string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return "no message"
	}
	return strings.ReplaceAll(last, rawURL, egress.Redact(rawURL))
}

// checkSize deletes dir and refuses it when it holds more than MaxBytes.
func (g *Git) checkSize(dir string) error {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil && !d.IsDir() {
			total += info.Size()
		}
		if total > g.MaxBytes {
			return errTooLarge
		}
		return nil
	})
	if errors.Is(err, errTooLarge) {
		os.RemoveAll(dir)
		return fmt.Errorf("the repository is larger than the %d MiB a clone may take", g.MaxBytes>>20)
	}
	return err
}

var errTooLarge = errors.New("too large")

// capped writes at most left bytes to w and drops the rest.
type capped struct {
	w    *bytes.Buffer
	left int
}

func (c *capped) Write(p []byte) (int, error) {
	if n := min(len(p), c.left); n > 0 {
		c.w.Write(p[:n])
		c.left -= n
	}
	return len(p), nil
}
