package mcpdoor

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/requeststate"
)

// countingDNS answers lookups from a table the test changes, and counts
// them.
type countingDNS struct {
	addrs   []netip.Addr
	fail    bool
	lookups int
}

func (d *countingDNS) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	d.lookups++
	if d.fail {
		return nil, errors.New("dns down")
	}
	return d.addrs, nil
}

// The peer name is looked up when its answer is older than peersTTL, or
// at once for an address it lacks (a replica that just started) unless a
// lookup ran in the last peersMinRefresh; failed lookups keep the last
// answer for peersMaxStale.
func TestPeerSetLooksNamesUpAsItMust(t *testing.T) {
	t.Parallel()
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	at := func(ip netip.Addr) netip.AddrPort { return netip.AddrPortFrom(ip, 8080) }
	dns := &countingDNS{addrs: []netip.Addr{a}}
	p, err := newPeerSet([]string{"edge-peers:8080", "192.0.2.9:8080"}, dns)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p.now = func() time.Time { return now }
	ctx := context.Background()
	step := func(what string, d time.Duration, addr netip.AddrPort, want bool, lookups int) {
		t.Helper()
		now = now.Add(d)
		if got := p.contains(ctx, addr); got != want || dns.lookups != lookups {
			t.Errorf("%s: contains(%s) = %v after %d lookups, want %v after %d", what, addr, got, dns.lookups, want, lookups)
		}
	}
	step("a listed address needs no lookup", 0, netip.MustParseAddrPort("192.0.2.9:8080"), true, 0)
	step("first use looks up", 0, at(a), true, 1)
	step("a known peer within the TTL", peersTTL-time.Millisecond, at(a), true, 1)
	step("another port is not a peer", 0, netip.AddrPortFrom(a, 9090), false, 2)
	step("a miss right after a lookup does not look up", peersMinRefresh/2, at(b), false, 2)
	dns.addrs = []netip.Addr{a, b}
	step("a miss later looks up and finds a new replica", peersMinRefresh, at(b), true, 3)
	step("past the TTL a known peer is looked up again", peersTTL, at(a), true, 4)
	dns.fail = true
	step("failed lookups keep the last answer", peersTTL, at(b), true, 5)
	step("for a while", peersMaxStale-peersTTL-time.Second, at(b), true, 6)
	step("then no longer", 2*time.Second, at(b), false, 7)
	dns.fail = false
	dns.addrs = []netip.Addr{b}
	step("a replica gone from the name is no peer", peersMinRefresh, at(a), false, 8)
}

func newTestSessions(t *testing.T, self string, keys ...requeststate.Key) *sessions {
	t.Helper()
	s, err := newSessions(&Sessions{Self: self, Peers: []string{"10.0.0.1:8080"}, Keys: keys}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSessionIDsNameTheirOwnerUnderEveryKeyHeld(t *testing.T) {
	t.Parallel()
	oldKey, newKey := generateKey(t), generateKey(t)
	before := newTestSessions(t, "10.0.0.1:8080", oldKey)
	during := newTestSessions(t, "[fd00::2]:8080", newKey, oldKey)
	after := newTestSessions(t, "10.0.0.3:8080", newKey)

	id := before.newID()
	if owner, err := during.owner(id); err != nil || owner.String() != "10.0.0.1:8080" {
		t.Errorf("during a rotation an id of the old key = %v, %v", owner, err)
	}
	if _, err := after.owner(id); !errors.Is(err, errSessionForged) {
		t.Errorf("once the old key is gone its id = %v, want forged", err)
	}
	if owner, err := after.owner(during.newID()); err != nil || owner.String() != "[fd00::2]:8080" {
		t.Errorf("an id of the new key = %v, %v", owner, err)
	}
	if before.newID() == id {
		t.Error("two sessions got the same id")
	}
}

func TestSessionsConfigurationIsChecked(t *testing.T) {
	t.Parallel()
	key := generateKey(t)
	for _, c := range []Sessions{
		{Self: ":8080", Peers: []string{"edge:8080"}, Keys: []requeststate.Key{key}},
		{Self: "0.0.0.0:8080", Peers: []string{"edge:8080"}, Keys: []requeststate.Key{key}},
		{Self: "edge-0:8080", Peers: []string{"edge:8080"}, Keys: []requeststate.Key{key}},
		{Self: "10.0.0.1", Peers: []string{"edge:8080"}, Keys: []requeststate.Key{key}},
		{Self: "10.0.0.1:8080", Peers: []string{"edge"}, Keys: []requeststate.Key{key}},
		{Self: "10.0.0.1:8080", Peers: []string{"edge:http"}, Keys: []requeststate.Key{key}},
		{Self: "10.0.0.1:8080", Keys: []requeststate.Key{key}},
		{Self: "10.0.0.1:8080", Peers: []string{"edge:8080"}},
	} {
		if _, err := newSessions(&c, logging.Discard()); err == nil {
			t.Errorf("%+v was accepted", c)
		}
	}
}

func generateKey(t *testing.T) requeststate.Key {
	t.Helper()
	k, err := requeststate.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
