package projects_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/services/projects"
)

// vetIssue is a Go file go vet finds one problem in.
const vetIssue = "package main\n\nimport \"fmt\"\n\nfunc report() { fmt.Printf(\"%d\\n\", \"not a number\") }\n"

func TestHealthSnapshotsAndTrends(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go vet needs the go command")
	}
	f := start(t, projects.Config{HealthInterval: 12 * time.Hour})
	p := f.create(t, agentA, "shop", "gomod")
	f.write(t, "gomod/report.go", vetIssue)
	record := func(key string) *projectsv1.RecordHealthResponse {
		t.Helper()
		res, err := f.client.RecordHealth(asWorker(), &projectsv1.RecordHealthRequest{ProjectId: p.GetId(), Key: key})
		if err != nil {
			t.Fatalf("RecordHealth(%s): %v", key, err)
		}
		return res
	}
	first := record("day-1")
	one := int64(1)
	want := &projectsv1.HealthSnapshot{
		ProjectId: p.GetId(), TakeTime: timestamppb.New(f.now.Now()),
		// main.go, report.go, shop/shop.go, shop/shop_test.go; the FIXME in
		// main.go; the printf in report.go.
		Files: 4, Lines: 18 + 5 + 38 + 14, Symbols: 1 + 1 + 9 + 1, Todos: 0, Fixmes: 1, TestFiles: 1, GoVetFindings: &one,
	}
	if diff := cmp.Diff(want, first.GetSnapshot(), protocmp.Transform()); diff != "" {
		t.Errorf("first snapshot (-want +got):\n%s", diff)
	}
	if first.GetStatus() != projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE || first.GetNextAfter().AsDuration() != 12*time.Hour {
		t.Errorf("status %v, next after %v; want active, 12h", first.GetStatus(), first.GetNextAfter().AsDuration())
	}
	// A retried activity takes no second snapshot, whatever changed.
	f.write(t, "gomod/report.go", "package main\n\n// TODO: report\n// TODO: more\nfunc report() {}\n")
	if again := record("day-1"); cmp.Diff(first.GetSnapshot(), again.GetSnapshot(), protocmp.Transform()) != "" {
		t.Errorf("a retry took another snapshot: %v", again.GetSnapshot())
	}
	f.now.Add(24 * time.Hour)
	second := record("day-2").GetSnapshot()
	if second.GetTodos() != 2 || second.GetGoVetFindings() != 0 || second.GoVetFindings == nil {
		t.Errorf("second snapshot: %v, want 2 TODOs and no vet finding", second)
	}

	trends, err := f.client.HealthTrends(as(agentA), &projectsv1.HealthTrendsRequest{ProjectId: p.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if trends.GetDays() != 30 || trends.GetSnapshots() != 2 || cmp.Diff(second, trends.GetLatest(), protocmp.Transform()) != "" {
		t.Errorf("trends over %d days of %d snapshots, latest %v", trends.GetDays(), trends.GetSnapshots(), trends.GetLatest())
	}
	byMetric := map[projectsv1.Metric]*projectsv1.MetricTrend{}
	for _, m := range trends.GetMetrics() {
		byMetric[m.GetMetric()] = m
	}
	up, down, flat := projectsv1.Direction_DIRECTION_UP, projectsv1.Direction_DIRECTION_DOWN, projectsv1.Direction_DIRECTION_FLAT
	for m, w := range map[projectsv1.Metric]struct {
		first, last int64
		dir         projectsv1.Direction
	}{
		projectsv1.Metric_METRIC_FILES:           {4, 4, flat},
		projectsv1.Metric_METRIC_TODOS:           {0, 2, up},
		projectsv1.Metric_METRIC_GO_VET_FINDINGS: {1, 0, down},
		projectsv1.Metric_METRIC_TEST_FILES:      {1, 1, flat},
	} {
		got := byMetric[m]
		if !got.GetMeasured() || got.GetFirst() != w.first || got.GetLast() != w.last || got.GetChange() != w.last-w.first ||
			got.GetDirection() != w.dir || len(got.GetSamples()) != 2 {
			t.Errorf("%v: %v, want %d to %d, %v, 2 samples", m, got, w.first, w.last, w.dir)
		}
	}
	if len(trends.GetMetrics()) != 7 {
		t.Errorf("%d metrics, want 7", len(trends.GetMetrics()))
	}

	// A day's window three days later has no snapshot.
	f.now.Add(72 * time.Hour)
	empty, err := f.client.HealthTrends(as(agentA), &projectsv1.HealthTrendsRequest{ProjectId: p.GetId(), Days: 1})
	if err != nil {
		t.Fatal(err)
	}
	if empty.GetSnapshots() != 0 || empty.GetMetrics()[0].GetMeasured() || empty.GetMetrics()[0].GetMissingReason() == "" {
		t.Errorf("an empty window: %v, want no snapshot and metrics not measured, with why", empty)
	}

	// An archived project takes no snapshot; the workflow learns it.
	if _, err := f.client.Archive(as(agentA), &projectsv1.ArchiveRequest{ProjectId: p.GetId()}); err != nil {
		t.Fatal(err)
	}
	if res := record("day-6"); res.GetStatus() != projectsv1.ProjectStatus_PROJECT_STATUS_ARCHIVED || res.GetSnapshot() != nil {
		t.Errorf("RecordHealth of an archived project: %v, want archived and no snapshot", res)
	}
}

// Without a go command, or a go.mod, go vet is reported missing with why.
func TestGoVetMissing(t *testing.T) {
	f := start(t, projects.Config{GoCommand: "no-such-go-command"})
	for _, tc := range []struct{ name, path, why string }{
		{"shop", "gomod", "the go command is not installed where the projects service runs"},
		{"py", "py", "not a Go module: the code root has no go.mod"},
	} {
		p := f.create(t, agentA, tc.name, tc.path)
		res, err := f.client.RecordHealth(asWorker(), &projectsv1.RecordHealthRequest{ProjectId: p.GetId(), Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if s := res.GetSnapshot(); s.GoVetFindings != nil || s.GetGoVetMissing() != tc.why || s.GetFiles() == 0 {
			t.Errorf("%s: %v, want go vet missing because %q, and the other metrics", tc.name, s, tc.why)
		}
		trends, err := f.client.HealthTrends(as(agentA), &projectsv1.HealthTrendsRequest{ProjectId: p.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		vet := trends.GetMetrics()[6]
		if vet.GetMetric() != projectsv1.Metric_METRIC_GO_VET_FINDINGS || vet.GetMeasured() || vet.GetMissingReason() != tc.why {
			t.Errorf("%s: go vet trend %v, want missing because %q", tc.name, vet, tc.why)
		}
	}
}

func TestTrendKeepsAtMost400EvenlySpreadSamples(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var snaps []*projectsv1.HealthSnapshot
	for i := range 1000 {
		snaps = append(snaps, &projectsv1.HealthSnapshot{TakeTime: timestamppb.New(start.Add(time.Duration(i) * time.Hour)), Lines: int64(1000 - i)})
	}
	tr := projects.Trend(projectsv1.Metric_METRIC_LINES, snaps)
	s := tr.GetSamples()
	if len(s) != 400 || s[0].GetValue() != 1000 || s[399].GetValue() != 1 || tr.GetMin() != 1 || tr.GetMax() != 1000 || tr.GetChange() != -999 {
		t.Errorf("trend of 1000 snapshots: %d samples from %d to %d, min %d max %d change %d", len(s), s[0].GetValue(), s[len(s)-1].GetValue(), tr.GetMin(), tr.GetMax(), tr.GetChange())
	}
	for i := 1; i < len(s); i++ {
		if gap := s[i].GetTime().AsTime().Sub(s[i-1].GetTime().AsTime()); gap < 2*time.Hour || gap > 3*time.Hour {
			t.Fatalf("samples %d and %d are %s apart, want them evenly spread", i-1, i, gap)
		}
	}
}
