// Package ids makes the mesh's resource ids: a short kind prefix and 26
// lowercase Crockford base32 characters (48 bits of milliseconds, then 80
// random bits), so ids sort by creation time, e.g. "tsk_01jd8x...". Within
// one millisecond a process's ids sort in the order it made them too.
package ids

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"time"
)

// last is the millisecond and random part of the newest id this process
// made, so that the next id of the same millisecond sorts after it.
var last struct {
	sync.Mutex
	ms     uint64
	hi, lo uint64 // the random part: hi holds its top 16 bits
}

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// New returns a fresh id with the given prefix ("tsk" gives "tsk_...").
func New(prefix string) string {
	return NewAt(prefix, time.Now())
}

// NewAt returns a fresh id whose time part is t. An id made in the same
// millisecond as this process's newest one is that id's random part plus
// a random step of 1 to 2^32, so it sorts after it and is still not
// guessable from it; an id of an earlier millisecond (a clock set back) has
// no such order.
func NewAt(prefix string, t time.Time) string {
	var b [16]byte
	if _, err := rand.Read(b[6:]); err != nil {
		panic("ids: crypto/rand failed: " + err.Error())
	}
	ms := uint64(t.UnixMilli())
	rhi, rlo := uint64(binary.BigEndian.Uint16(b[6:8])), binary.BigEndian.Uint64(b[8:])
	last.Lock()
	if ms == last.ms {
		step := rlo&(1<<32-1) + 1
		lo, carry := last.lo+step, uint64(0)
		if lo < last.lo {
			carry = 1
		}
		if hi := last.hi + carry; hi < 1<<16 { // else: the random part is spent; keep the fresh one
			rhi, rlo = hi, lo
		}
	}
	if ms >= last.ms {
		last.ms, last.hi, last.lo = ms, rhi, rlo
	}
	last.Unlock()
	// 128 bits -> 26 base32 characters (the top 2 bits are zero).
	hi := ms<<16 | rhi
	lo := rlo
	out := make([]byte, len(prefix)+1+26)
	copy(out, prefix)
	out[len(prefix)] = '_'
	enc := out[len(prefix)+1:]
	for i := 25; i >= 0; i-- {
		enc[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}

// Derive returns the id with prefix that names, for good, what parts name
// within namespace: the same parts give the same id (a retried call finds
// what its first attempt made), different parts different ids. The 26
// characters are the first 128 bits of a SHA-256 over the namespace and
// the parts, in the encoding New uses.
func Derive(prefix, namespace string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte("toolmesh " + namespace))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	sum := h.Sum(nil)
	hi, lo := binary.BigEndian.Uint64(sum[:8]), binary.BigEndian.Uint64(sum[8:16])
	out := make([]byte, 26)
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return prefix + "_" + string(out)
}
