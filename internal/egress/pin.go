package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"
)

// Pinned is a URL's host checked against a Policy, with the one address a
// connection to it must use.
type Pinned struct {
	// Host is the URL's host name (or literal address), Port its port
	// (the scheme's default when the URL names none).
	Host, Port string
	// Addr is an allowed address of Host.
	Addr netip.Addr
}

// Pin checks raw as CheckURL does and returns an allowed address of its
// host, for a client that resolves names itself (a child process such as
// git): connecting to that address, and only to it, leaves no window in
// which the name could resolve to a refused address (DNS rebinding).
func (p Policy) Pin(ctx context.Context, raw string) (Pinned, error) {
	if err := p.CheckURL(ctx, raw); err != nil {
		return Pinned{}, err
	}
	u, _ := url.Parse(raw) // CheckURL parsed it
	pin := Pinned{Host: u.Hostname(), Port: u.Port()}
	if pin.Port == "" {
		pin.Port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if a, err := netip.ParseAddr(pin.Host); err == nil {
		pin.Addr = a.Unmap()
		return pin, nil
	}
	lookup := p.Lookup
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := lookup(lctx, pin.Host)
	if err != nil || len(addrs) == 0 {
		return Pinned{}, fmt.Errorf("cannot resolve host %s", pin.Host)
	}
	// The name may answer differently now than when CheckURL asked: every
	// address of this answer is checked too.
	for _, a := range addrs {
		if err := p.Check(pin.Host, a); err != nil {
			return Pinned{}, err
		}
	}
	pin.Addr = addrs[0].Unmap()
	return pin, nil
}
