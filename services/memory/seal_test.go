package memory_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	memoryv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1"
	"github.com/toolmesh/toolmesh/services/memory"
)

// rawFiles returns the bytes of the SQLite database file and its WAL and
// shared-memory files.
func rawFiles(t *testing.T, path string) []byte {
	t.Helper()
	var all []byte
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if len(all) == 0 {
		t.Fatalf("no database files at %s", path)
	}
	return all
}

func TestEncryptionLeavesNoPlaintextAtRest(t *testing.T) {
	secretWords := []string{"zanzibar", "quetzalcoatl", "marmalade"}
	content := "Remember: the vault code is hidden in Zanzibar under the Quetzalcoatl statue, next to the marmalade."
	queryOnly := "xylophonist" // searched for, never saved

	run := func(t *testing.T, key []byte) (files []byte, logs string) {
		e := start(t, "", memory.Config{Key: key})
		c := e.client(servertest.Protocols()[0])
		ctx := servertest.As(context.Background(), "agent-a")
		save(t, c, ctx, "vault", content)
		save(t, c, ctx, "other", "zanzibar again, twice zanzibar")
		if got := recallKeys(t, c, ctx, "Quetzalcoatl marmalade", 0); !cmp.Equal(got, []string{"vault"}) {
			t.Fatalf("recall of saved words = %v, want [vault]", got)
		}
		if got := recallKeys(t, c, ctx, "zanzibar", 0); !cmp.Equal(got, []string{"other", "vault"}) {
			t.Fatalf("recall 'zanzibar' = %v, want [other vault]", got)
		}
		if got := recallKeys(t, c, ctx, queryOnly, 0); len(got) != 0 {
			t.Fatalf("recall %q = %v, want nothing", queryOnly, got)
		}
		files = rawFiles(t, e.path) // while running: the WAL holds the writes
		e.close()
		files = append(files, rawFiles(t, e.path)...) // after the checkpoint on close
		return files, e.logs.String()
	}

	t.Run("encrypted", func(t *testing.T) {
		key := testKey("at-rest")
		files, logs := run(t, key)
		lower := bytes.ToLower(files)
		for _, w := range append(secretWords, queryOnly) {
			if bytes.Contains(lower, []byte(w)) {
				t.Errorf("the raw database files contain %q in plaintext", w)
			}
			if strings.Contains(strings.ToLower(logs), w) {
				t.Errorf("the logs contain %q", w)
			}
		}
		for _, k := range [][]byte{key, []byte(base64.StdEncoding.EncodeToString(key))} {
			if bytes.Contains(files, k) || strings.Contains(logs, string(k)) {
				t.Error("the key itself is in the database files or the logs")
			}
		}
	})
	// The same check on an unencrypted database must find the words, or the
	// check above proves nothing.
	t.Run("plaintext control", func(t *testing.T) {
		files, _ := run(t, nil)
		lower := bytes.ToLower(files)
		for _, w := range secretWords {
			if !bytes.Contains(lower, []byte(w)) {
				t.Errorf("an unencrypted database does not contain %q: the raw-file check cannot see plaintext", w)
			}
		}
	})
}

func TestStartWithWrongKeyFailsAndKeepsData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory.db")
	keyA, keyB := testKey("a"), testKey("b")
	ctx := servertest.As(context.Background(), "agent-a")

	e := start(t, path, memory.Config{Key: keyA})
	save(t, e.client(servertest.Protocols()[0]), ctx, "plan", "Ship the lighthouse release.")
	e.close()
	before := rawFiles(t, path)

	tryStart := func(key []byte) error {
		db, st := openDB(t, path)
		defer db.Close()
		_, err := memory.New(context.Background(), st, memory.Config{Key: key})
		return err
	}
	err := tryStart(keyB)
	if !errors.Is(err, memory.ErrWrongKey) {
		t.Fatalf("start with another key: %v, want ErrWrongKey", err)
	}
	if !strings.Contains(err.Error(), "key id") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Errorf("wrong-key error %q does not name the key ids and say nothing changed", err)
	}
	for _, k := range [][]byte{keyA, keyB} {
		if strings.Contains(err.Error(), base64.StdEncoding.EncodeToString(k)) || strings.Contains(err.Error(), fmt.Sprintf("%x", k)) {
			t.Errorf("wrong-key error %q contains a key", err)
		}
	}
	if err := tryStart(nil); !errors.Is(err, memory.ErrKeyRequired) {
		t.Errorf("start without a key on an encrypted database: %v, want ErrKeyRequired", err)
	}
	if after := rawFiles(t, path); !bytes.Equal(before, after) {
		t.Error("the refused starts changed the database files")
	}

	// With the right key everything is there.
	e = start(t, path, memory.Config{Key: keyA})
	c := e.client(servertest.Protocols()[1])
	if got := recallKeys(t, c, ctx, "lighthouse", 0); !cmp.Equal(got, []string{"plan"}) {
		t.Errorf("after restarting with the right key, recall = %v, want [plan]", got)
	}
	res, err := c.List(ctx, &memoryv1.ListRequest{})
	if err != nil || len(res.GetMemories()) != 1 || res.GetMemories()[0].GetContent() != "Ship the lighthouse release." {
		t.Errorf("after restarting with the right key, List = %v (err %v)", res.GetMemories(), err)
	}
	e.close()

	// A plaintext database refuses a key rather than mixing modes.
	plain := filepath.Join(t.TempDir(), "plain.db")
	start(t, plain, memory.Config{}).close()
	db, st := openDB(t, plain)
	defer db.Close()
	if _, err := memory.New(context.Background(), st, memory.Config{Key: keyA}); !errors.Is(err, memory.ErrPlaintextDatabase) {
		t.Errorf("start with a key on a plaintext database: %v, want ErrPlaintextDatabase", err)
	}
}

func TestUnreadableRowsAreReportedNotGarbled(t *testing.T) {
	e := start(t, "", memory.Config{Key: testKey("a")})
	c := e.client(servertest.Protocols()[0])
	ctx := servertest.As(context.Background(), "agent-a")
	save(t, c, ctx, "alpha", "first memory about otters")
	save(t, c, ctx, "beta", "second memory about beavers")
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := e.db.ExecContext(context.Background(), q, args...); err != nil {
			t.Fatal(err)
		}
	}
	dataLoss := func(what string, err error, wantIn ...string) {
		t.Helper()
		if servertest.Code(t, err) != connect.CodeDataLoss {
			t.Errorf("%s: code %v, want data_loss", what, connect.CodeOf(err))
			return
		}
		for _, w := range wantIn {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: message %q does not mention %q", what, err, w)
			}
		}
	}
	var keyID string
	if err := e.db.QueryRowContext(context.Background(), `SELECT key_id FROM memories WHERE memory_key = 'alpha'`).Scan(&keyID); err != nil {
		t.Fatal(err)
	}

	// A row written with another key id.
	exec(`UPDATE memories SET key_id = '00112233aabbccdd' WHERE memory_key = 'alpha'`)
	_, err := c.List(ctx, &memoryv1.ListRequest{})
	dataLoss("List with a row of another key", err, `"alpha"`, "00112233aabbccdd", keyID)
	_, err = c.Recall(ctx, &memoryv1.RecallRequest{Query: "otters"})
	dataLoss("Recall of a row of another key", err, `"alpha"`, "00112233aabbccdd")
	if !strings.Contains(e.logs.String(), `"msg":"memory.unreadable"`) {
		t.Error("no memory.unreadable event was logged")
	}
	exec(`UPDATE memories SET key_id = ? WHERE memory_key = 'alpha'`, keyID)

	// A sealed body copied from another memory does not open.
	exec(`UPDATE memories SET body = (SELECT body FROM memories WHERE memory_key = 'beta') WHERE memory_key = 'alpha'`)
	_, err = c.Recall(ctx, &memoryv1.RecallRequest{Query: "otters"})
	dataLoss("Recall of a body copied from another memory", err, `"alpha"`, "authentication")

	// One flipped bit does not open either.
	var body []byte
	if err := e.db.QueryRowContext(context.Background(), `SELECT body FROM memories WHERE memory_key = 'beta'`).Scan(&body); err != nil {
		t.Fatal(err)
	}
	body[len(body)/2] ^= 1
	exec(`UPDATE memories SET body = ? WHERE memory_key = 'beta'`, body)
	_, err = c.Recall(ctx, &memoryv1.RecallRequest{Query: "beavers"})
	dataLoss("Recall of a tampered body", err, `"beta"`, "authentication")

	// Deleting or saving over is how such a memory is cleared.
	if _, err := c.Delete(ctx, &memoryv1.DeleteRequest{Key: "alpha"}); err != nil {
		t.Errorf("delete of an unreadable memory: %v", err)
	}
	save(t, c, ctx, "beta", "beavers rebuilt")
	if got := recallKeys(t, c, ctx, "beavers", 0); !cmp.Equal(got, []string{"beta"}) {
		t.Errorf("after clearing, recall = %v, want [beta]", got)
	}
}

func TestParseKey(t *testing.T) {
	key := testKey("parse")
	for _, s := range []string{base64.StdEncoding.EncodeToString(key), base64.RawStdEncoding.EncodeToString(key), " " + base64.StdEncoding.EncodeToString(key) + "\n"} {
		got, err := memory.ParseKey(s)
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("ParseKey(%q) = %x, %v; want the key", s, got, err)
		}
	}
	short := base64.StdEncoding.EncodeToString(key[:16])
	for _, s := range []string{short, "not base64 at all!", strings.Repeat("x", 44)} {
		_, err := memory.ParseKey(s)
		if err == nil {
			t.Errorf("ParseKey(%q) succeeded, want an error", s)
			continue
		}
		if strings.Contains(err.Error(), s) {
			t.Errorf("ParseKey error %q repeats the value", err)
		}
	}
}
