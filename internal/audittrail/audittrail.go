// Package audittrail is the caller's side of the audit trail: what the edge
// sends to toolmesh.audit.v1.AuditService.Append after an ADMIN tool call
// succeeded, and the digest of the call's arguments, computed here so the
// edge, the audit service's tests and anyone checking a record later agree on
// it.
//
// The contract for the edge, after a tools/call of an ADMIN tool:
//
//   - only when the service answered success: no record for a call refused by
//     a guardrail, by validation, by a permission check or by the service;
//   - exactly one Record call per tool call, with the call's idempotency key
//     as CallID, so a retried append never writes a second record;
//   - Arguments is the decoded, validated request message that was sent (the
//     admin guardrail fields confirm and reason are not part of it; reason
//     travels in its own field);
//   - a call the service answered as a replay of another call (the
//     Toolmesh-Replay-Of response header, internal/idempotency) changed
//     nothing: it is recorded with outcome REPLAYED and replay_of naming the
//     call that made the change, never as a second change. A replay of the
//     call's own id (the client retried with the same idempotency key) is
//     that same call: its change record is appended again, which finds the
//     record the first attempt wrote, or writes it if that attempt could not.
//
// Recorder.Record identifies itself to the audit service as EdgeSubject, the
// one principal the service lets append by default.
package audittrail

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/jcs"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
)

// EdgeSubject is the mesh subject the edge appends audit records as. Until
// mesh identity is a signed token carrying roles, the audit service admits
// appends by this subject (see services/audit: authorizeAppend).
const EdgeSubject = "toolmesh-edge"

// DigestPrefix starts every digest: the algorithm, then hex.
const DigestPrefix = "sha256:"

// argsJSON renders request messages for the digest: proto field names, enum
// names, 64-bit integers as strings (so canonicalisation never rounds them),
// default values left out (so an omitted field and its zero value agree).
var argsJSON = protojson.MarshalOptions{UseProtoNames: true}

// ArgumentsDigest returns "sha256:" and the hex SHA-256 of the RFC 8785
// canonical JSON of msg's protojson form.
func ArgumentsDigest(msg proto.Message) (string, error) {
	b, err := argsJSON.Marshal(msg)
	if err != nil {
		return "", fmt.Errorf("encode arguments: %w", err)
	}
	return JSONDigest(b)
}

// JSONDigest returns "sha256:" and the hex SHA-256 of the RFC 8785 canonical
// form of the JSON text data. It refuses what cannot be canonicalised without
// loss (duplicate names, invalid UTF-8, integers a double would round).
func JSONDigest(data []byte) (string, error) {
	c, err := jcs.Transform(data)
	if err != nil {
		return "", fmt.Errorf("canonicalise arguments: %w", err)
	}
	sum := sha256.Sum256(c)
	return DigestPrefix + hex.EncodeToString(sum[:]), nil
}

// Entry is one successful admin tool call to record.
type Entry struct {
	// CallID identifies the tool call (the edge's idempotency key for it).
	CallID string
	// Actor is the authenticated subject that made the call.
	Actor string
	// Tool is the tool name, e.g. "credits_grant".
	Tool string
	// Reason is the reason the actor gave.
	Reason string
	// Arguments is the request message the tool call sent to its service.
	Arguments proto.Message
	// Replayed is true when the service answered with the result of an
	// earlier call, ReplayOf's, and changed nothing.
	Replayed bool
	ReplayOf string
}

// Request builds the Append request for e.
func Request(e Entry) (*auditv1.AppendRequest, error) {
	digest, err := ArgumentsDigest(e.Arguments)
	if err != nil {
		return nil, err
	}
	req := &auditv1.AppendRequest{
		CallId:     e.CallID,
		Actor:      e.Actor,
		Tool:       e.Tool,
		Reason:     e.Reason,
		ArgsDigest: digest,
		Outcome:    auditv1.Outcome_OUTCOME_SUCCEEDED,
	}
	if e.Replayed && e.ReplayOf != e.CallID {
		req.Outcome, req.ReplayOf = auditv1.Outcome_OUTCOME_REPLAYED, e.ReplayOf
	}
	return req, nil
}

// Recorder appends audit records through an AuditService client.
type Recorder struct {
	client   auditv1connect.AuditServiceClient
	attempts int
	backoff  time.Duration
}

// RecorderOptions tune a Recorder; zero values get the defaults.
type RecorderOptions struct {
	// Attempts bounds how often one record is tried (default 3). Retrying is
	// safe: the call id makes the service write the record once.
	Attempts int
	// Backoff is the wait before the second attempt, doubled after each
	// further one (default 100ms).
	Backoff time.Duration
}

// RecordTimeout bounds recording one admin call, retries included.
const RecordTimeout = 5 * time.Second

// Dial returns the recorder of the audit service in services (by
// fully-qualified service name), called as c says; nil when services has
// none. c must sign (c.Signer): records are appended as EdgeSubject.
func Dial(c meshclient.Config, services map[string]string) *Recorder {
	url := services[auditv1connect.AuditServiceName]
	if url == "" {
		return nil
	}
	c.Timeout = RecordTimeout
	return NewRecorder(meshclient.New(c, auditv1connect.NewAuditServiceClient, url), RecorderOptions{})
}

// DialOutcomes starts the outcome log for the audit service in services
// (keyed by service name), or returns nil when there is none.
func DialOutcomes(c meshclient.Config, services map[string]string, log *slog.Logger) *OutcomeLog {
	url := services[auditv1connect.AuditServiceName]
	if url == "" {
		return nil
	}
	c.Timeout = RecordTimeout
	return NewOutcomeLog(meshclient.New(c, auditv1connect.NewAuditServiceClient, url), log)
}

// NewRecorder returns a recorder over client. The client must carry the mesh
// identity of each call's context (mesh.NewClientInterceptor).
func NewRecorder(client auditv1connect.AuditServiceClient, opts RecorderOptions) *Recorder {
	if opts.Attempts <= 0 {
		opts.Attempts = 3
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 100 * time.Millisecond
	}
	return &Recorder{client: client, attempts: opts.Attempts, backoff: opts.Backoff}
}

// Record appends e to the audit trail, as EdgeSubject, and returns the
// stored record, within RecordTimeout. Transient failures (unavailable,
// deadline exceeded, aborted) are retried; any other error is returned at
// once.
func (r *Recorder) Record(ctx context.Context, e Entry) (*auditv1.Record, error) {
	req, err := Request(e)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, RecordTimeout)
	defer cancel()
	ctx = mesh.WithCall(ctx, mesh.Call{
		Caller:         mesh.Caller{Subject: EdgeSubject, Agent: EdgeSubject, Roles: []string{mesh.RoleService}},
		IdempotencyKey: e.CallID,
	})
	wait := r.backoff
	for attempt := 1; ; attempt++ {
		res, err := r.client.Append(ctx, req)
		if err == nil {
			return res.GetRecord(), nil
		}
		if attempt == r.attempts || !transient(err) {
			return nil, fmt.Errorf("append audit record for call %s: %w", e.CallID, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("append audit record for call %s: %w", e.CallID, errors.Join(err, ctx.Err()))
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func transient(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeAborted:
		return true
	}
	return false
}
