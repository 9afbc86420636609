package requeststate_test

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/requeststate"
)

// FuzzOpen feeds arbitrary strings to the state parser and to Open:
//
//	go test -run '^$' -fuzz FuzzOpen ./internal/requeststate
//
// Neither may panic; Parse and Open must agree on what is malformed; and
// nothing but a state sealed with the fuzz sealer's key opens. The seed
// corpus is a valid state, its pieces and near misses (testdata/fuzz holds
// more).
func FuzzOpen(f *testing.F) {
	key, err := requeststate.NewKey(make([]byte, requeststate.KeySize))
	if err != nil {
		f.Fatal(err)
	}
	s, err := requeststate.NewSealer(key)
	if err != nil {
		f.Fatal(err)
	}
	valid, err := s.Seal(sample(), binding)
	if err != nil {
		f.Fatal(err)
	}
	raw, _ := base64.RawURLEncoding.DecodeString(valid)
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(valid + "A")
	f.Add(base64.RawURLEncoding.EncodeToString(raw[:len(raw)-32]))
	f.Add(base64.StdEncoding.EncodeToString(raw))
	f.Add("")
	f.Add("AQ")
	f.Add("AQEA")

	f.Fuzz(func(t *testing.T, tok string) {
		st, perr := requeststate.Parse(tok)
		opened, oerr := s.Open(tok, binding, now)
		if perr != nil && oerr == nil {
			t.Fatalf("Open accepted %q, which Parse refuses: %v", tok, perr)
		}
		if oerr != nil {
			return
		}
		if tok != valid {
			// Only the sealed state (or a string the MAC cannot tell from
			// it) may open; the strict encoding makes that string unique.
			t.Fatalf("Open accepted %q, which is not the sealed state", tok)
		}
		if opened.WorkflowID != st.WorkflowID || opened.Round != st.Round || !opened.Expires.Equal(st.Expires) {
			t.Fatalf("Open = %+v, Parse = %+v", opened, st)
		}
		if !opened.Expires.After(now) || opened.Expires.After(now.Add(time.Hour)) {
			t.Fatalf("opened state expires at %s", opened.Expires)
		}
	})
}
