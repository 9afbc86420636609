// Package credits is the credits domain: each agent has a wallet; admins
// grant credits, metered work spends them. Every change is a ledger entry,
// the balance is the sum of the entries, and it never goes below zero.
//
// Who may do what:
//   - an agent reads its own wallet's balance and ledger (GetBalance,
//     ListLedger); naming another wallet is PermissionDenied, unless the
//     caller holds the owner or admin role (mesh.Caller.Oversees), which
//     reads any wallet;
//   - Spend debits the calling agent's own wallet. It is not an MCP tool:
//     services call it on behalf of the agent whose work they meter;
//   - Grant, GetConfig and SetConfig are ADMIN, privileged tools; the edge
//     enforces the admin guardrails and grants, the service records the
//     acting caller.
package credits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/server"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
)

// defaultValue returns the value of a setting never set. The allowed ranges
// are rules in credits.proto (SetConfigRequest).
func defaultValue(k creditsv1.ConfigKey) (int64, bool) {
	switch k {
	case creditsv1.ConfigKey_CONFIG_KEY_MAX_GRANT_AMOUNT:
		return 1_000_000, true
	case creditsv1.ConfigKey_CONFIG_KEY_MAX_SPEND_AMOUNT:
		return 100_000, true
	case creditsv1.ConfigKey_CONFIG_KEY_LOW_BALANCE_THRESHOLD:
		return 100, true
	}
	return 0, false
}

// Config tunes the service.
type Config struct {
	// Now is the clock; time.Now when nil.
	Now clock.Clock
}

// Service implements toolmesh.credits.v1.CreditsService.
type Service struct {
	store Store
	now   clock.Clock
}

var _ creditsv1connect.CreditsServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: store, now: cfg.Now}
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(creditsv1connect.CreditsServiceName, creditsv1connect.CreditsServiceHandler(s), creditsv1connect.NewCreditsServiceHandler, creditsv1.RegisterCreditsServiceHandler)
}

// readableWallet returns the wallet a read names: the caller's own when
// none is named. Agents read only their own wallet; the owner and admins
// read any.
func readableWallet(ctx context.Context, named string) (string, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return "", err
	}
	if named == "" || named == agent {
		return agent, nil
	}
	if mesh.FromContext(ctx).Caller.Oversees() {
		return named, nil
	}
	return "", connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf("agent %s may read only its own wallet, not %s (reading another's needs the %s or %s role)", agent, named, mesh.RoleOwner, mesh.RoleAdmin))
}

// GetBalance implements CreditsService.GetBalance.
func (s *Service) GetBalance(ctx context.Context, req *creditsv1.GetBalanceRequest) (*creditsv1.GetBalanceResponse, error) {
	wallet, err := readableWallet(ctx, req.GetWallet())
	if err != nil {
		return nil, err
	}
	balance, err := s.store.Balance(ctx, wallet)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read balance: %w", err))
	}
	low, err := s.setting(ctx, creditsv1.ConfigKey_CONFIG_KEY_LOW_BALANCE_THRESHOLD)
	if err != nil {
		return nil, err
	}
	return &creditsv1.GetBalanceResponse{Wallet: wallet, Balance: balance, Low: balance < low}, nil
}

// ListLedger implements CreditsService.ListLedger.
func (s *Service) ListLedger(ctx context.Context, req *creditsv1.ListLedgerRequest) (*creditsv1.ListLedgerResponse, error) {
	wallet, err := readableWallet(ctx, req.GetWallet())
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	entries, total, err := s.store.Ledger(ctx, wallet, offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list ledger: %w", err))
	}
	return &creditsv1.ListLedgerResponse{Entries: entries, Page: paging.New(offset, limit, total)}, nil
}

// ListWallets implements CreditsService.ListWallets.
func (s *Service) ListWallets(ctx context.Context, req *creditsv1.ListWalletsRequest) (*creditsv1.ListWalletsResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	only := agent
	if mesh.FromContext(ctx).Caller.Oversees() {
		only = ""
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	rows, total, err := s.store.Wallets(ctx, only, offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list wallets: %w", err))
	}
	low, err := s.setting(ctx, creditsv1.ConfigKey_CONFIG_KEY_LOW_BALANCE_THRESHOLD)
	if err != nil {
		return nil, err
	}
	out := make([]*creditsv1.Wallet, len(rows))
	for i, w := range rows {
		out[i] = &creditsv1.Wallet{Wallet: w.Wallet, Balance: w.Balance, Low: w.Balance < low, UpdateTime: timestamppb.New(w.UpdateTime)}
	}
	return &creditsv1.ListWalletsResponse{Wallets: out, Page: paging.New(offset, limit, total)}, nil
}

// Grant implements CreditsService.Grant.
func (s *Service) Grant(ctx context.Context, req *creditsv1.GrantRequest) (*creditsv1.GrantResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	e, err := s.apply(ctx, idempotency.CallOf(ctx, req), creditsv1.EntryKind_ENTRY_KIND_GRANT, req.GetWallet(), req.GetAmount(), req.GetReference(), req.GetNote())
	if err != nil {
		return nil, err
	}
	return &creditsv1.GrantResponse{Entry: e}, nil
}

// Spend implements CreditsService.Spend.
func (s *Service) Spend(ctx context.Context, req *creditsv1.SpendRequest) (*creditsv1.SpendResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	e, err := s.apply(ctx, idempotency.CallOf(ctx, req), creditsv1.EntryKind_ENTRY_KIND_SPEND, agent, -req.GetAmount(), req.GetReference(), req.GetNote())
	if err != nil {
		return nil, err
	}
	return &creditsv1.SpendResponse{Entry: e}, nil
}

// apply records a change made by call, of at most the configured maximum
// for its kind. A retry (same reference or same idempotency key, same
// request) answers with the first entry, whatever the maximum is now, and
// marks the response as a replay.
func (s *Service) apply(ctx context.Context, call idempotency.Call, kind creditsv1.EntryKind, wallet string, amount int64, reference, note string) (*creditsv1.LedgerEntry, error) {
	maxKey := creditsv1.ConfigKey_CONFIG_KEY_MAX_GRANT_AMOUNT
	if kind == creditsv1.EntryKind_ENTRY_KIND_SPEND {
		maxKey = creditsv1.ConfigKey_CONFIG_KEY_MAX_SPEND_AMOUNT
	}
	maxAmount, err := s.setting(ctx, maxKey)
	if err != nil {
		return nil, err
	}
	// Stored times have millisecond precision; answer with what is stored.
	now := s.now().UTC().Truncate(time.Millisecond)
	applied, err := s.store.Apply(ctx, &creditsv1.LedgerEntry{
		Id:         ids.NewAt("led", now),
		Wallet:     wallet,
		Kind:       kind,
		Amount:     amount,
		Reference:  reference,
		Note:       note,
		Actor:      mesh.FromContext(ctx).Caller.Subject,
		CreateTime: timestamppb.New(now),
	}, call, maxAmount)
	var insufficient *InsufficientError
	var reused *ReusedError
	switch {
	case errors.As(err, &insufficient):
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("insufficient credits: wallet %s holds %d, the spend needs %d; nothing was charged", wallet, insufficient.Balance, -amount))
	case errors.As(err, &reused):
		f := reused.First
		if f.GetKind() != kind || f.GetReference() != reference || (kind == creditsv1.EntryKind_ENTRY_KIND_SPEND && f.GetWallet() != wallet) {
			return nil, idempotency.KeyConflict(call.Key)
		}
		return nil, connect.NewError(connect.CodeAlreadyExists,
			fmt.Errorf("reference %q was already used by %s %s of %d on wallet %s; a retry must repeat the same request, a new %s needs a new reference",
				reference, protoenum.Word(f.GetKind()), f.GetId(), abs(f.GetAmount()), f.GetWallet(), protoenum.Word(kind)))
	case errors.Is(err, ErrOverMax):
		return nil, connect.NewError(connect.CodeOutOfRange, fmt.Errorf("amount %d exceeds the largest single %s of %d (setting %s); nothing was recorded",
			abs(amount), protoenum.Word(kind), maxAmount, maxKey))
	case errors.Is(err, ErrBalanceLimit):
		return nil, connect.NewError(connect.CodeOutOfRange, fmt.Errorf("wallet %s cannot hold more credits: %w", wallet, err))
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record %s: %w", protoenum.Word(kind), err))
	}
	if applied.Replayed {
		idempotency.MarkReplay(ctx, applied.FirstCallID)
	}
	return applied.Entry, nil
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// setting returns the current value of one key.
func (s *Service) setting(ctx context.Context, key creditsv1.ConfigKey) (int64, error) {
	entries, err := s.config(ctx, key)
	if err != nil {
		return 0, err
	}
	return entries[0].GetValue(), nil
}

// config returns the entries of key, or of every key when key is
// unspecified, in key order.
func (s *Service) config(ctx context.Context, key creditsv1.ConfigKey) ([]*creditsv1.ConfigEntry, error) {
	stored, err := s.store.Settings(ctx)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read settings: %w", err))
	}
	byName := make(map[string]Setting, len(stored))
	for _, st := range stored {
		byName[st.Name] = st
	}
	var out []*creditsv1.ConfigEntry
	values := creditsv1.ConfigKey(0).Descriptor().Values()
	for i := range values.Len() {
		k := creditsv1.ConfigKey(values.Get(i).Number())
		def, ok := defaultValue(k)
		if !ok || (key != creditsv1.ConfigKey_CONFIG_KEY_UNSPECIFIED && k != key) {
			continue
		}
		e := &creditsv1.ConfigEntry{Key: k, Value: def, DefaultValue: def}
		if st, ok := byName[protoenum.Word(k)]; ok {
			e.Value, e.UpdateTime, e.UpdatedBy = st.Value, timestamppb.New(st.UpdateTime), st.UpdatedBy
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("setting %s has no default", key))
	}
	return out, nil
}

// GetConfig implements CreditsService.GetConfig.
func (s *Service) GetConfig(ctx context.Context, req *creditsv1.GetConfigRequest) (*creditsv1.GetConfigResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	entries, err := s.config(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	return &creditsv1.GetConfigResponse{Entries: entries}, nil
}

// SetConfig implements CreditsService.SetConfig.
func (s *Service) SetConfig(ctx context.Context, req *creditsv1.SetConfigRequest) (*creditsv1.SetConfigResponse, error) {
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	def, ok := defaultValue(req.GetKey())
	if !ok {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("setting %s has no default", req.GetKey()))
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	set := Setting{Name: protoenum.Word(req.GetKey()), Value: req.GetValue(), UpdateTime: now, UpdatedBy: mesh.FromContext(ctx).Caller.Subject}
	prev, existed, err := s.store.SetSetting(ctx, set)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("store setting: %w", err))
	}
	previous := def
	if existed {
		previous = prev.Value
	}
	return &creditsv1.SetConfigResponse{
		Entry:         &creditsv1.ConfigEntry{Key: req.GetKey(), Value: set.Value, DefaultValue: def, UpdateTime: timestamppb.New(now), UpdatedBy: set.UpdatedBy},
		PreviousValue: previous,
	}, nil
}
