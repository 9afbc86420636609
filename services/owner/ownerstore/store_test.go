package ownerstore_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/owner"
	"github.com/toolmesh/toolmesh/services/owner/ownerstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the owner store on SQLite and on PostgreSQL.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "create and get ask", Test: testCreateGetAsk},
		{Name: "create is idempotent by id", Test: testCreateAskTwice},
		{Name: "stress: racing creates of one ask", Test: testStressCreateAsk},
		{Name: "list asks newest first, by agent and status", Test: testListAsks},
		{Name: "first outcome wins", Test: testResolveFirstWins},
		{Name: "each change writes its event to the outbox", Test: testAskEvents},
		{Name: "extend moves a pending ask's expiry later only", Test: testExtendAsk},
		{Name: "concurrent outcomes", Test: testConcurrentResolve},
		{Name: "a new database has the log channel", Test: testSeededLogChannel},
		{Name: "channel create, get, update, delete", Test: testChannelCRUD},
		{Name: "channel names are unique", Test: testChannelNameTaken},
		{Name: "enabled channels, channel pages", Test: testEnabledAndPages},
	})
}

// day1 is an arbitrary UTC day.
var day1 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func openStore(t *testing.T, db *sqldb.DB) *ownerstore.Store {
	return sqldbtest.OpenStore(t, db, ownerstore.Open)
}

// newAsk is a pending ask as the service builds it (millisecond times).
func newAsk(agent string, at time.Time, options ...string) *ownerv1.Ask {
	at = at.Truncate(time.Millisecond)
	id := ids.NewAt("ask", at)
	return &ownerv1.Ask{
		AskId:      id,
		AgentId:    agent,
		Question:   "ship it at " + at.Format(time.RFC3339Nano) + "?",
		Options:    options,
		Context:    "the release is ready",
		Status:     ownerv1.AskStatus_ASK_STATUS_PENDING,
		CreateTime: timestamppb.New(at),
		ExpireTime: timestamppb.New(at.Add(time.Hour)),
		WorkflowId: "ask/" + agent + "/" + id,
	}
}

// digest is the digest of the request that makes a, as the service makes
// it.
func digest(a *ownerv1.Ask) string {
	return idempotency.Digest(&ownerv1.AskRequest{Question: a.GetQuestion(), Options: a.GetOptions(), Context: a.GetContext()})
}

func createAsk(t *testing.T, s *ownerstore.Store, a *ownerv1.Ask) *ownerv1.Ask {
	t.Helper()
	got, created, err := s.CreateAsk(t.Context(), proto.Clone(a).(*ownerv1.Ask), digest(a))
	if err != nil || !created {
		t.Fatalf("CreateAsk(%s) = created %v, %v; want a new ask", a.GetAskId(), created, err)
	}
	return got
}

func testCreateGetAsk(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	a := newAsk("agent-a", day1.Add(123*time.Millisecond), "ja", "nein — später", "\"quoted\"")
	a.Question = "Résumé prüfen? ✓ 'quotes'"
	prototest.Equal(t, "CreateAsk returned", createAsk(t, s, a), a)
	got, err := s.GetAsk(t.Context(), a.GetAskId())
	if err != nil {
		t.Fatal(err)
	}
	prototest.Equal(t, "GetAsk", got, a)

	free := newAsk("agent-a", day1.Add(time.Second)) // no options
	if got := createAsk(t, s, free); got.GetOptions() != nil {
		t.Errorf("an ask without options reads back with options %q", got.GetOptions())
	}
	approval := newAsk("agent-a", day1.Add(2*time.Second), "approve", "reject") // a workflow approval node's
	approval.Run = ids.NewAt("run", day1)
	createAsk(t, s, approval)
	list, _, err := s.ListAsks(t.Context(), "agent-a", ownerv1.AskStatus_ASK_STATUS_PENDING, 0, 1)
	if err != nil || len(list) != 1 {
		t.Fatalf("ListAsks = %v, %v", list, err)
	}
	prototest.Equal(t, "the newest ask, listed with its run", list[0], approval)
	if _, err := s.GetAsk(t.Context(), ids.New("ask")); !errors.Is(err, owner.ErrNotFound) {
		t.Errorf("GetAsk(unknown) err = %v, want ErrNotFound", err)
	}
}

func testCreateAskTwice(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	first := newAsk("agent-a", day1)
	createAsk(t, s, first)
	other := proto.Clone(first).(*ownerv1.Ask)
	other.Question = "a different question under the same id"
	got, _, err := s.CreateAsk(t.Context(), other, digest(other))
	sqldbtest.WantErr(t, "another question under the same id", err, idempotency.ErrKeyReused)
	prototest.Equal(t, "the ask holding the id", got, first)
	retry := proto.Clone(first).(*ownerv1.Ask)
	retry.CreateTime = timestamppb.New(day1.Add(time.Minute))
	got, created, err := s.CreateAsk(t.Context(), retry, digest(retry))
	if err != nil || created {
		t.Fatalf("second CreateAsk = created %v, %v; want the existing ask", created, err)
	}
	prototest.Equal(t, "second CreateAsk returned", got, first)
}

func testStressCreateAsk(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	answered := sqldbtest.Stress(t, db, func(round, racer, variant int) sqldbtest.Outcome {
		a := newAsk("agent-a", day1.Add(time.Duration(racer)*time.Millisecond))
		a.AskId = fmt.Sprintf("ask_round%d", round) // the id comes from the call's key
		a.Question = fmt.Sprintf("question %d?", variant)
		got, created, err := s.CreateAsk(t.Context(), a, digest(a))
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			return sqldbtest.Outcome{Reused: true}
		case err != nil:
			return sqldbtest.Outcome{Err: err}
		}
		// Asks share their id; the creation time tells them apart.
		return sqldbtest.Outcome{ID: got.GetCreateTime().AsTime().String(), Created: created}
	})
	if _, total, err := s.ListAsks(t.Context(), "", 0, 0, 200); err != nil || total != len(answered) {
		t.Errorf("stored %d asks (%v), want %d", total, err, len(answered))
	}
}

func testListAsks(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	var made []*ownerv1.Ask
	for i := range 5 {
		agent := "agent-a"
		if i%2 == 1 {
			agent = "agent-b"
		}
		made = append(made, createAsk(t, s, newAsk(agent, day1.Add(time.Duration(i)*time.Minute))))
	}
	if _, _, err := s.ResolveAsk(t.Context(), made[0].GetAskId(), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED, At: day1.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		agent         string
		status        ownerv1.AskStatus
		offset, limit int
		want          []int // indexes into made, in order
		total         int
	}{
		{"everyone", "", 0, 0, 50, []int{4, 3, 2, 1, 0}, 5},
		{"first page", "", 0, 0, 2, []int{4, 3}, 5},
		{"last page", "", 0, 4, 2, []int{0}, 5},
		{"one agent", "agent-a", 0, 0, 50, []int{4, 2, 0}, 3},
		{"pending", "", ownerv1.AskStatus_ASK_STATUS_PENDING, 0, 50, []int{4, 3, 2, 1}, 4},
		{"one agent's expired", "agent-a", ownerv1.AskStatus_ASK_STATUS_EXPIRED, 0, 50, []int{0}, 1},
		{"nobody", "agent-c", 0, 0, 50, nil, 0},
	} {
		list, total, err := s.ListAsks(t.Context(), tc.agent, tc.status, tc.offset, tc.limit)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got, want []string
		for _, a := range list {
			got = append(got, a.GetAskId())
		}
		for _, i := range tc.want {
			want = append(want, made[i].GetAskId())
		}
		if diff := cmp.Diff(want, got); diff != "" || total != tc.total {
			t.Errorf("%s: total %d (want %d), ids (-want +got):\n%s", tc.name, total, tc.total, diff)
		}
	}
}

func testExtendAsk(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	a := createAsk(t, s, newAsk("agent-a", day1))
	later := a.GetExpireTime().AsTime().Add(2 * time.Hour)
	got, err := s.ExtendAsk(t.Context(), a.GetAskId(), later)
	if err != nil || !got.GetExpireTime().AsTime().Equal(later) {
		t.Fatalf("ExtendAsk = %v, %v; want the expiry 2h later", got, err)
	}
	// Never earlier (a late retry of an older extension).
	if got, err = s.ExtendAsk(t.Context(), a.GetAskId(), later.Add(-time.Hour)); err != nil || !got.GetExpireTime().AsTime().Equal(later) {
		t.Errorf("ExtendAsk to an earlier time = %v, %v; want the expiry kept", got, err)
	}
	// Never an ask that ended.
	if _, _, err := s.ResolveAsk(t.Context(), a.GetAskId(), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_ANSWERED, Answer: "y", At: day1}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.ExtendAsk(t.Context(), a.GetAskId(), later.Add(time.Hour)); err != nil || !got.GetExpireTime().AsTime().Equal(later) {
		t.Errorf("ExtendAsk of an answered ask = %v, %v; want nothing changed", got, err)
	}
	if _, err := s.ExtendAsk(t.Context(), ids.New("ask"), later); !errors.Is(err, owner.ErrNotFound) {
		t.Errorf("ExtendAsk(unknown) err = %v, want ErrNotFound", err)
	}
}

func testResolveFirstWins(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	a := createAsk(t, s, newAsk("agent-a", day1, "yes", "no"))
	at := day1.Add(5 * time.Minute)
	got, changed, err := s.ResolveAsk(t.Context(), a.GetAskId(), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_ANSWERED, Answer: "yes", AnsweredBy: "owner", At: at})
	if err != nil || !changed {
		t.Fatalf("ResolveAsk = changed %v, %v; want the ask answered", changed, err)
	}
	want := proto.Clone(a).(*ownerv1.Ask)
	want.Status, want.Answer, want.AnsweredBy, want.ResolveTime = ownerv1.AskStatus_ASK_STATUS_ANSWERED, "yes", "owner", timestamppb.New(at)
	prototest.Equal(t, "answered ask", got, want)

	again, changed, err := s.ResolveAsk(t.Context(), a.GetAskId(), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED, At: at.Add(time.Hour)})
	if err != nil || changed {
		t.Fatalf("second ResolveAsk = changed %v, %v; want nothing changed", changed, err)
	}
	prototest.Equal(t, "ask after a second outcome", again, want)

	if _, _, err := s.ResolveAsk(t.Context(), ids.New("ask"), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED, At: at}); !errors.Is(err, owner.ErrNotFound) {
		t.Errorf("ResolveAsk(unknown) err = %v, want ErrNotFound", err)
	}

	// DeleteAsk removes pending asks only.
	if err := s.DeleteAsk(t.Context(), a.GetAskId()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAsk(t.Context(), a.GetAskId()); err != nil {
		t.Errorf("DeleteAsk removed an answered ask: %v", err)
	}
	pending := createAsk(t, s, newAsk("agent-a", day1.Add(time.Minute)))
	if err := s.DeleteAsk(t.Context(), pending.GetAskId()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAsk(t.Context(), pending.GetAskId()); !errors.Is(err, owner.ErrNotFound) {
		t.Errorf("GetAsk after DeleteAsk of a pending ask: %v, want ErrNotFound", err)
	}
}

func testConcurrentResolve(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	a := createAsk(t, s, newAsk("agent-a", day1))
	const n = 8
	wins := make(chan string, n)
	sqldbtest.Race(t, db, n, func(i int) {
		answer := fmt.Sprintf("answer %d", i)
		got, changed, err := s.ResolveAsk(t.Context(), a.GetAskId(), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_ANSWERED, Answer: answer, At: day1.Add(time.Minute)})
		if err != nil {
			t.Error(err)
			return
		}
		if changed {
			wins <- answer
		}
		if got.GetStatus() != ownerv1.AskStatus_ASK_STATUS_ANSWERED {
			t.Errorf("ResolveAsk returned status %v", got.GetStatus())
		}
	})
	close(wins)
	var won []string
	for w := range wins {
		won = append(won, w)
	}
	if len(won) != 1 {
		t.Fatalf("%d concurrent outcomes changed the ask (%q), want exactly 1", len(won), won)
	}
	if got, _ := s.GetAsk(t.Context(), a.GetAskId()); got.GetAnswer() != won[0] {
		t.Errorf("stored answer %q, want the winner's %q", got.GetAnswer(), won[0])
	}
}

func testSeededLogChannel(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	list, total, err := s.ListChannels(t.Context(), 0, 50)
	if err != nil {
		t.Fatal(err)
	}
	if total != 1 || len(list) != 1 {
		t.Fatalf("a new database has %d channels, want the log channel", total)
	}
	c := list[0]
	if c.Name != "log" || c.Kind != ownerv1.ChannelKind_CHANNEL_KIND_LOG || !c.Enabled ||
		c.MinLevel != ownerv1.NotificationLevel_NOTIFICATION_LEVEL_INFO || time.Since(c.Created) > time.Hour {
		t.Errorf("seeded channel = %+v, want an enabled log channel named log taking every level, created now", c)
	}
}

func testChannelCRUD(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	ctx := t.Context()
	c := &owner.Channel{
		ID: ids.NewAt("chn", day1), Name: "ops-hook", Kind: ownerv1.ChannelKind_CHANNEL_KIND_WEBHOOK, Enabled: true,
		MinLevel: ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING, WebhookURL: "https://hooks.example.com/T0/B1/secret-path",
		WebhookSecret: "0123456789abcdef-secret", Created: day1, Updated: day1,
	}
	if err := s.CreateChannel(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetChannel(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(c, got); diff != "" {
		t.Errorf("GetChannel (-want +got):\n%s", diff)
	}
	upd := *c
	upd.Enabled, upd.MinLevel, upd.WebhookURL, upd.WebhookSecret, upd.Updated = false, ownerv1.NotificationLevel_NOTIFICATION_LEVEL_CRITICAL, "https://hooks.example.com/new", "", day1.Add(time.Hour)
	if err := s.UpdateChannel(ctx, &upd); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetChannel(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&upd, got); diff != "" {
		t.Errorf("channel after UpdateChannel (-want +got):\n%s", diff)
	}
	deleted, err := s.DeleteChannel(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&upd, deleted); diff != "" {
		t.Errorf("DeleteChannel returned (-want +got):\n%s", diff)
	}
	if _, err := s.GetChannel(ctx, c.ID); !errors.Is(err, owner.ErrNotFound) {
		t.Errorf("GetChannel after delete err = %v, want ErrNotFound", err)
	}
	if _, err := s.DeleteChannel(ctx, c.ID); !errors.Is(err, owner.ErrNotFound) {
		t.Errorf("DeleteChannel twice err = %v, want ErrNotFound", err)
	}
	if err := s.UpdateChannel(ctx, &upd); !errors.Is(err, owner.ErrNotFound) {
		t.Errorf("UpdateChannel of a deleted channel err = %v, want ErrNotFound", err)
	}
}

func testChannelNameTaken(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	c := &owner.Channel{ID: ids.New("chn"), Name: "log", Kind: ownerv1.ChannelKind_CHANNEL_KIND_LOG, Enabled: true,
		MinLevel: ownerv1.NotificationLevel_NOTIFICATION_LEVEL_INFO, Created: day1, Updated: day1}
	if err := s.CreateChannel(t.Context(), c); !errors.Is(err, owner.ErrNameTaken) {
		t.Errorf("CreateChannel with the seeded channel's name err = %v, want ErrNameTaken", err)
	}
}

func testEnabledAndPages(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	ctx := t.Context()
	for i, name := range []string{"zeta", "alpha", "mid"} {
		c := &owner.Channel{ID: ids.New("chn"), Name: name, Kind: ownerv1.ChannelKind_CHANNEL_KIND_LOG, Enabled: i != 2,
			MinLevel: ownerv1.NotificationLevel_NOTIFICATION_LEVEL_INFO, Created: day1, Updated: day1}
		if err := s.CreateChannel(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	names := func(list []*owner.Channel) []string {
		var out []string
		for _, c := range list {
			out = append(out, c.Name)
		}
		return out
	}
	enabled, err := s.EnabledChannels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"alpha", "log", "zeta"}, names(enabled)); diff != "" {
		t.Errorf("EnabledChannels (-want +got):\n%s", diff)
	}
	page, total, err := s.ListChannels(ctx, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"log", "mid"}, names(page)); diff != "" || total != 4 {
		t.Errorf("ListChannels(1, 2): total %d, names (-want +got):\n%s", total, diff)
	}
}

// TestReopen checks that a store opened again on the same database keeps
// its data and does not run its migrations (the log channel's seed) again.
func TestReopen(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		dsn := e.NewDSN(t)
		s := openStore(t, sqldbtest.Open(t, dsn))
		a := createAsk(t, s, newAsk("agent-a", day1))
		if _, err := s.DeleteChannel(t.Context(), "chn_00000000000000000000000000"); err != nil {
			t.Fatalf("delete the seeded log channel: %v", err)
		}
		s2 := openStore(t, sqldbtest.Open(t, dsn))
		got, err := s2.GetAsk(t.Context(), a.GetAskId())
		if err != nil {
			t.Fatal(err)
		}
		prototest.Equal(t, "ask after reopening", got, a)
		if _, total, err := s2.ListChannels(t.Context(), 0, 50); err != nil || total != 0 {
			t.Errorf("after deleting the log channel and reopening: %d channels (err %v), want 0 (the seed runs once)", total, err)
		}
	})
}

// outboxNames are the names of the events in db's outbox, oldest first,
// with the ask ids of their payloads.
func outboxNames(t *testing.T, db *sqldb.DB) []string {
	t.Helper()
	occs, err := outbox.Pull(t.Context(), db, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range occs {
		m, err := o.GetPayload().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		id := m.ProtoReflect().Get(m.ProtoReflect().Descriptor().Fields().ByName("ask_id")).String()
		if o.GetEventId() != outbox.ID(o.GetName(), id) {
			t.Errorf("event %s of %s has id %s, want the id derived from the change", o.GetName(), id, o.GetEventId())
		}
		out = append(out, o.GetName()+" "+id)
	}
	return out
}

func testAskEvents(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	a := createAsk(t, s, newAsk("agent-a", day1, "yes", "no"))
	if _, created, err := s.CreateAsk(ctx, proto.Clone(a).(*ownerv1.Ask), digest(a)); err != nil || created {
		t.Fatalf("a retried CreateAsk = created %v, %v", created, err)
	}
	b := createAsk(t, s, newAsk("agent-b", day1.Add(time.Second)))
	c := createAsk(t, s, newAsk("agent-b", day1.Add(2*time.Second)))
	if _, _, err := s.ResolveAsk(ctx, a.GetAskId(), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_ANSWERED, Answer: "yes", At: day1.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ResolveAsk(ctx, a.GetAskId(), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED, At: day1.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ResolveAsk(ctx, b.GetAskId(), owner.Outcome{Status: ownerv1.AskStatus_ASK_STATUS_EXPIRED, At: day1.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ask.created " + a.GetAskId(), "ask.created " + b.GetAskId(), "ask.created " + c.GetAskId(),
		"ask.answered " + a.GetAskId(), "ask.expired " + b.GetAskId(),
	}
	if diff := cmp.Diff(want, outboxNames(t, db)); diff != "" {
		t.Errorf("the outbox (-want +got):\n%s", diff)
	}
	// An ask deleted before its event left the outbox takes the event
	// with it; one whose event left already ends as cancelled.
	if err := s.DeleteAsk(ctx, c.GetAskId()); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.Ack(ctx, db, []string{outbox.ID("ask.created", a.GetAskId())}); err != nil {
		t.Fatal(err)
	}
	d := createAsk(t, s, newAsk("agent-b", day1.Add(3*time.Second)))
	if _, err := outbox.Ack(ctx, db, []string{outbox.ID("ask.created", d.GetAskId())}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAsk(ctx, d.GetAskId()); err != nil {
		t.Fatal(err)
	}
	want = []string{"ask.created " + b.GetAskId(), "ask.answered " + a.GetAskId(), "ask.expired " + b.GetAskId(), "ask.cancelled " + d.GetAskId()}
	if diff := cmp.Diff(want, outboxNames(t, db)); diff != "" {
		t.Errorf("the outbox after deletes (-want +got):\n%s", diff)
	}
}
