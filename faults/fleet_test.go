//go:build faults

package faults

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// fleetAddrs is how many loopback addresses a fleet's connections come
// from.
const fleetAddrs = 8

// fleetClient is an HTTP client whose connections come from several
// loopback addresses in turn (127.0.0.2, .3, ...), as the callers of a
// workload on several machines would: the edge caps the connections one
// client address holds (512), and the chaos workload's hundreds of
// concurrent callers, retrying after a fault, are a fleet, not one client.
func fleetClient() *http.Client {
	var next atomic.Uint32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		from := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+next.Add(1)%fleetAddrs))}
		d := net.Dialer{LocalAddr: from, Timeout: 10 * time.Second}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, fmt.Errorf("dial from %s: %w", from.IP, err)
		}
		return c, nil
	}
	return &http.Client{Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}
}
