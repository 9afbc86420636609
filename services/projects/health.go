package projects

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// DefaultTrendDays is the window of projects_health_trends without days.
const DefaultTrendDays = 30

// maxSamples bounds the samples of one metric trend.
const maxSamples = 400

// VetTimeout bounds one go vet run.
const VetTimeout = 2 * time.Minute

// RecordHealth implements ProjectsService.RecordHealth.
func (s *Service) RecordHealth(ctx context.Context, req *projectsv1.RecordHealthRequest) (*projectsv1.RecordHealthResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	p, err := s.store.Lookup(ctx, req.GetProjectId())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("project %s not found", req.GetProjectId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read project: %w", err))
	}
	res := &projectsv1.RecordHealthResponse{Status: p.GetStatus(), NextAfter: durationpb.New(s.cfg.HealthInterval)}
	if p.GetStatus() != projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE {
		return res, nil
	}
	if res.Snapshot, err = s.store.Snapshot(ctx, p.GetId(), req.GetKey()); err == nil {
		return res, nil // a retry: the snapshot was taken
	} else if !errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read snapshot: %w", err))
	}
	if p.GetGitUrl() != "" && s.cfg.Git != nil {
		unlock := s.lock(p.GetId())
		err := s.cfg.Git.Refresh(ctx, p.GetId(), p.GetGitUrl(), p.GetGitRef())
		unlock()
		if err != nil {
			// The snapshot is of the clone as it is.
			s.log.Warn("projects.refresh_failed", "project", p.GetId(), "error", err.Error())
		}
	}
	ix, err := s.index(ctx, p, time.Now().Add(s.cfg.Limits.Timeout))
	if err != nil {
		return nil, err
	}
	defer ix.close()
	h := &projectsv1.HealthSnapshot{ProjectId: p.GetId(), TakeTime: timestamppb.New(s.cfg.Now().UTC().Truncate(time.Millisecond)), Truncated: ix.report.GetTruncated()}
	for _, f := range ix.files {
		h.Files++
		h.Lines += int64(f.Lines)
		h.Symbols += int64(f.Symbols)
		h.Todos += int64(f.Todos)
		h.Fixmes += int64(f.Fixmes)
		if f.Test {
			h.TestFiles++
		}
	}
	h.GoVetFindings, h.GoVetMissing = s.vet(ctx, p, ix.root)
	if res.Snapshot, _, err = s.store.AddSnapshot(ctx, h, req.GetKey()); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("store snapshot: %w", err))
	}
	return res, nil
}

// dir is where a project's code is on disk, for commands run in it.
func (s *Service) dir(p *projectsv1.Project) string {
	if p.GetGitUrl() != "" {
		return s.cfg.Git.dir(p.GetId())
	}
	return filepath.Join(s.cfg.Base.Dir(), filepath.FromSlash(p.GetPath()))
}

// vet runs go vet over a Go module's packages and counts its findings, or
// says why it could not. go vet runs offline (no module download, no
// toolchain switch) and without cgo, so the mesh's C compiler never sees
// the project's code.
func (s *Service) vet(ctx context.Context, p *projectsv1.Project, root *os.Root) (*int64, string) {
	if _, err := root.Stat("go.mod"); err != nil {
		return nil, "not a Go module: the code root has no go.mod"
	}
	bin, err := exec.LookPath(s.cfg.GoCommand)
	if err != nil {
		return nil, "the go command is not installed where the projects service runs"
	}
	dir := s.dir(p)
	if real, err := filepath.EvalSymlinks(dir); err != nil || p.GetGitUrl() == "" && !s.cfg.Base.contains(real) {
		return nil, "the code root is not readable"
	}
	ctx, cancel := context.WithTimeout(ctx, VetTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "vet", "-json", "./...")
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off", "CGO_ENABLED=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &capped{w: &stdout, left: 16 << 20}, &capped{w: &stderr, left: 8 << 10}
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Sprintf("go vet took longer than %s", VetTimeout)
	}
	if runErr != nil {
		return nil, "go vet could not check every package: " + firstLines(stderr.String(), 3)
	}
	n, err := countVetFindings(stdout.Bytes())
	if err != nil {
		return nil, "go vet's output did not read: " + err.Error()
	}
	return &n, ""
}

// contains reports whether real (resolved, absolute) is inside the base.
func (b Base) contains(real string) bool {
	_, err := b.inside(real)
	return err == nil
}

// countVetFindings counts the diagnostics in go vet -json's output: a
// stream of {"package": {"analyzer": [diagnostic, ...]}} objects (an
// analyzer that failed has {"error": ...} instead).
func countVetFindings(out []byte) (int64, error) {
	dec := json.NewDecoder(bytes.NewReader(out))
	var n int64
	for {
		var pkgs map[string]map[string]json.RawMessage
		err := dec.Decode(&pkgs)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		for pkg, analyzers := range pkgs {
			for name, raw := range analyzers {
				var diags []json.RawMessage
				if err := json.Unmarshal(raw, &diags); err != nil {
					return 0, fmt.Errorf("analyzer %s failed on %s", name, pkg)
				}
				n += int64(len(diags))
			}
		}
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return clipText(strings.Join(lines[:min(n, len(lines))], "; "), 500)
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// HealthTrends implements ProjectsService.HealthTrends.
func (s *Service) HealthTrends(ctx context.Context, req *projectsv1.HealthTrendsRequest) (*projectsv1.HealthTrendsResponse, error) {
	p, err := s.own(ctx, req.GetProjectId())
	if err != nil {
		return nil, err
	}
	days := req.GetDays()
	if days == 0 {
		days = DefaultTrendDays
	}
	snaps, err := s.store.Snapshots(ctx, p.GetId(), s.cfg.Now().Add(-time.Duration(days)*24*time.Hour))
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read snapshots: %w", err))
	}
	res := &projectsv1.HealthTrendsResponse{ProjectId: p.GetId(), Days: days, Snapshots: int32(len(snaps))}
	if len(snaps) > 0 {
		res.Latest = snaps[len(snaps)-1]
	}
	for _, m := range []projectsv1.Metric{
		projectsv1.Metric_METRIC_FILES, projectsv1.Metric_METRIC_LINES, projectsv1.Metric_METRIC_SYMBOLS, projectsv1.Metric_METRIC_TODOS,
		projectsv1.Metric_METRIC_FIXMES, projectsv1.Metric_METRIC_TEST_FILES, projectsv1.Metric_METRIC_GO_VET_FINDINGS,
	} {
		res.Metrics = append(res.Metrics, Trend(m, snaps))
	}
	return res, nil
}

// Trend is how metric m moved over snaps (oldest first).
func Trend(m projectsv1.Metric, snaps []*projectsv1.HealthSnapshot) *projectsv1.MetricTrend {
	t := &projectsv1.MetricTrend{Metric: m}
	var samples []*projectsv1.Sample
	for _, h := range snaps {
		v, ok, why := value(m, h)
		if !ok {
			t.MissingReason = why
			continue
		}
		samples = append(samples, &projectsv1.Sample{Time: h.GetTakeTime(), Value: v})
	}
	if len(snaps) == 0 {
		t.MissingReason = "no snapshot in the window yet: the first is taken when the project is created"
	}
	if len(samples) == 0 {
		return t
	}
	t.Measured, t.MissingReason = true, ""
	t.First, t.Last = samples[0].GetValue(), samples[len(samples)-1].GetValue()
	t.Min, t.Max = t.First, t.First
	for _, s := range samples {
		t.Min, t.Max = min(t.Min, s.GetValue()), max(t.Max, s.GetValue())
	}
	t.Change = t.Last - t.First
	switch {
	case t.Change > 0:
		t.Direction = projectsv1.Direction_DIRECTION_UP
	case t.Change < 0:
		t.Direction = projectsv1.Direction_DIRECTION_DOWN
	default:
		t.Direction = projectsv1.Direction_DIRECTION_FLAT
	}
	t.Samples = spread(samples, maxSamples)
	return t
}

// value is metric m in snapshot h; ok false (with why) when h did not
// measure it.
func value(m projectsv1.Metric, h *projectsv1.HealthSnapshot) (v int64, ok bool, why string) {
	switch m {
	case projectsv1.Metric_METRIC_FILES:
		return h.GetFiles(), true, ""
	case projectsv1.Metric_METRIC_LINES:
		return h.GetLines(), true, ""
	case projectsv1.Metric_METRIC_SYMBOLS:
		return h.GetSymbols(), true, ""
	case projectsv1.Metric_METRIC_TODOS:
		return h.GetTodos(), true, ""
	case projectsv1.Metric_METRIC_FIXMES:
		return h.GetFixmes(), true, ""
	case projectsv1.Metric_METRIC_TEST_FILES:
		return h.GetTestFiles(), true, ""
	case projectsv1.Metric_METRIC_GO_VET_FINDINGS:
		if h.GoVetFindings == nil {
			return 0, false, h.GetGoVetMissing()
		}
		return h.GetGoVetFindings(), true, ""
	}
	return 0, false, "unknown metric"
}

// spread keeps at most n samples, evenly spread, the first and the last
// always among them.
func spread(samples []*projectsv1.Sample, n int) []*projectsv1.Sample {
	if len(samples) <= n {
		return samples
	}
	out := make([]*projectsv1.Sample, 0, n)
	for i := range n {
		out = append(out, samples[i*(len(samples)-1)/(n-1)])
	}
	return out
}
