// Package memory is the memory domain: agents save notes under keys and
// recall them by full-text search, best match first.
//
// With a key configured, content is encrypted at rest with AES-256-GCM and
// the search index holds keyed hashes (HMAC-SHA256) of words instead of the
// words, so neither the stored content nor the index holds plaintext; search
// still works on whole words (see docs/memory.md for the trade-offs).
package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"
	memoryv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1/memoryv1connect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DefaultRecallLimit is how many matches recall returns when the request
// gives no limit.
const DefaultRecallLimit = 10

// Errors of New when the configured key does not fit the database. The
// database is left untouched in every case.
var (
	ErrKeyRequired       = errors.New("the memory database is encrypted but no memory key is configured")
	ErrWrongKey          = errors.New("the memory key does not match the memory database")
	ErrPlaintextDatabase = errors.New("the memory database was created without encryption and holds plaintext; " +
		"a key cannot be added to it in place: start without a memory key, or with a new database")
)

// Config tunes the service.
type Config struct {
	// Key, when set, encrypts content at rest (KeySize bytes; see ParseKey).
	// A database keeps the setting it was created with.
	Key []byte
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// Log receives events about unreadable rows; discarded when nil.
	Log *slog.Logger
}

// Service implements toolmesh.memory.v1.MemoryService.
type Service struct {
	store  Store
	sealer *sealer // nil: content and index are plaintext
	now    clock.Clock
	log    *slog.Logger
}

var _ memoryv1connect.MemoryServiceHandler = (*Service)(nil)

// New returns the service over store. On the first start it records whether
// the database is encrypted, and with which key; on every later start the
// configured key must match that record (ErrKeyRequired, ErrWrongKey,
// ErrPlaintextDatabase otherwise).
func New(ctx context.Context, store Store, cfg Config) (*Service, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Service{store: store, now: cfg.Now, log: cfg.Log}
	var want Keyring
	if cfg.Key != nil {
		sl, err := newSealer(cfg.Key)
		if err != nil {
			return nil, err
		}
		s.sealer = sl
		want = Keyring{KeyID: sl.id, Check: sl.seal(checkPlaintext, checkAAD)}
	}
	got, err := store.InitKeyring(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("read memory keyring: %w", err)
	}
	if err := s.checkKeyring(got); err != nil {
		return nil, err
	}
	return s, nil
}

// KeyID names the key content is sealed with; empty without encryption.
func (s *Service) KeyID() string {
	if s.sealer == nil {
		return ""
	}
	return s.sealer.id
}

func (s *Service) checkKeyring(k Keyring) error {
	switch {
	case k.KeyID == "" && s.sealer == nil:
		return nil
	case k.KeyID == "":
		return ErrPlaintextDatabase
	case s.sealer == nil:
		return fmt.Errorf("%w: it was encrypted with key id %s", ErrKeyRequired, k.KeyID)
	case k.KeyID != s.sealer.id:
		return fmt.Errorf("%w: the database was encrypted with key id %s, the configured key has id %s; nothing was changed", ErrWrongKey, k.KeyID, s.sealer.id)
	}
	if pt, err := s.sealer.open(k.Check, checkAAD); err != nil || !bytes.Equal(pt, checkPlaintext) {
		return fmt.Errorf("%w: the key check recorded for key id %s fails; nothing was changed", ErrWrongKey, k.KeyID)
	}
	return nil
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(memoryv1connect.MemoryServiceName, memoryv1connect.MemoryServiceHandler(s), memoryv1connect.NewMemoryServiceHandler, memoryv1.RegisterMemoryServiceHandler)
}

// Save implements MemoryService.Save.
func (s *Service) Save(ctx context.Context, req *memoryv1.SaveRequest) (*memoryv1.SaveResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	// Stored times have millisecond precision; answer with what is stored.
	now := s.now().UTC().Truncate(time.Millisecond)
	r := Record{
		AgentID:    agent,
		Key:        req.GetKey(),
		Body:       []byte(req.GetContent()),
		Terms:      s.indexTerms(agent, req.GetContent()),
		CreateTime: now,
		UpdateTime: now,
	}
	if s.sealer != nil {
		r.Body = s.sealer.seal(r.Body, contentAAD(agent, r.Key))
		r.KeyID = s.sealer.id
	}
	stored, created, err := s.store.Save(ctx, r)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("save memory: %w", err))
	}
	return &memoryv1.SaveResponse{Memory: toProto(stored, req.GetContent()), Created: created}, nil
}

// Recall implements MemoryService.Recall.
func (s *Service) Recall(ctx context.Context, req *memoryv1.RecallRequest) (*memoryv1.RecallResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	terms := s.queryTerms(agent, req.GetQuery())
	if len(terms) == 0 {
		return &memoryv1.RecallResponse{}, nil
	}
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = DefaultRecallLimit
	}
	found, err := s.store.Search(ctx, agent, terms, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("search memories: %w", err))
	}
	res := &memoryv1.RecallResponse{Matches: make([]*memoryv1.RecallMatch, 0, len(found))}
	for _, m := range found {
		content, err := s.content(ctx, m.Record)
		if err != nil {
			return nil, err
		}
		res.Matches = append(res.Matches, &memoryv1.RecallMatch{Memory: toProto(m.Record, content), Score: m.Score})
	}
	return res, nil
}

// Get implements MemoryService.Get.
func (s *Service) Get(ctx context.Context, req *memoryv1.GetRequest) (*memoryv1.GetResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.store.Get(ctx, agent, req.GetKey())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no memory under key %q", req.GetKey()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get memory: %w", err))
	}
	content, err := s.content(ctx, r)
	if err != nil {
		return nil, err
	}
	return &memoryv1.GetResponse{Memory: toProto(r, content)}, nil
}

// List implements MemoryService.List.
func (s *Service) List(ctx context.Context, req *memoryv1.ListRequest) (*memoryv1.ListResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.List(ctx, agent, offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list memories: %w", err))
	}
	res := &memoryv1.ListResponse{Memories: make([]*memoryv1.Memory, 0, len(list)), Page: paging.New(offset, limit, total)}
	for _, r := range list {
		content, err := s.content(ctx, r)
		if err != nil {
			return nil, err
		}
		res.Memories = append(res.Memories, toProto(r, content))
	}
	return res, nil
}

// Delete implements MemoryService.Delete.
func (s *Service) Delete(ctx context.Context, req *memoryv1.DeleteRequest) (*memoryv1.DeleteResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.store.Delete(ctx, agent, req.GetKey())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no memory under key %q", req.GetKey()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("delete memory: %w", err))
	}
	// Deleting is how an unreadable memory is cleared, so it succeeds; the
	// unreadable content is reported (logged) and answered as empty.
	content, _ := s.content(ctx, r)
	return &memoryv1.DeleteResponse{Memory: toProto(r, content)}, nil
}

// content returns the plaintext of a stored memory. A memory sealed with
// another key, or whose sealed body fails authentication, is reported as
// DataLoss and logged, never returned garbled.
func (s *Service) content(ctx context.Context, r Record) (string, error) {
	if r.KeyID != s.KeyID() {
		s.log.ErrorContext(ctx, "memory.unreadable", "agent", r.AgentID, "memory", r.Key,
			"reason", "foreign_key_id", "row_key_id", r.KeyID, "service_key_id", s.KeyID())
		return "", connect.NewError(connect.CodeDataLoss, fmt.Errorf(
			"memory %q was written with %s, but the memory service runs with %s, so it cannot be read; "+
				"nothing was changed: run the service with the key it was written with, or save over or delete this memory",
			r.Key, describeKey(r.KeyID), describeKey(s.KeyID())))
	}
	if s.sealer == nil {
		return string(r.Body), nil
	}
	pt, err := s.sealer.open(r.Body, contentAAD(r.AgentID, r.Key))
	if err != nil {
		s.log.ErrorContext(ctx, "memory.unreadable", "agent", r.AgentID, "memory", r.Key,
			"reason", "authentication_failed", "row_key_id", r.KeyID)
		return "", connect.NewError(connect.CodeDataLoss, fmt.Errorf(
			"memory %q cannot be read: its stored content fails authentication (altered, or copied from another memory); "+
				"save over or delete it", r.Key))
	}
	return string(pt), nil
}

func describeKey(id string) string {
	if id == "" {
		return "no encryption"
	}
	return "key id " + id
}

func toProto(r Record, content string) *memoryv1.Memory {
	return &memoryv1.Memory{
		Key:        r.Key,
		Content:    content,
		CreateTime: timestamppb.New(r.CreateTime),
		UpdateTime: timestamppb.New(r.UpdateTime),
	}
}
