package messagesstore_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/services/messages"
	"github.com/toolmesh/toolmesh/services/messages/messagesstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the messages store on SQLite and on
// PostgreSQL.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "send and read back", Test: testSendRead},
		{Name: "reopen keeps messages", Test: testReopen},
		{Name: "duplicates within the window", Test: testDedup},
		{Name: "the window ends at the cutoff", Test: testDedupWindowEnd},
		{Name: "idempotency key", Test: testIdempotency},
		{Name: "concurrent identical sends", Test: testConcurrentDuplicates},
		{Name: "stress: racing sends with one key", Test: testStressSameKey},
		{Name: "concurrent distinct sends", Test: testConcurrentDistinct},
		{Name: "inbox newest first", Test: testInbox},
		{Name: "threads", Test: testThread},
	})
}

const (
	alice, bob, carol = "alice", "bob", "carol"
	noKey             = ""
)

// t0 is an arbitrary instant.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// window is the service's dedup window; the store gets its cutoff.
const window = messages.DedupWindow

func openStore(t *testing.T, db *sqldb.DB) *messagesstore.Store {
	return sqldbtest.OpenStore(t, db, messagesstore.Open)
}

// newMessage is a message as the service builds it: its time has
// millisecond precision and its id sorts by that time.
func newMessage(from, to, thread, text string, at time.Time) *messagesv1.Message {
	at = at.Truncate(time.Millisecond)
	if thread == "" {
		thread = ids.NewAt("thr", at)
	}
	return &messagesv1.Message{
		Id:         ids.NewAt("msg", at),
		ThreadId:   thread,
		FromAgent:  from,
		ToAgent:    to,
		Text:       text,
		CreateTime: timestamppb.New(at),
	}
}

// send stores m as the service does at m's time, and returns what the
// store answered.
func send(t *testing.T, s *messagesstore.Store, m *messagesv1.Message, key string) (*messagesv1.Message, bool) {
	t.Helper()
	got, dup, err := trySend(t, s, m, key)
	if err != nil {
		t.Fatalf("Send(%s, key %q): %v", m.GetId(), key, err)
	}
	return got, dup
}

func trySend(t *testing.T, s *messagesstore.Store, m *messagesv1.Message, key string) (*messagesv1.Message, bool, error) {
	sent, err := sendCall(t, s, m, key)
	return sent.Message, sent.Duplicate, err
}

// sendCall sends m as a call with key, with the request digest the service
// makes, and checks that Replayed is true exactly when the answer is
// neither m nor a duplicate.
func sendCall(t *testing.T, s *messagesstore.Store, m *messagesv1.Message, key string) (messages.Sent, error) {
	at := m.GetCreateTime().AsTime()
	req := &messagesv1.SendRequest{ToAgent: m.GetToAgent(), Message: m.GetText()}
	sent, err := s.Send(t.Context(), m, messages.DedupKey(m.GetText()), at.Add(-window), idempotency.Call{Key: key, Digest: idempotency.Digest(req)})
	if err == nil && sent.Replayed && sent.Message.GetId() == m.GetId() {
		return sent, fmt.Errorf("Send of %s says replayed, but answered the message itself", m.GetId())
	}
	return sent, err
}

// stored sends m and fails unless it was stored as itself.
func stored(t *testing.T, s *messagesstore.Store, m *messagesv1.Message, key string) *messagesv1.Message {
	t.Helper()
	got, dup := send(t, s, m, key)
	if dup {
		t.Fatalf("Send(%q from %s to %s) was suppressed as a duplicate of %s, want it stored", m.GetText(), m.GetFromAgent(), m.GetToAgent(), got.GetId())
	}
	prototest.Equal(t, "Send returned", got, m)
	return got
}

func inbox(t *testing.T, s *messagesstore.Store, agent string) []*messagesv1.Message {
	t.Helper()
	list, total, err := s.Inbox(t.Context(), agent, 0, 200)
	if err != nil {
		t.Fatalf("Inbox(%s): %v", agent, err)
	}
	if total != len(list) {
		t.Errorf("Inbox(%s): total %d for %d messages", agent, total, len(list))
	}
	return list
}

func testSendRead(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	m := newMessage(alice, bob, "", "Grüße ✓ — 'quotes', \"double quotes\", 100% and a ? too", t0.Add(123*time.Millisecond))
	m.Depth = 2
	stored(t, s, m, noKey)

	one, err := s.Get(ctx, m.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, one, protocmp.Transform()); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	if _, err := s.Get(ctx, ids.NewAt("msg", t0)); !errors.Is(err, messages.ErrNotFound) {
		t.Errorf("Get of an unknown id: %v, want ErrNotFound", err)
	}

	got := inbox(t, s, bob)
	if diff := cmp.Diff([]*messagesv1.Message{m}, got, protocmp.Transform()); diff != "" {
		t.Errorf("bob's inbox (-want +got):\n%s", diff)
	}
	if got := inbox(t, s, alice); len(got) != 0 {
		t.Errorf("the sender's inbox holds %v, want nothing: it has only what was sent to it", prototest.IDs(got))
	}
	for _, tc := range []struct {
		thread, agent string
		want          bool
	}{
		{m.GetThreadId(), alice, true},
		{m.GetThreadId(), bob, true},
		{m.GetThreadId(), carol, false},
		{ids.NewAt("thr", t0), alice, false},
	} {
		in, err := s.InThread(ctx, tc.thread, tc.agent)
		if err != nil {
			t.Fatal(err)
		}
		if in != tc.want {
			t.Errorf("InThread(%s, %s) = %v, want %v", tc.thread, tc.agent, in, tc.want)
		}
	}
}

func testReopen(t *testing.T, db *sqldb.DB) {
	m := newMessage(alice, bob, "", "kept", t0)
	stored(t, openStore(t, db), m, noKey)
	s := openStore(t, db) // migrations run again: a no-op
	if diff := cmp.Diff([]*messagesv1.Message{m}, inbox(t, s, bob), protocmp.Transform()); diff != "" {
		t.Errorf("bob's inbox after reopening (-want +got):\n%s", diff)
	}
	// The dedup slots survive too.
	if got, dup := send(t, s, newMessage(alice, bob, "", "kept", t0.Add(time.Second)), noKey); !dup || got.GetId() != m.GetId() {
		t.Errorf("a repeat after reopening = %s (duplicate %v), want %s suppressed", got.GetId(), dup, m.GetId())
	}
}

func testDedup(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	orig := stored(t, s, newMessage(alice, bob, "", "status report", t0), noKey)

	// The same text from the same sender to the same recipient, in another
	// thread, a little later: suppressed, and answered with the original.
	repeat := newMessage(alice, bob, "", "status report", t0.Add(window-time.Millisecond))
	got, dup := send(t, s, repeat, noKey)
	if !dup {
		t.Errorf("a repeat within the window was stored as %s, want it suppressed", got.GetId())
	}
	prototest.Equal(t, "a suppressed repeat returned", got, orig)

	// Another recipient, another sender, another text: each is new.
	stored(t, s, newMessage(alice, carol, "", "status report", t0.Add(time.Second)), noKey)
	stored(t, s, newMessage(carol, bob, "", "status report", t0.Add(time.Second)), noKey)
	stored(t, s, newMessage(alice, bob, "", "status report!", t0.Add(time.Second)), noKey)

	// Texts that share their first 200 characters repeat each other.
	long := strings.Repeat("é", messages.DedupPrefix)
	first := stored(t, s, newMessage(alice, bob, "", long+" and more", t0.Add(2*time.Second)), noKey)
	if got, dup := send(t, s, newMessage(alice, bob, "", long+" but different", t0.Add(3*time.Second)), noKey); !dup || got.GetId() != first.GetId() {
		t.Errorf("a text with the same first %d characters = %s (duplicate %v), want %s suppressed", messages.DedupPrefix, got.GetId(), dup, first.GetId())
	}

	if got := inbox(t, s, bob); len(got) != 4 {
		t.Errorf("bob's inbox holds %d messages, want 4: %v", len(got), prototest.IDs(got))
	}
}

// A message exactly as old as the window is no longer a reason to suppress:
// the repeat is stored, and becomes the message later repeats refer to.
func testDedupWindowEnd(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	stored(t, s, newMessage(alice, bob, "", "ping", t0), noKey)
	second := stored(t, s, newMessage(alice, bob, "", "ping", t0.Add(window)), noKey)
	got, dup := send(t, s, newMessage(alice, bob, "", "ping", t0.Add(window+time.Second)), noKey)
	if !dup {
		t.Errorf("a repeat of the second ping was stored as %s, want it suppressed", got.GetId())
	}
	prototest.Equal(t, "the repeat of the second ping returned", got, second)
	if got := inbox(t, s, bob); len(got) != 2 {
		t.Errorf("bob's inbox holds %d messages, want 2", len(got))
	}
}

func testIdempotency(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	first := stored(t, s, newMessage(alice, bob, "", "once", t0), "k1")

	// A retry within the window is a retry, not a suppressed duplicate.
	got, dup := send(t, s, newMessage(alice, bob, "", "once", t0.Add(time.Second)), "k1")
	if dup {
		t.Error("a retry with the same key was reported as a suppressed duplicate, want the first send's answer")
	}
	prototest.Equal(t, "a retry within the window returned", got, first)
	// Past the window the key still holds.
	got, dup = send(t, s, newMessage(alice, bob, "", "once", t0.Add(time.Hour)), "k1")
	if dup {
		t.Error("a late retry with the same key was reported as a suppressed duplicate")
	}
	prototest.Equal(t, "a retry past the window returned", got, first)
	// The same key with another request is refused and stores nothing.
	_, err := sendCall(t, s, newMessage(alice, carol, "", "something else", t0.Add(time.Hour)), "k1")
	sqldbtest.WantErr(t, "the same key with another message", err, idempotency.ErrKeyReused)

	// A keyed send suppressed as a duplicate answers so on retry, even
	// past the window, when the same text would be stored anew.
	dupOf, dup := send(t, s, newMessage(alice, bob, "", "once", t0.Add(2*time.Second)), "k3")
	if !dup || dupOf.GetId() != first.GetId() {
		t.Fatalf("a repeat under a new key = %v, duplicate %v; want a duplicate of %s", dupOf.GetId(), dup, first.GetId())
	}
	late, err := sendCall(t, s, newMessage(alice, bob, "", "once", t0.Add(time.Hour)), "k3")
	if err != nil || !late.Duplicate || !late.Replayed || late.Message.GetId() != first.GetId() {
		t.Errorf("a late retry of the suppressed send = %+v, %v; want the duplicate answer again, replayed", late, err)
	}

	// The key is the sender's own: another sender's k1 is a new message.
	stored(t, s, newMessage(bob, alice, "", "once", t0.Add(time.Second)), "k1")
	// Another key is a new message, within the dedup rules.
	stored(t, s, newMessage(alice, bob, "", "twice", t0.Add(time.Second)), "k2")

	if got := inbox(t, s, bob); len(got) != 2 {
		t.Errorf("bob's inbox holds %d messages, want 2: %v", len(got), prototest.IDs(got))
	}
	if got := inbox(t, s, carol); len(got) != 0 {
		t.Errorf("carol's inbox holds %v, want nothing: the retry addressed to her stored nothing", prototest.IDs(got))
	}
}

// sendConcurrently runs n sends at once; message(i) is the i-th message and
// key(i) its idempotency key.
func sendConcurrently(t *testing.T, db *sqldb.DB, s *messagesstore.Store, n int, message func(i int) *messagesv1.Message, key func(i int) string) ([]*messagesv1.Message, []bool, []error) {
	t.Helper()
	got, dups, errs := make([]*messagesv1.Message, n), make([]bool, n), make([]error, n)
	sqldbtest.Race(t, db, n, func(i int) {
		got[i], dups[i], errs[i] = trySend(t, s, message(i), key(i))
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	return got, dups, errs
}

func testConcurrentDuplicates(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	const n = 16
	got, dups, _ := sendConcurrently(t, db, s, n,
		func(i int) *messagesv1.Message {
			return newMessage(alice, bob, "", "same time", t0.Add(time.Duration(i)*time.Millisecond))
		},
		func(int) string { return noKey })
	list := inbox(t, s, bob)
	if len(list) != 1 {
		t.Fatalf("%d identical concurrent sends stored %d messages, want 1", n, len(list))
	}
	storedOnce := 0
	for i := range n {
		if !dups[i] {
			storedOnce++
		}
		prototest.Equal(t, fmt.Sprintf("send %d returned", i), got[i], list[0])
	}
	if storedOnce != 1 {
		t.Errorf("%d sends reported their message stored, want 1 (the rest suppressed)", storedOnce)
	}
}

// Racing sends with one key: a client retrying while its first send is in
// flight gets the first send's answer (the message, not a duplicate); the
// same key with another text is refused.
func testStressSameKey(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	var stored []string
	answered := sqldbtest.Stress(t, db, func(round, racer, variant int) sqldbtest.Outcome {
		m := newMessage(alice, bob, "", fmt.Sprintf("round %d, request %d", round, variant), t0.Add(time.Duration(racer)*time.Millisecond))
		sent, err := sendCall(t, s, m, fmt.Sprintf("key-%d", round))
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			return sqldbtest.Outcome{Reused: true}
		case err != nil:
			return sqldbtest.Outcome{Err: err}
		case sent.Duplicate:
			return sqldbtest.Outcome{Err: fmt.Errorf("send %s reported as a suppressed duplicate of %s", m.GetId(), sent.Message.GetId())}
		}
		return sqldbtest.Outcome{ID: sent.Message.GetId(), Created: !sent.Replayed}
	})
	for _, m := range inbox(t, s, bob) {
		stored = append(stored, m.GetId())
	}
	if diff := cmp.Diff(answered, stored, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("stored messages are not the ones answered (-answered +stored):\n%s", diff)
	}
}

func testConcurrentDistinct(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	const n = 16
	got, dups, _ := sendConcurrently(t, db, s, n,
		func(i int) *messagesv1.Message {
			return newMessage(alice, bob, "", fmt.Sprintf("message %d", i), t0.Add(time.Duration(i)*time.Millisecond))
		},
		func(i int) string { return fmt.Sprintf("key-%d", i) })
	for i := range n {
		if dups[i] {
			t.Errorf("send %d was suppressed, want it stored", i)
		}
	}
	if list := inbox(t, s, bob); len(list) != n {
		t.Errorf("%d distinct concurrent sends stored %d messages, want all: %v", n, len(list), prototest.IDs(got))
	}
}

// page checks one page of a listing.
func page(t *testing.T, what string, list []*messagesv1.Message, total int, err error, want []*messagesv1.Message, wantTotal int) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if diff := cmp.Diff(prototest.IDs(want), prototest.IDs(list)); diff != "" {
		t.Errorf("%s: ids (-want +got):\n%s", what, diff)
	} else if diff := cmp.Diff(want, list, protocmp.Transform(), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s: messages (-want +got):\n%s", what, diff)
	}
	if total != wantTotal {
		t.Errorf("%s: total = %d, want %d", what, total, wantTotal)
	}
}

func testInbox(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	// Five messages to bob a second apart, sent out of order, two of them
	// (3 and its twin) in the same millisecond; one to carol.
	var all [5]*messagesv1.Message
	for _, i := range []int{2, 0, 4, 1, 3} {
		all[i] = stored(t, s, newMessage([]string{alice, carol}[i%2], bob, "", fmt.Sprintf("note %d", i), t0.Add(time.Duration(i)*time.Second)), noKey)
	}
	twin := newMessage(alice, bob, "", "note 3, twin", t0.Add(3*time.Second))
	stored(t, s, twin, noKey)
	stored(t, s, newMessage(alice, carol, "", "not for bob", t0.Add(time.Hour)), noKey)

	// Within one millisecond the larger id comes first.
	three := []*messagesv1.Message{all[3], twin}
	if twin.GetId() > all[3].GetId() {
		three = []*messagesv1.Message{twin, all[3]}
	}
	newestFirst := append(append([]*messagesv1.Message{all[4]}, three...), all[2], all[1], all[0])
	for _, tc := range []struct {
		offset, limit int
		want          []*messagesv1.Message
	}{
		{0, 50, newestFirst},
		{0, 2, newestFirst[:2]},
		{2, 2, newestFirst[2:4]},
		{4, 2, newestFirst[4:]},
		{6, 2, nil},
	} {
		list, total, err := s.Inbox(ctx, bob, tc.offset, tc.limit)
		page(t, fmt.Sprintf("Inbox(bob, offset %d, limit %d)", tc.offset, tc.limit), list, total, err, tc.want, 6)
	}
	list, total, err := s.Inbox(ctx, "nobody", 0, 50)
	page(t, "Inbox(nobody)", list, total, err, nil, 0)
}

func testThread(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	// A thread between alice and bob, which carol joins later, and another
	// thread of alice's.
	start := stored(t, s, newMessage(alice, bob, "", "shall we?", t0), noKey)
	thread := start.GetThreadId()
	reply := stored(t, s, newMessage(bob, alice, thread, "yes", t0.Add(time.Second)), noKey)
	toCarol := stored(t, s, newMessage(bob, carol, thread, "carol, join us", t0.Add(2*time.Second)), noKey)
	fromCarol := stored(t, s, newMessage(carol, alice, thread, "here", t0.Add(3*time.Second)), noKey)
	other := stored(t, s, newMessage(alice, bob, "", "elsewhere", t0.Add(4*time.Second)), noKey)

	for _, tc := range []struct {
		agent         string
		offset, limit int
		want          []*messagesv1.Message
		total         int
	}{
		// Each agent sees the messages of the thread it sent or received.
		{alice, 0, 50, []*messagesv1.Message{fromCarol, reply, start}, 3},
		{bob, 0, 50, []*messagesv1.Message{toCarol, reply, start}, 3},
		{carol, 0, 50, []*messagesv1.Message{fromCarol, toCarol}, 2},
		{alice, 1, 1, []*messagesv1.Message{reply}, 3},
		{alice, 3, 1, nil, 3},
		{"dave", 0, 50, nil, 0},
	} {
		list, total, err := s.Thread(ctx, thread, tc.agent, tc.offset, tc.limit)
		page(t, fmt.Sprintf("Thread(%s, offset %d, limit %d)", tc.agent, tc.offset, tc.limit), list, total, err, tc.want, tc.total)
	}
	list, total, err := s.Thread(ctx, other.GetThreadId(), alice, 0, 50)
	page(t, "Thread(the other thread, alice)", list, total, err, []*messagesv1.Message{other}, 1)
	for _, agent := range []string{alice, bob, carol} {
		if in, err := s.InThread(ctx, thread, agent); err != nil || !in {
			t.Errorf("InThread(%s) = %v, %v; want true", agent, in, err)
		}
	}
	if in, err := s.InThread(ctx, other.GetThreadId(), carol); err != nil || in {
		t.Errorf("InThread(the other thread, carol) = %v, %v; want false", in, err)
	}
}
