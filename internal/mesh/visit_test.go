package mesh_test

import (
	"errors"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// TestVisitRequiredTravelsAsADetail: the error a service builds carries the
// visit through the wire form the edge reads, and a visit that breaks the
// contract's rules is refused on both sides.
func TestVisitRequiredTravelsAsADetail(t *testing.T) {
	v := &toolv1.VisitRequired{Url: "https://mesh.example/connect/v1", Message: "Link your account.", VisitId: "visit-1"}
	cerr := mesh.NewVisitRequiredError(v)
	if cerr.Code() != connect.CodeFailedPrecondition {
		t.Fatalf("code %v, want failed_precondition", cerr.Code())
	}
	// Through the wire: a fresh error with the same details, as a client reads it.
	wire := connect.NewWireError(cerr.Code(), errors.New(cerr.Message()))
	for _, d := range cerr.Details() {
		wire.AddDetail(d)
	}
	got, err := mesh.VisitRequired(wire)
	if err != nil || got.GetUrl() != v.GetUrl() || got.GetVisitId() != "visit-1" || got.GetMessage() != v.GetMessage() {
		t.Fatalf("VisitRequired = %v, %v", got, err)
	}
	if got, err := mesh.VisitRequired(connect.NewError(connect.CodeFailedPrecondition, errors.New("conflict"))); got != nil || err != nil {
		t.Errorf("a plain failed_precondition reads as a visit: %v, %v", got, err)
	}

	for name, bad := range map[string]*toolv1.VisitRequired{
		"javascript url":    {Url: "javascript:alert(1)", Message: "m", VisitId: "v"},
		"http not loopback": {Url: "http://mesh.example/connect", Message: "m", VisitId: "v"},
		"blank message":     {Url: "https://mesh.example/c", Message: "  ", VisitId: "v"},
		"bad id":            {Url: "https://mesh.example/c", Message: "m", VisitId: "a b"},
	} {
		if c := mesh.NewVisitRequiredError(bad); c.Code() != connect.CodeInternal {
			t.Errorf("%s: built with code %v, want internal", name, c.Code())
		}
		forged := connect.NewError(connect.CodeFailedPrecondition, errors.New("x"))
		d, _ := connect.NewErrorDetail(bad)
		forged.AddDetail(d)
		if got, err := mesh.VisitRequired(forged); got != nil || err == nil {
			t.Errorf("%s: read as %v, %v; want refused", name, got, err)
		}
	}
	for _, ok := range []string{"http://127.0.0.1:8080/connect", "http://localhost/x", "http://[::1]:1/"} {
		if c := mesh.NewVisitRequiredError(&toolv1.VisitRequired{Url: ok, Message: "m", VisitId: "v"}); c.Code() != connect.CodeFailedPrecondition {
			t.Errorf("%s refused: %v", ok, c)
		}
	}
}
