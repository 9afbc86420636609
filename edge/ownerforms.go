package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// PathOwnerForms prefixes the owner's forms: the RPCs a contract marks
// toolmesh.tool.v1.owner_form, served at PathOwnerForms + their Connect
// procedure ("/owner/toolmesh.connections.v1.ConnectionsService/LinkToken").
const PathOwnerForms = "/owner"

// maxOwnerFormBytes bounds an owner's form request.
const maxOwnerFormBytes = 64 << 10

// ownerForms serves the owner's forms: RPCs that are never tools, because
// they carry what no tool argument may (a token the owner pastes in the
// console). A request is authenticated as an MCP request is, must come
// from a caller with the owner role and not from a browser page, and is
// forwarded as it came (the Connect protocol, JSON or binary) to the
// service with the owner's mesh token; the service validates it. Nothing
// of its body is logged, audited or kept.
type ownerForms struct {
	forms    map[string]toolcatalog.OwnerForm
	guard    *httpguard.Guard
	auth     *identity.Authenticator // nil in development mode
	dev      *identity.Principal     // the local owner in development mode
	mesh     *mesh.Signer
	services map[string]string
	http     *http.Client
	timeout  time.Duration
	log      *slog.Logger
}

func newOwnerForms(e *Edge) (*ownerForms, error) {
	forms, err := toolcatalog.OwnerForms(e.cfg.Contracts)
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	return &ownerForms{forms: forms, guard: e.guard, auth: e.auth, dev: e.dev, mesh: e.cfg.Mesh, services: e.cfg.Services,
		http: e.cfg.HTTPClient, timeout: e.cfg.CallTimeout, log: e.log}, nil
}

func (o *ownerForms) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !o.guard.HostAllowed(r) {
		o.guard.RejectHost(w, r)
		return
	}
	if r.Header.Get("Origin") != "" {
		// The console sends its forms from its server; a page in a
		// browser never may.
		o.log.WarnContext(r.Context(), "edge.request_rejected", "reason", "owner_form_from_browser")
		writeConnectError(w, connect.CodePermissionDenied, "an owner's form is sent by the console's server, never by a browser page")
		return
	}
	proc := strings.TrimPrefix(r.URL.Path, PathOwnerForms)
	form, ok := o.forms[proc]
	if !ok || r.Method != http.MethodPost {
		writeConnectError(w, connect.CodeUnimplemented, "no owner's form "+proc)
		return
	}
	var caller *identity.Principal
	switch {
	case o.auth != nil:
		p, _, fail := o.auth.Authenticate(r)
		if fail != nil {
			writeConnectError(w, connect.CodeUnauthenticated, fail.Reason)
			return
		}
		caller = p
	case o.guard.Loopback(r):
		caller = o.dev
	default:
		writeConnectError(w, connect.CodePermissionDenied, "this edge runs without authentication and serves loopback clients only")
		return
	}
	c := caller.Caller()
	if !c.HasRole(mesh.RoleOwner) {
		o.log.WarnContext(r.Context(), "edge.owner_form_refused", "form", proc, "subject", c.Subject, "agent", c.Agent)
		writeConnectError(w, connect.CodePermissionDenied, "only the owner sends "+string(form.Method.Name()))
		return
	}
	ct := r.Header.Get("Content-Type")
	if ct != "application/json" && ct != "application/proto" {
		writeConnectError(w, connect.CodeInvalidArgument, "an owner's form is a Connect unary request (application/json or application/proto)")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxOwnerFormBytes))
	if err != nil {
		writeConnectError(w, connect.CodeInvalidArgument, fmt.Sprintf("the request body could not be read (at most %d bytes)", maxOwnerFormBytes))
		return
	}
	base := o.services[form.Service]
	if base == "" {
		writeConnectError(w, connect.CodeUnimplemented, "service "+form.Service+" is not configured on this edge")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), o.timeout)
	defer cancel()
	now := time.Now()
	deadline, _ := ctx.Deadline()
	token, err := o.mesh.Mint(c, now, deadline)
	if err != nil {
		writeConnectError(w, connect.CodeInternal, "the mesh token could not be minted")
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+proc, bytes.NewReader(body))
	if err != nil {
		writeConnectError(w, connect.CodeInternal, "the request could not be forwarded")
		return
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Connect-Protocol-Version", "1")
	mesh.SetHeaders(req.Header, token, "")
	res, err := o.http.Do(req)
	if err != nil {
		code := connect.CodeUnavailable
		if errors.Is(err, context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		writeConnectError(w, code, "the "+form.Service+" service did not answer; send it again")
		return
	}
	defer res.Body.Close()
	o.log.InfoContext(r.Context(), "edge.owner_form", "form", proc, "subject", c.Subject, "status", res.StatusCode)
	w.Header().Set("Content-Type", res.Header.Get("Content-Type"))
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(res.Body, 4<<20))
}

// writeConnectError answers a Connect unary error.
func writeConnectError(w http.ResponseWriter, code connect.Code, msg string) {
	status := map[connect.Code]int{
		connect.CodeInvalidArgument: http.StatusBadRequest, connect.CodeUnauthenticated: http.StatusUnauthorized,
		connect.CodePermissionDenied: http.StatusForbidden, connect.CodeUnimplemented: http.StatusNotFound,
		connect.CodeUnavailable: http.StatusServiceUnavailable, connect.CodeDeadlineExceeded: http.StatusGatewayTimeout,
	}[code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code.String(), "message": msg})
}
