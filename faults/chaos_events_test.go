//go:build faults

package faults

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/toolmesh/toolmesh/internal/testsupport/mcpevents"
)

// chaosEventNames are the events the chaos run subscribes to by webhook:
// the workload's asks are created and answered all through the run.
var chaosEventNames = []string{"ask.created", "ask.answered"}

// eventsSubscriber is a webhook subscriber of the fault cases and the
// chaos run: it subscribes through the edge (events/subscribe) to some
// event types, and its
// receiver verifies every post's Standard Webhooks signature and keeps the
// first receipt of each event id. For a window of the run it answers 503,
// as a receiver that is down does.
type eventsSubscriber struct {
	wh     *standardwebhooks.Webhook
	srv    *httptest.Server
	names  []string
	starts map[string]string // event name -> the cursor its subscription started at

	mu                sync.Mutex
	downFrom, downTo  time.Time
	first             map[string]time.Time // event id -> first receipt
	stamp             map[string]time.Time // event id -> the event's time
	posts, dups       int
	badSigs, whileOut int
}

// startEventsSubscriber subscribes to names on the edge at mcpURL; its
// receiver is down in [downFrom, downTo).
func startEventsSubscriber(t *testing.T, mcpURL string, hc *http.Client, downFrom, downTo time.Time, names ...string) *eventsSubscriber {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	s := &eventsSubscriber{wh: wh, names: names, starts: map[string]string{}, downFrom: downFrom, downTo: downTo,
		first: map[string]time.Time{}, stamp: map[string]time.Time{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.receive))
	t.Cleanup(s.srv.Close)
	c := &mcpevents.Client{URL: mcpURL, HTTP: hc}
	ttl := int64(time.Hour / time.Millisecond)
	for _, name := range names {
		res, err := c.Subscribe(t.Context(), mcpevents.SubscribeParams{Name: name, TTLMs: &ttl,
			Delivery: mcpevents.Delivery{URL: s.srv.URL + "/" + name, Secret: secret}})
		if err != nil {
			t.Fatalf("events/subscribe %s: %v", name, err)
		}
		s.starts[name] = res.Cursor
		// Ended before the receiver closes (cleanups run last first).
		t.Cleanup(func() {
			if err := c.Unsubscribe(context.Background(), name, nil, s.srv.URL+"/"+name); err != nil {
				t.Logf("events/unsubscribe %s: %v", name, err)
			}
		})
	}
	return s
}

func (s *eventsSubscriber) receive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadRequest)
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts++
	if !now.Before(s.downFrom) && now.Before(s.downTo) {
		s.whileOut++
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	if err := s.wh.Verify(body, r.Header); err != nil {
		s.badSigs++
		http.Error(w, "signature", http.StatusBadRequest)
		return
	}
	var ev mcpevents.Occurrence
	if err := json.Unmarshal(body, &ev); err != nil || ev.EventID == "" {
		// A notice (a subscription that ended) carries no event.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if _, seen := s.first[ev.EventID]; seen {
		s.dups++
	} else {
		s.first[ev.EventID] = now
		if at, err := time.Parse(time.RFC3339Nano, ev.Timestamp); err == nil {
			s.stamp[ev.EventID] = at
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// recorded polls the event log through the edge from where each
// subscription started: every event the subscriptions were owed.
func (s *eventsSubscriber) recorded(t *testing.T, mcpURL string, hc *http.Client) []string {
	t.Helper()
	c := &mcpevents.Client{URL: mcpURL, HTTP: hc}
	var ids []string
	for _, name := range s.names {
		cursor := s.starts[name]
		for {
			res, err := c.Poll(t.Context(), mcpevents.PollParams{Name: name, Cursor: &cursor})
			if err != nil {
				t.Fatalf("events/poll %s: %v", name, err)
			}
			if res.Truncated {
				t.Errorf("events/poll %s: truncated; the run outlived the event log's retention", name)
			}
			for _, e := range res.Events {
				ids = append(ids, e.EventID)
			}
			cursor = res.Cursor
			if !res.HasMore {
				break
			}
		}
	}
	return ids
}

// check waits until every event the event log recorded for the
// subscriptions has reached the receiver, then reports the figures: none
// lost, none with a bad signature, duplicates suppressed by id, the
// longest delay.
func (s *eventsSubscriber) check(t *testing.T, mcpURL string, hc *http.Client) {
	t.Helper()
	ids := s.recorded(t, mcpURL, hc)
	missing := func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { _, ok := s.first[id]; return ok })
	}
	// Retries back off to minutes: a receiver that was down is caught up
	// within a few.
	deadline := time.Now().Add(5 * time.Minute)
	for len(missing()) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	lost := missing()
	s.mu.Lock()
	defer s.mu.Unlock()
	var longest time.Duration
	for id, at := range s.first {
		if d := at.Sub(s.stamp[id]); d > longest && !s.stamp[id].IsZero() {
			longest = d
		}
	}
	figure(t, "events recorded for the webhook subscriber / delivered", fmt.Sprintf("%d / %d", len(ids), len(ids)-len(lost)), "all delivered", len(lost) == 0 && len(ids) > 0)
	if len(lost) > 0 {
		t.Logf("events not delivered: %v", lost[:min(10, len(lost))])
	}
	figure(t, "webhook posts (refused while the receiver was down / duplicates suppressed by id / bad signatures)",
		fmt.Sprintf("%d (%d / %d / %d)", s.posts, s.whileOut, s.dups, s.badSigs), "0 bad signatures", s.badSigs == 0)
	report(t, "seconds from an event to its first delivery, longest (receiver down for "+s.downTo.Sub(s.downFrom).Round(time.Second).String()+")",
		longest.Seconds(), "<= 300", longest <= 5*time.Minute)
}
