package prototest_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
)

type recorder struct {
	testing.TB
	errors int
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }

func TestEqualReportsOnlyDifferences(t *testing.T) {
	r := &recorder{TB: t}
	prototest.Equal(r, "same", &tasksv1.Task{Id: "a"}, &tasksv1.Task{Id: "a"})
	if r.errors != 0 {
		t.Errorf("equal messages reported %d errors", r.errors)
	}
	prototest.Equal(r, "differ", &tasksv1.Task{Id: "a"}, &tasksv1.Task{Id: "b"})
	if r.errors != 1 {
		t.Errorf("different messages reported %d errors, want 1", r.errors)
	}
}

func TestIDsKeepOrder(t *testing.T) {
	got := prototest.IDs([]*tasksv1.Task{{Id: "b"}, {Id: "a"}})
	if !cmp.Equal(got, []string{"b", "a"}) {
		t.Errorf("IDs = %v, want [b a]", got)
	}
}
