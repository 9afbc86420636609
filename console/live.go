package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// hub keeps the browsers' inboxes live: while at least one browser
// listens, one poller per console process reads the pending asks every
// interval, and when they changed it tells every listener (a version
// number, never the asks: each browser then fetches its own view with its
// own session).
type hub struct {
	interval time.Duration
	poll     func(ctx context.Context, p person) (string, error)
	log      *slog.Logger

	mu      sync.Mutex
	subs    map[chan uint64]person
	version uint64
	digest  string
	stop    context.CancelFunc
}

func newHub(interval time.Duration, poll func(context.Context, person) (string, error), log *slog.Logger) *hub {
	return &hub{interval: interval, poll: poll, log: log, subs: map[chan uint64]person{}}
}

// subscribe adds a listener acting as p; it gets the current version at
// once and each new one after. The poller starts with the first listener.
func (h *hub) subscribe(p person) (ch chan uint64, version uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch = make(chan uint64, 1)
	h.subs[ch] = p
	if h.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		go h.run(ctx)
	}
	return ch, h.version
}

// unsubscribe removes a listener; the poller stops with the last one.
func (h *hub) unsubscribe(ch chan uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, ch)
	if len(h.subs) == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// reader is a listener whose credentials may read every pending ask (an
// owner), or false when none listens.
func (h *hub) reader() (person, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.subs {
		if p.Owner {
			return p, true
		}
	}
	return person{}, false
}

func (h *hub) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	failing := false
	for {
		if p, ok := h.reader(); ok {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			d, err := h.poll(pctx, p)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil:
				if !failing {
					h.log.Warn("console.poll_failed", "error", err)
				}
				failing = true
			case err == nil:
				failing = false
				h.changed(d)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// changed records the digest of what the poller read and, when it
// differs from the last, tells every listener.
func (h *hub) changed(digest string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if digest == h.digest {
		return
	}
	h.digest = digest
	h.version++
	for ch := range h.subs {
		select {
		case <-ch: // a listener that has not read the last: it gets the newest
		default:
		}
		ch <- h.version
	}
}

// events streams the inbox's versions to a browser as server-sent events
// ("event: inbox"), with a comment every 20 seconds to keep proxies from
// closing it.
func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	ch, v := c.live.subscribe(s.Person)
	defer c.live.unsubscribe(ch)
	send := func(v uint64) bool {
		_, err := fmt.Fprintf(w, "event: inbox\ndata: %s\n\n", strconv.FormatUint(v, 10))
		fl.Flush()
		return err == nil
	}
	if !send(v) {
		return
	}
	keep := time.NewTicker(20 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case v := <-ch:
			if !send(v) {
				return
			}
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// pendingDigest reads every pending ask as p and sums up which there are.
func (c *Console) pendingDigest(ctx context.Context, p person) (string, error) {
	sum := sha256.New()
	for offset := 0; ; {
		asks, pg, err := c.listPending(ctx, p, offset, 200)
		if err != nil {
			return "", err
		}
		for _, a := range asks {
			fmt.Fprintf(sum, "%s\n", a.AskID)
		}
		if pg == nil || pg.NextOffset == nil || *pg.NextOffset <= offset {
			break
		}
		offset = *pg.NextOffset
	}
	scheds, _, err := c.listPendingSchedules(ctx, p, 0, 200)
	if err != nil {
		fmt.Fprintf(sum, "schedules unreadable\n")
	}
	for _, s := range scheds {
		fmt.Fprintf(sum, "%s %s\n", s.ID, s.SpecHash)
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}
