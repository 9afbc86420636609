package audit_test

import (
	"testing"
	"time"

	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/services/audit"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// pinned is a fixed record. Its seq is 2^53 + 1, which a JSON number would
// round to 2^53; the reason has a non-ASCII character, quotes and a newline.
func pinned() *auditv1.Record {
	return &auditv1.Record{
		Seq:        9007199254740993,
		Time:       timestamppb.New(time.Date(2026, 3, 1, 12, 34, 56, 789_000_000, time.UTC)),
		Actor:      "owner@example.com",
		Tool:       "credits_grant",
		Reason:     "Quarterly top-up — \"ops\" ticket #42\n",
		ArgsDigest: "sha256:3febdcfbbfe2a508aaeaaa3b3c49bf2d074f5551da6424cb343690b27e4363ce",
		Outcome:    auditv1.Outcome_OUTCOME_SUCCEEDED,
		CallId:     "mcp-0123456789abcdef0123456789abcdef",
		PrevHash:   "71547e237559add83f6c9279fdb5762eafee857a1060e2d97c0316a70cefb6ba",
	}
}

// The expected values below were written by hand from the format described
// at Canonical and checked with Python's json and hashlib. They pin the
// record format: if either test fails, every stored chain would stop
// verifying, so change them only together with FormatVersion.

func TestCanonicalBytesArePinned(t *testing.T) {
	const want = `{"actor":"owner@example.com","args_digest":"sha256:3febdcfbbfe2a508aaeaaa3b3c49bf2d074f5551da6424cb343690b27e4363ce",` +
		`"call_id":"mcp-0123456789abcdef0123456789abcdef","outcome":"succeeded","reason":"Quarterly top-up — \"ops\" ticket #42\n",` +
		`"seq":"9007199254740993","time":"2026-03-01T12:34:56.789Z","tool":"credits_grant","v":1}`
	got, err := audit.Canonical(pinned())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("canonical JSON changed:\n got %s\nwant %s", got, want)
	}
}

func TestChainHashIsPinned(t *testing.T) {
	const want = "6d8ddbd48a44263a1b811d7e5d3cfb3ba3514894fcb392bad939fc4b14386536"
	r := pinned()
	if err := audit.Seal(r); err != nil {
		t.Fatal(err)
	}
	if r.GetHash() != want {
		t.Errorf("record hash = %s, want %s", r.GetHash(), want)
	}
}

// pinnedReplay is a replay of pinned, the next record of the chain.
func pinnedReplay() *auditv1.Record {
	r := pinned()
	r.Seq++
	r.Time = timestamppb.New(time.Date(2026, 3, 1, 12, 34, 57, 0, time.UTC))
	r.Outcome = auditv1.Outcome_OUTCOME_REPLAYED
	r.CallId = "mcp-client-retry-2"
	r.ReplayOf = pinned().GetCallId()
	r.PrevHash = "6d8ddbd48a44263a1b811d7e5d3cfb3ba3514894fcb392bad939fc4b14386536"
	return r
}

func TestReplayIsPinned(t *testing.T) {
	const want = `{"actor":"owner@example.com","args_digest":"sha256:3febdcfbbfe2a508aaeaaa3b3c49bf2d074f5551da6424cb343690b27e4363ce",` +
		`"call_id":"mcp-client-retry-2","outcome":"replayed","reason":"Quarterly top-up — \"ops\" ticket #42\n",` +
		`"replay_of":"mcp-0123456789abcdef0123456789abcdef","seq":"9007199254740994","time":"2026-03-01T12:34:57.000Z","tool":"credits_grant","v":1}`
	got, err := audit.Canonical(pinnedReplay())
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("canonical JSON of a replay changed:\n got %s\nwant %s", got, want)
	}
	r := pinnedReplay()
	if err := audit.Seal(r); err != nil {
		t.Fatal(err)
	}
	if want := "56a42319df23e4b8dd7a850efc65670c167024e94a2a42ab5f9f7b4d630ea522"; r.GetHash() != want {
		t.Errorf("replay hash = %s, want %s", r.GetHash(), want)
	}
	// What a replay repeats is covered by the hash.
	edited := pinnedReplay()
	edited.ReplayOf = "mcp-another-call"
	if err := audit.Seal(edited); err != nil {
		t.Fatal(err)
	}
	if edited.GetHash() == r.GetHash() {
		t.Error("changing replay_of leaves the hash unchanged")
	}
}

func TestEveryFieldIsCovered(t *testing.T) {
	base := pinned()
	if err := audit.Seal(base); err != nil {
		t.Fatal(err)
	}
	edits := map[string]func(r *auditv1.Record){
		"seq":         func(r *auditv1.Record) { r.Seq++ },
		"time":        func(r *auditv1.Record) { r.Time = timestamppb.New(r.GetTime().AsTime().Add(time.Millisecond)) },
		"actor":       func(r *auditv1.Record) { r.Actor += "x" },
		"tool":        func(r *auditv1.Record) { r.Tool = "credits_config_set" },
		"reason":      func(r *auditv1.Record) { r.Reason = "other" },
		"args_digest": func(r *auditv1.Record) { r.ArgsDigest = "sha256:" + audit.GenesisHash },
		"outcome":     func(r *auditv1.Record) { r.Outcome = auditv1.Outcome_OUTCOME_UNSPECIFIED },
		"call_id":     func(r *auditv1.Record) { r.CallId += "x" },
		"prev_hash":   func(r *auditv1.Record) { r.PrevHash = audit.GenesisHash },
	}
	for field, edit := range edits {
		r := pinned()
		edit(r)
		if err := audit.Seal(r); err != nil {
			t.Fatal(err)
		}
		if r.GetHash() == base.GetHash() {
			t.Errorf("changing %s leaves the hash unchanged", field)
		}
	}
}
