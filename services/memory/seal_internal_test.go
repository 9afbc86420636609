package memory

import (
	"encoding/base64"
	"testing"
)

// TestSealerOpensWhatEarlierReleasesSealed: a body, key id and index term
// made by memory's own AES-GCM code before it moved to internal/seal (the
// values below were computed with it, key 0x01..0x20) are what the sealer
// opens and makes now, so memory encrypted by an earlier release still
// reads and its recall still finds it.
func TestSealerOpensWhatEarlierReleasesSealed(t *testing.T) {
	key := make([]byte, KeySize)
	for i := range key {
		key[i] = byte(i + 1)
	}
	s, err := newSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	if want := "753c29351123c7c9"; s.id != want {
		t.Errorf("key id %s, want %s (the earlier release's): a database it encrypted would be refused", s.id, want)
	}
	body, err := base64.StdEncoding.DecodeString("/P41GMHHOb7v45U1fK5vbrl+rii7WqERsPfZOO61ugbSg0qg72tUnSkvIH8ssTEREh9xeF7Tq0hV91t9ow==")
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.open(body, contentAAD("agent-a", "deploy-notes"))
	if err != nil || string(got) != "the deploy key rotates on Mondays" {
		t.Errorf("open the earlier release's body = %q, %v", got, err)
	}
	if _, err := s.open(body, contentAAD("agent-b", "deploy-notes")); err == nil {
		t.Error("the earlier release's body opened for another agent")
	}
	if got, want := s.term("agent-a", "deploy"), "boakdhlmnbcnebkckbdklbgf"; got != want {
		t.Errorf("index term %s, want %s (the earlier release's): recall would miss what it indexed", got, want)
	}
}
