package egress_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/toolmesh/toolmesh/internal/egress"
)

func TestPin(t *testing.T) {
	public := netip.MustParseAddr("93.184.215.14")
	answers := map[string][][]netip.Addr{
		"example.com": {{public}, {public}},
		// Public when CheckURL asks, loopback when Pin asks again.
		"rebinding.example": {{public}, {netip.MustParseAddr("127.0.0.1")}},
	}
	asked := map[string]int{}
	p := egress.Policy{Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		list := answers[host]
		if len(list) == 0 {
			return nil, errors.New("no such host")
		}
		a := list[min(asked[host], len(list)-1)]
		asked[host]++
		return a, nil
	}}
	ctx := context.Background()
	for raw, want := range map[string]egress.Pinned{
		"https://example.com/owner/repo.git":   {Host: "example.com", Port: "443", Addr: public},
		"http://example.com:8080/repo.git":     {Host: "example.com", Port: "8080", Addr: public},
		"https://93.184.215.14/repo.git":       {Host: "93.184.215.14", Port: "443", Addr: public},
		"http://[2606:2800:21f:cb07::1]/x.git": {Host: "2606:2800:21f:cb07::1", Port: "80", Addr: netip.MustParseAddr("2606:2800:21f:cb07::1")},
	} {
		got, err := p.Pin(ctx, raw)
		if err != nil || got != want {
			t.Errorf("Pin(%s) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{
		"https://rebinding.example/repo.git", "http://127.0.0.1:8080/repo.git", "https://user:token@example.com/repo.git",
		"ssh://example.com/repo.git", "https://unknown.example/repo.git",
	} {
		if got, err := p.Pin(ctx, raw); err == nil {
			t.Errorf("Pin(%s) = %+v, want refused", raw, got)
		}
	}
	if _, err := p.Pin(ctx, "http://127.0.0.1:8080/repo.git"); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("Pin of loopback: %v, want ErrRefused", err)
	}
	allowed := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	if got, err := allowed.Pin(ctx, "http://127.0.0.1:8080/repo.git"); err != nil || got.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("Pin of allowed loopback = %+v, %v", got, err)
	}
}
