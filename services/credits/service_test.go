package credits_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"
	"github.com/toolmesh/toolmesh/services/credits"
	"github.com/toolmesh/toolmesh/services/credits/creditsstore"
)

// start serves the credits service on a fresh SQLite file.
func start(t *testing.T) *servertest.Server {
	t.Helper()
	st, err := creditsstore.Open(context.Background(), sqldbtest.SQLite().Open(t))
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, credits.New(st, credits.Config{}).Registration())
}

func as(agent string) context.Context { return servertest.As(context.Background(), agent) }

func grant(t *testing.T, c creditsv1connect.CreditsServiceClient, wallet string, amount int64, ref string) *creditsv1.LedgerEntry {
	t.Helper()
	res, err := c.Grant(as("ops"), &creditsv1.GrantRequest{Wallet: wallet, Amount: amount, Reference: ref, Note: "test grant"})
	if err != nil {
		t.Fatalf("Grant %d to %s (%s): %v", amount, wallet, ref, err)
	}
	return res.GetEntry()
}

func spend(t *testing.T, c creditsv1connect.CreditsServiceClient, agent string, amount int64, ref string) *creditsv1.LedgerEntry {
	t.Helper()
	res, err := c.Spend(as(agent), &creditsv1.SpendRequest{Amount: amount, Reference: ref})
	if err != nil {
		t.Fatalf("Spend %d by %s (%s): %v", amount, agent, ref, err)
	}
	return res.GetEntry()
}

func balance(t *testing.T, c creditsv1connect.CreditsServiceClient, agent string) int64 {
	t.Helper()
	res, err := c.GetBalance(as(agent), &creditsv1.GetBalanceRequest{})
	if err != nil {
		t.Fatalf("GetBalance of %s: %v", agent, err)
	}
	return res.GetBalance()
}

// ledger returns the whole ledger of agent's wallet, newest first.
func ledger(t *testing.T, c creditsv1connect.CreditsServiceClient, agent string) []*creditsv1.LedgerEntry {
	t.Helper()
	var all []*creditsv1.LedgerEntry
	for offset := int32(0); ; {
		res, err := c.ListLedger(as(agent), &creditsv1.ListLedgerRequest{Offset: offset, Limit: 200})
		if err != nil {
			t.Fatalf("ListLedger of %s: %v", agent, err)
		}
		all = append(all, res.GetEntries()...)
		if res.GetPage().NextOffset == nil {
			return all
		}
		offset = res.GetPage().GetNextOffset()
	}
}

// checkLedger asserts that the ledger adds up: the balance is the sum of the
// amounts, every entry's balance_after is the one before it plus its amount,
// and none is negative.
func checkLedger(t *testing.T, c creditsv1connect.CreditsServiceClient, agent string) []*creditsv1.LedgerEntry {
	t.Helper()
	entries := ledger(t, c, agent)
	var sum, prev int64
	for i := len(entries) - 1; i >= 0; i-- { // oldest first
		e := entries[i]
		sum += e.GetAmount()
		if e.GetBalanceAfter() != prev+e.GetAmount() {
			t.Errorf("entry %s: balance_after %d, want %d + %d", e.GetId(), e.GetBalanceAfter(), prev, e.GetAmount())
		}
		if e.GetBalanceAfter() < 0 {
			t.Errorf("entry %s leaves the balance negative: %d", e.GetId(), e.GetBalanceAfter())
		}
		prev = e.GetBalanceAfter()
	}
	if b := balance(t, c, agent); b != sum {
		t.Errorf("balance of %s = %d, want the sum of its ledger %d", agent, b, sum)
	}
	return entries
}

func TestGrantSpendBalanceAndLedger(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		if b := balance(t, c, "agent-a"); b != 0 {
			t.Errorf("a new wallet holds %d, want 0", b)
		}
		g := grant(t, c, "agent-a", 100, "inv-1")
		want := &creditsv1.LedgerEntry{Wallet: "agent-a", Kind: creditsv1.EntryKind_ENTRY_KIND_GRANT, Amount: 100, BalanceAfter: 100,
			Reference: "inv-1", Note: "test grant", Actor: "ops"}
		if diff := cmp.Diff(want, g, protocmp.Transform(), protocmp.IgnoreFields(&creditsv1.LedgerEntry{}, "id", "create_time")); diff != "" {
			t.Errorf("grant entry (-want +got):\n%s", diff)
		}
		s := spend(t, c, "agent-a", 30, "job-1")
		if s.GetAmount() != -30 || s.GetBalanceAfter() != 70 || s.GetKind() != creditsv1.EntryKind_ENTRY_KIND_SPEND || s.GetActor() != "agent-a" {
			t.Errorf("spend entry = %v, want -30 leaving 70, by agent-a", s)
		}
		res, err := c.GetBalance(as("agent-a"), &creditsv1.GetBalanceRequest{Wallet: "agent-a"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(&creditsv1.GetBalanceResponse{Wallet: "agent-a", Balance: 70, Low: true}, res, protocmp.Transform()); diff != "" {
			t.Errorf("balance under the default low threshold of 100 (-want +got):\n%s", diff)
		}
		grant(t, c, "agent-a", 100, "inv-2")
		if res, _ := c.GetBalance(as("agent-a"), &creditsv1.GetBalanceRequest{}); res.GetBalance() != 170 || res.GetLow() {
			t.Errorf("balance = %v, want 170 and not low", res)
		}

		page, err := c.ListLedger(as("agent-a"), &creditsv1.ListLedgerRequest{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		next := int32(2)
		if diff := cmp.Diff(&pagev1.Page{Offset: 0, Limit: 2, Total: 3, NextOffset: &next}, page.GetPage(), protocmp.Transform()); diff != "" {
			t.Errorf("ledger page (-want +got):\n%s", diff)
		}
		if got := refs(page.GetEntries()); !cmp.Equal(got, []string{"inv-2", "job-1"}) {
			t.Errorf("first ledger page = %v, want the two newest entries [inv-2 job-1]", got)
		}
		checkLedger(t, c, "agent-a")
		if b := balance(t, c, "agent-b"); b != 0 {
			t.Errorf("agent-b's untouched wallet holds %d, want 0", b)
		}
	})
}

func refs(es []*creditsv1.LedgerEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.GetReference()
	}
	return out
}

func TestSpendNeverOverdraws(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		_, err := c.Spend(as("agent-a"), &creditsv1.SpendRequest{Amount: 1, Reference: "job-1"})
		if servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("spend from an empty wallet: code %v, want failed_precondition", connect.CodeOf(err))
		}
		grant(t, c, "agent-a", 50, "inv-1")
		_, err = c.Spend(as("agent-a"), &creditsv1.SpendRequest{Amount: 51, Reference: "job-1"})
		if servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Fatalf("spend of 51 from 50: code %v, want failed_precondition", connect.CodeOf(err))
		}
		for _, w := range []string{"holds 50", "needs 51", "nothing was charged"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not say %q", err, w)
			}
		}
		if es := checkLedger(t, c, "agent-a"); len(es) != 1 || balance(t, c, "agent-a") != 50 {
			t.Errorf("after refused spends: %d ledger entries, balance %d; want 1 entry and 50", len(es), balance(t, c, "agent-a"))
		}
		// A refused spend recorded nothing, so its reference is still free.
		if e := spend(t, c, "agent-a", 50, "job-1"); e.GetBalanceAfter() != 0 {
			t.Errorf("spend of the whole balance leaves %d, want 0", e.GetBalanceAfter())
		}
		if _, err := c.Spend(as("agent-a"), &creditsv1.SpendRequest{Amount: 1, Reference: "job-2"}); servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("spend from a drained wallet: code %v, want failed_precondition", connect.CodeOf(err))
		}
		checkLedger(t, c, "agent-a")
	})
}

func TestReferencesMakeChangesIdempotent(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		first := grant(t, c, "agent-a", 100, "inv-1")
		again := grant(t, c, "agent-a", 100, "inv-1")
		if !proto.Equal(first, again) {
			t.Errorf("repeated grant returned %v, want the first entry %v", again, first)
		}
		for _, tc := range []struct {
			name   string
			wallet string
			amount int64
		}{{"another amount", "agent-a", 101}, {"another wallet", "agent-b", 100}} {
			_, err := c.Grant(as("ops"), &creditsv1.GrantRequest{Wallet: tc.wallet, Amount: tc.amount, Reference: "inv-1"})
			if servertest.Code(t, err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), first.GetId()) {
				t.Errorf("reference reused for %s: %v, want already_exists naming entry %s", tc.name, err, first.GetId())
			}
		}

		// Concurrent retries of one grant apply it once.
		var wg sync.WaitGroup
		ids := make(chan string, 10)
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := c.Grant(as("ops"), &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 25, Reference: "inv-2"})
				if err != nil {
					t.Errorf("concurrent retry of a grant: %v", err)
					return
				}
				ids <- res.GetEntry().GetId()
			}()
		}
		wg.Wait()
		close(ids)
		seen := map[string]bool{}
		for id := range ids {
			seen[id] = true
		}
		if len(seen) != 1 {
			t.Errorf("10 concurrent retries of one grant returned %d different entries, want 1", len(seen))
		}

		s1 := spend(t, c, "agent-a", 30, "job-9")
		if s2 := spend(t, c, "agent-a", 30, "job-9"); !proto.Equal(s1, s2) {
			t.Errorf("repeated spend returned %v, want the first entry %v", s2, s1)
		}
		if _, err := c.Spend(as("agent-a"), &creditsv1.SpendRequest{Amount: 31, Reference: "job-9"}); servertest.Code(t, err) != connect.CodeAlreadyExists {
			t.Errorf("spend reference reused for another amount: code %v, want already_exists", connect.CodeOf(err))
		}
		// Spend references are per wallet.
		grant(t, c, "agent-b", 40, "inv-3")
		spend(t, c, "agent-b", 30, "job-9")

		entries := checkLedger(t, c, "agent-a")
		if got := refs(entries); !cmp.Equal(got, []string{"job-9", "inv-2", "inv-1"}) {
			t.Errorf("agent-a's ledger = %v, want each change once: [job-9 inv-2 inv-1]", got)
		}
		if b := balance(t, c, "agent-a"); b != 95 {
			t.Errorf("agent-a's balance = %d, want 100 + 25 - 30 = 95", b)
		}
	})
}

func TestConcurrentGrantsAndSpendsKeepExactBalance(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		const wallet = "agent-c"
		grant(t, c, wallet, 350, "seed")

		// A reader watches the balance the whole time.
		stop := make(chan struct{})
		var minSeen atomic.Int64
		minSeen.Store(1 << 62)
		var reads atomic.Int64
		watcher := make(chan struct{})
		go func() {
			defer close(watcher)
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := c.GetBalance(as(wallet), &creditsv1.GetBalanceRequest{})
				if err != nil {
					t.Errorf("GetBalance while changing: %v", err)
					return
				}
				reads.Add(1)
				for b := res.GetBalance(); b < minSeen.Load(); {
					if minSeen.CompareAndSwap(minSeen.Load(), b) {
						break
					}
				}
			}
		}()

		// Phase 1: 50 grants of 10 and 50 spends of 7 at once. The seed
		// covers every spend in any order, so all 100 succeed.
		run := func(n int, op func(i int) error) []error {
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = op(i)
				}()
			}
			wg.Wait()
			return errs
		}
		errs := run(100, func(i int) error {
			if i%2 == 0 {
				_, err := c.Grant(as("ops"), &creditsv1.GrantRequest{Wallet: wallet, Amount: 10, Reference: fmt.Sprintf("g-%d", i)})
				return err
			}
			_, err := c.Spend(as(wallet), &creditsv1.SpendRequest{Amount: 7, Reference: fmt.Sprintf("s-%d", i)})
			return err
		})
		for i, err := range errs {
			if err != nil {
				t.Errorf("phase 1 op %d: %v", i, err)
			}
		}
		if b := balance(t, c, wallet); b != 350+50*10-50*7 {
			t.Errorf("after 50 grants of 10 and 50 spends of 7 on 350: balance %d, want %d", b, 350+50*10-50*7)
		}

		// Phase 2: 100 spends of 10 race for 500 credits: exactly 50 win.
		errs = run(100, func(i int) error {
			_, err := c.Spend(as(wallet), &creditsv1.SpendRequest{Amount: 10, Reference: fmt.Sprintf("race-%d", i)})
			return err
		})
		won, refused := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case connect.CodeOf(err) == connect.CodeFailedPrecondition:
				refused++
			default:
				t.Errorf("phase 2 spend: %v", err)
			}
		}
		close(stop)
		<-watcher
		if won != 50 || refused != 50 {
			t.Errorf("100 spends of 10 on 500: %d succeeded and %d were refused, want 50 and 50", won, refused)
		}
		if b := balance(t, c, wallet); b != 0 {
			t.Errorf("final balance %d, want 0", b)
		}
		if reads.Load() == 0 || minSeen.Load() < 0 {
			t.Errorf("the watcher read the balance %d times, lowest %d; want reads and never below 0", reads.Load(), minSeen.Load())
		}
		if n := len(checkLedger(t, c, wallet)); n != 1+100+50 {
			t.Errorf("ledger has %d entries, want %d (seed, 100 changes, 50 winning spends)", n, 1+100+50)
		}
	})
}

func TestConfigBoundsGrantsSpendsAndLowBalance(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		ctx := as("ops")
		res, err := c.GetConfig(ctx, &creditsv1.GetConfigRequest{})
		if err != nil {
			t.Fatal(err)
		}
		want := []*creditsv1.ConfigEntry{
			{Key: creditsv1.ConfigKey_CONFIG_KEY_MAX_GRANT_AMOUNT, Value: 1_000_000, DefaultValue: 1_000_000},
			{Key: creditsv1.ConfigKey_CONFIG_KEY_MAX_SPEND_AMOUNT, Value: 100_000, DefaultValue: 100_000},
			{Key: creditsv1.ConfigKey_CONFIG_KEY_LOW_BALANCE_THRESHOLD, Value: 100, DefaultValue: 100},
		}
		if diff := cmp.Diff(want, res.GetEntries(), protocmp.Transform()); diff != "" {
			t.Errorf("default settings (-want +got):\n%s", diff)
		}

		set := func(key creditsv1.ConfigKey, v int64) *creditsv1.SetConfigResponse {
			t.Helper()
			res, err := c.SetConfig(ctx, &creditsv1.SetConfigRequest{Key: key, Value: v})
			if err != nil {
				t.Fatalf("SetConfig %v=%d: %v", key, v, err)
			}
			return res
		}
		r := set(creditsv1.ConfigKey_CONFIG_KEY_MAX_GRANT_AMOUNT, 100)
		if r.GetPreviousValue() != 1_000_000 || r.GetEntry().GetValue() != 100 || r.GetEntry().GetUpdatedBy() != "ops" || r.GetEntry().GetUpdateTime() == nil {
			t.Errorf("SetConfig = %v, want value 100, previous 1000000, set by ops with a time", r)
		}
		if r := set(creditsv1.ConfigKey_CONFIG_KEY_MAX_GRANT_AMOUNT, 200); r.GetPreviousValue() != 100 {
			t.Errorf("second SetConfig previous = %d, want 100", r.GetPreviousValue())
		}
		_, err = c.Grant(ctx, &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 201, Reference: "big"})
		if servertest.Code(t, err) != connect.CodeOutOfRange || !strings.Contains(err.Error(), "CONFIG_KEY_MAX_GRANT_AMOUNT") {
			t.Errorf("grant over the max: %v, want out_of_range naming the setting", err)
		}
		grant(t, c, "agent-a", 200, "big")

		set(creditsv1.ConfigKey_CONFIG_KEY_MAX_SPEND_AMOUNT, 5)
		if _, err := c.Spend(as("agent-a"), &creditsv1.SpendRequest{Amount: 6, Reference: "job"}); servertest.Code(t, err) != connect.CodeOutOfRange {
			t.Errorf("spend over the max: code %v, want out_of_range", connect.CodeOf(err))
		}
		spend(t, c, "agent-a", 5, "job")
		if b := checkLedger(t, c, "agent-a"); len(b) != 2 {
			t.Errorf("ledger has %d entries, want 2: refused changes record nothing", len(b))
		}

		low := func() bool {
			res, err := c.GetBalance(as("agent-a"), &creditsv1.GetBalanceRequest{})
			if err != nil {
				t.Fatal(err)
			}
			return res.GetLow()
		}
		if low() { // 195 >= 100
			t.Error("balance 195 reported low under the default threshold 100")
		}
		set(creditsv1.ConfigKey_CONFIG_KEY_LOW_BALANCE_THRESHOLD, 196)
		if !low() {
			t.Error("balance 195 not reported low under threshold 196")
		}

		one, err := c.GetConfig(ctx, &creditsv1.GetConfigRequest{Key: creditsv1.ConfigKey_CONFIG_KEY_MAX_SPEND_AMOUNT})
		if err != nil || len(one.GetEntries()) != 1 || one.GetEntries()[0].GetValue() != 5 || one.GetEntries()[0].GetDefaultValue() != 100_000 {
			t.Errorf("GetConfig of one key = %v (err %v), want max spend 5 with default 100000", one.GetEntries(), err)
		}
	})
}

func TestValidationFailuresCarryFieldViolations(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		ctx := as("ops")
		cases := []struct {
			name string
			call func() error
			want map[string][]string
		}{
			{"zero grant", func() error {
				_, err := c.Grant(ctx, &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 0, Reference: "r"})
				return err
			}, map[string][]string{"amount": {"required"}}},
			{"grant over the bound", func() error {
				_, err := c.Grant(ctx, &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 1_000_000_000_001, Reference: "r"})
				return err
			}, map[string][]string{"amount": {"int64.gt_lte"}}},
			{"negative spend", func() error {
				_, err := c.Spend(ctx, &creditsv1.SpendRequest{Amount: -5, Reference: "r"})
				return err
			}, map[string][]string{"amount": {"int64.gt_lte"}}},
			{"grant without reference", func() error {
				_, err := c.Grant(ctx, &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 1})
				return err
			}, map[string][]string{"reference": {"required"}}},
			{"bad wallet", func() error {
				_, err := c.Grant(ctx, &creditsv1.GrantRequest{Wallet: "Agent A", Amount: 1, Reference: "r"})
				return err
			}, map[string][]string{"wallet": {"string.pattern"}}},
			{"bad balance wallet", func() error {
				_, err := c.GetBalance(ctx, &creditsv1.GetBalanceRequest{Wallet: "../etc"})
				return err
			}, map[string][]string{"wallet": {"string.pattern"}}},
			{"ledger limit over the bound", func() error {
				_, err := c.ListLedger(ctx, &creditsv1.ListLedgerRequest{Limit: 201})
				return err
			}, map[string][]string{"limit": {"int32.gte_lte"}}},
			{"config without key", func() error {
				_, err := c.SetConfig(ctx, &creditsv1.SetConfigRequest{Value: 5})
				return err
			}, map[string][]string{"key": {"required"}}},
			{"undefined key", func() error {
				_, err := c.SetConfig(ctx, &creditsv1.SetConfigRequest{Key: 42, Value: 5})
				return err
			}, map[string][]string{"key": {"enum.defined_only"}}},
			{"max grant 0", func() error {
				_, err := c.SetConfig(ctx, &creditsv1.SetConfigRequest{Key: creditsv1.ConfigKey_CONFIG_KEY_MAX_GRANT_AMOUNT, Value: 0})
				return err
			}, map[string][]string{"": {"max_grant_amount_range"}}},
			{"max spend 0", func() error {
				_, err := c.SetConfig(ctx, &creditsv1.SetConfigRequest{Key: creditsv1.ConfigKey_CONFIG_KEY_MAX_SPEND_AMOUNT, Value: 0})
				return err
			}, map[string][]string{"": {"max_spend_amount_range"}}},
			{"threshold over the bound", func() error {
				_, err := c.SetConfig(ctx, &creditsv1.SetConfigRequest{Key: creditsv1.ConfigKey_CONFIG_KEY_LOW_BALANCE_THRESHOLD, Value: 1_000_000_000_001})
				return err
			}, map[string][]string{"value": {"int64.gte_lte"}, "": {"low_balance_threshold_range"}}},
		}
		for _, tc := range cases {
			if diff := cmp.Diff(tc.want, servertest.Violations(t, tc.call())); diff != "" {
				t.Errorf("%s: violations (-want +got):\n%s", tc.name, diff)
			}
		}
		// A zero threshold is allowed (never low); a zero max is not.
		if _, err := c.SetConfig(ctx, &creditsv1.SetConfigRequest{Key: creditsv1.ConfigKey_CONFIG_KEY_LOW_BALANCE_THRESHOLD, Value: 0}); err != nil {
			t.Errorf("threshold 0: %v", err)
		}
		if es := ledger(t, c, "agent-a"); len(es) != 0 {
			t.Errorf("rejected requests recorded %d ledger entries", len(es))
		}
	})
}

func TestREST(t *testing.T) {
	srv := start(t)
	do := func(method, path, agent, body string) (int, string) {
		t.Helper()
		return srv.REST(t, servertest.Bearer(agent), method, path, body)
	}
	if code, out := do(http.MethodPost, "/v1/credits/grants", "ops", `{"wallet":"agent-r","amount":"120","reference":"inv-rest"}`); code != http.StatusOK || !strings.Contains(out, `"balance_after":"120"`) {
		t.Errorf("POST /v1/credits/grants = %d %s, want 200 with balance_after 120", code, out)
	}
	if code, out := do(http.MethodPost, "/v1/credits/spends", "agent-r", `{"amount":"121","reference":"job"}`); code != http.StatusBadRequest || !strings.Contains(out, "insufficient credits") {
		t.Errorf("POST /v1/credits/spends over the balance = %d %s, want 400 insufficient credits", code, out)
	}
	if code, out := do(http.MethodGet, "/v1/credits/balance", "agent-r", ""); code != http.StatusOK || !strings.Contains(out, `"balance":"120"`) {
		t.Errorf("GET /v1/credits/balance = %d %s, want 120", code, out)
	}
}

func TestIdempotencyKeyRule(t *testing.T) {
	servertest.EachProtocol(t, start, creditsv1connect.NewCreditsServiceClient, func(t *testing.T, c creditsv1connect.CreditsServiceClient) {
		// The call's idempotency key names a change as its reference does:
		// the same key with another reference is another request.
		servertest.KeyRule(t, as("ops"), "k1", func(ctx context.Context, variant int) (string, error) {
			res, err := c.Grant(ctx, &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 10, Reference: fmt.Sprintf("inv-%d", variant)})
			return res.GetEntry().GetId(), err
		})
		servertest.KeyRule(t, as("agent-a"), "k2", func(ctx context.Context, variant int) (string, error) {
			res, err := c.Spend(ctx, &creditsv1.SpendRequest{Amount: 1, Reference: fmt.Sprintf("job-%d", variant)})
			return res.GetEntry().GetId(), err
		})

		// A grant repeated by reference under a new key is a replay of the
		// call that made it; the header names that call's key, or none.
		replayOf := func(key, ref string) (string, bool) {
			t.Helper()
			ctx, info := connect.NewClientContext(servertest.WithIdempotencyKey(as("ops"), key))
			if _, err := c.Grant(ctx, &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 10, Reference: ref}); err != nil {
				t.Fatalf("grant %s under key %q: %v", ref, key, err)
			}
			return idempotency.ReplayOf(info.ResponseHeader())
		}
		if of, replayed := replayOf("k3", "inv-0"); !replayed || of != "k1" {
			t.Errorf("grant inv-0 again under key k3: replay of %q (%v), want a replay of k1", of, replayed)
		}
		if _, err := c.Grant(as("ops"), &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 10, Reference: "inv-9"}); err != nil {
			t.Fatal(err) // a call without a key
		}
		if of, replayed := replayOf("k4", "inv-9"); !replayed || of != "" {
			t.Errorf("grant inv-9 again under key k4: replay of %q (%v), want a replay of a call without a key", of, replayed)
		}
		// A reference reused with another request names the reference.
		_, err := c.Grant(servertest.WithIdempotencyKey(as("ops"), "k5"), &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 11, Reference: "inv-0"})
		if servertest.Code(t, err) != connect.CodeAlreadyExists || !strings.Contains(err.Error(), `reference "inv-0"`) {
			t.Errorf("reference inv-0 reused for another amount: %v, want already_exists naming the reference", err)
		}
		if b := balance(t, c, "agent-a"); b != 19 {
			t.Errorf("agent-a's balance = %d, want 10 + 10 - 1 = 19", b)
		}

		// A retry gets the first result even after the maximum was lowered
		// below its amount; a new grant of that amount is refused.
		if _, err := c.SetConfig(as("ops"), &creditsv1.SetConfigRequest{Key: creditsv1.ConfigKey_CONFIG_KEY_MAX_GRANT_AMOUNT, Value: 5}); err != nil {
			t.Fatal(err)
		}
		if of, replayed := replayOf("k6", "inv-0"); !replayed || of != "k1" {
			t.Errorf("grant inv-0 again under a lower maximum: replay of %q (%v), want a replay of k1", of, replayed)
		}
		_, err = c.Grant(as("ops"), &creditsv1.GrantRequest{Wallet: "agent-a", Amount: 10, Reference: "inv-new"})
		if servertest.Code(t, err) != connect.CodeOutOfRange {
			t.Errorf("a new grant over the maximum: %v, want out_of_range", err)
		}
	})
}
