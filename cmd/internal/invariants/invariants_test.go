package invariants_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/cmd/internal/invariants"
	"github.com/toolmesh/toolmesh/internal/chaoslog"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/services/credits/creditsstore"
	"github.com/toolmesh/toolmesh/services/owner/ownerstore"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// grant applies a change of amount to wallet through the credits store, as
// the service does.
func change(t *testing.T, st *creditsstore.Store, wallet string, amount int64, ref string) *creditsv1.LedgerEntry {
	t.Helper()
	kind := creditsv1.EntryKind_ENTRY_KIND_GRANT
	if amount < 0 {
		kind = creditsv1.EntryKind_ENTRY_KIND_SPEND
	}
	e := &creditsv1.LedgerEntry{Id: ids.NewAt("led", now), Wallet: wallet, Kind: kind, Amount: amount,
		Reference: ref, Actor: "test", CreateTime: timestamppb.New(now)}
	got, err := st.Apply(t.Context(), e, idempotency.Call{Key: ref, Digest: ref}, 1_000_000)
	if err != nil {
		t.Fatalf("apply %+d to %s: %v", amount, wallet, err)
	}
	return got.Entry
}

func check(t *testing.T, in invariants.Input) (invariants.Result, string) {
	t.Helper()
	in.Now = now
	res, err := invariants.Check(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	invariants.Print(&out, res, []chaoslog.Fault{{Kind: "kill", Target: "credits", Sent: now.Add(-2 * time.Second), Landed: now.Add(-time.Second)}})
	return res, out.String()
}

func only(t *testing.T, res invariants.Result, out, invariant, key string) {
	t.Helper()
	if len(res.Violations) != 1 || res.Violations[0].Invariant != invariant || res.Violations[0].Key != key {
		t.Fatalf("violations = %+v, want one of %q on %q\n%s", res.Violations, invariant, key, out)
	}
	if !strings.Contains(out, "key      "+key) || !strings.Contains(out, "fault    kill credits") {
		t.Errorf("the report does not name the key and the fault around it:\n%s", out)
	}
}

// TestBooks: a ledger written by the store balances; a balance moved
// without its ledger row, or a ledger whose running sum goes below zero,
// is caught and named by its wallet.
func TestBooks(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := e.Open(t)
		st := sqldbtest.OpenStore(t, db, creditsstore.Open)
		change(t, st, "alice", 100, "g1")
		change(t, st, "alice", -40, "s1")
		change(t, st, "bob", 5, "g2")
		res, out := check(t, invariants.Input{DBs: invariants.DBs{Credits: db}})
		if !res.Held() {
			t.Fatalf("the store's own books do not hold:\n%s", out)
		}
		if c := res.Checks[0]; c.Invariant != invariants.LedgerBalances || c.Items != 2 {
			t.Errorf("first check = %+v, want the two wallets' balances", c)
		}

		if _, err := db.Exec(t.Context(), `UPDATE credit_wallets SET balance = balance + 7 WHERE wallet = ?`, "bob"); err != nil {
			t.Fatal(err)
		}
		res, out = check(t, invariants.Input{DBs: invariants.DBs{Credits: db}})
		only(t, res, out, invariants.LedgerBalances, "bob")

		if _, err := db.Exec(t.Context(), `UPDATE credit_wallets SET balance = balance - 7 WHERE wallet = ?`, "bob"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(t.Context(), `INSERT INTO credit_ledger (id, wallet, kind, amount, balance_after, reference, actor, create_ms)
			VALUES (?, 'carol', 2, -3, 0, 'overdraft', 'test', ?), (?, 'carol', 1, 3, 0, 'late grant', 'test', ?)`,
			ids.NewAt("led", now), now.UnixMilli(), ids.NewAt("led", now), now.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(t.Context(), `INSERT INTO credit_wallets (wallet, balance, update_ms) VALUES ('carol', 0, ?)`, now.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		res, out = check(t, invariants.Input{DBs: invariants.DBs{Credits: db}})
		if len(res.Violations) == 0 || res.Violations[0].Invariant != invariants.NeverNegative || res.Violations[0].Key != "carol" {
			t.Fatalf("violations = %+v, want the spend that took carol below zero first\n%s", res.Violations, out)
		}
	})
}

// TestAcknowledgedWrites: a write the workload saw acknowledged must be
// there once, under the key it was sent with.
func TestAcknowledgedWrites(t *testing.T) {
	db := sqldbtest.Open(t, t.TempDir()+"/tasks.db")
	st := sqldbtest.OpenStore(t, db, tasksstore.Open)
	task := func(key string) *tasksv1.Task {
		got, _, err := st.Create(t.Context(), &tasksv1.Task{Id: ids.NewAt("tsk", now), AgentId: "a", Description: key,
			Status: tasksv1.TaskStatus_TASK_STATUS_PENDING, CreateTime: timestamppb.New(now), UpdateTime: timestamppb.New(now)},
			idempotency.Call{Key: key, Digest: key}, 100)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	t1, t2 := task("k1"), task("k2")
	acked := []chaoslog.Ack{{Domain: "tasks", ID: t1.GetId(), Key: "k1", Agent: "a", At: now}, {Domain: "tasks", ID: t2.GetId(), Key: "k2", Agent: "a", At: now}}
	res, out := check(t, invariants.Input{DBs: invariants.DBs{Tasks: db}, Acked: acked})
	if !res.Held() {
		t.Fatalf("acknowledged tasks that are there were not found:\n%s", out)
	}
	lost := chaoslog.Ack{Domain: "tasks", ID: "tsk_lost", Key: "k3", Agent: "a", At: now}
	wrongKey := chaoslog.Ack{Domain: "tasks", ID: t1.GetId(), Key: "k2", Agent: "a", At: now}
	res, out = check(t, invariants.Input{DBs: invariants.DBs{Tasks: db}, Acked: append(acked, lost, wrongKey)})
	if len(res.Violations) != 2 || res.Violations[0].Key != "tasks tsk_lost key k3" || res.Violations[1].Key != "tasks "+t1.GetId()+" key k2" {
		t.Fatalf("violations = %+v, want the lost task and the task under another key\n%s", res.Violations, out)
	}
	if _, err := invariants.Check(t.Context(), invariants.Input{DBs: invariants.DBs{Tasks: db}, Acked: []chaoslog.Ack{{Domain: "nowhere"}}}); err == nil {
		t.Error("an acknowledged write of an unknown domain was accepted")
	}
}

// TestAsksEnd: a pending ask past its expiry is orphaned; one whose expiry
// is ahead is still waiting.
func TestAsksEnd(t *testing.T) {
	db := sqldbtest.Open(t, t.TempDir()+"/owner.db")
	st := sqldbtest.OpenStore(t, db, ownerstore.Open)
	ask := func(expire time.Time) string {
		id := ids.NewAt("ask", now)
		if _, _, err := st.CreateAsk(t.Context(), &ownerv1.Ask{AskId: id, AgentId: "a", Question: "go?", Status: ownerv1.AskStatus_ASK_STATUS_PENDING,
			CreateTime: timestamppb.New(now.Add(-time.Hour)), ExpireTime: timestamppb.New(expire), WorkflowId: "wf-" + id}, "d"+id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	ask(now.Add(time.Minute))
	res, out := check(t, invariants.Input{DBs: invariants.DBs{Owner: db}})
	if !res.Held() {
		t.Fatalf("an ask waiting with a future deadline was reported:\n%s", out)
	}
	orphan := ask(now.Add(-time.Minute))
	res, out = check(t, invariants.Input{DBs: invariants.DBs{Owner: db}})
	if len(res.Violations) != 1 || res.Violations[0].Key != orphan || res.Violations[0].Invariant != invariants.AsksEnded {
		t.Fatalf("violations = %+v, want the ask pending past its expiry\n%s", res.Violations, out)
	}
}
