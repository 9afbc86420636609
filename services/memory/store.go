package memory

import (
	"context"
	"errors"
	"time"
)

// Store keeps memories. Implementations live in memorystore (SQLite and
// PostgreSQL). A store never sees plaintext it should not keep: the service
// hands it content already sealed and index terms already hashed when
// encryption is on.
type Store interface {
	// InitKeyring records k as the database's keyring unless one is recorded
	// already, and returns the recorded one. It never replaces a recorded
	// keyring.
	InitKeyring(ctx context.Context, k Keyring) (Keyring, error)
	// Save stores r under (r.AgentID, r.Key), replacing the body, key id,
	// terms and update time of an existing memory (which keeps its create
	// time). It returns the memory as stored and whether it was new.
	Save(ctx context.Context, r Record) (Record, bool, error)
	// Search returns up to limit of the agent's memories whose terms contain
	// any of terms, best match first.
	Search(ctx context.Context, agentID string, terms []string, limit int) ([]Match, error)
	// Get returns the agent's memory under key, or ErrNotFound.
	Get(ctx context.Context, agentID, key string) (Record, error)
	// List returns one page of the agent's memories, most recently updated
	// first, and the total count.
	List(ctx context.Context, agentID string, offset, limit int) ([]Record, int, error)
	// Delete removes the agent's memory under key and returns it, or
	// ErrNotFound.
	Delete(ctx context.Context, agentID, key string) (Record, error)
}

// Record is a memory as stored.
type Record struct {
	AgentID string
	Key     string
	// Body is the content: UTF-8 text when KeyID is empty, else a nonce
	// followed by the AES-256-GCM ciphertext.
	Body []byte
	// KeyID names the key Body was sealed with; empty for plaintext.
	KeyID string
	// Terms are the index terms, separated by spaces: the content's words,
	// or their keyed hashes when encryption is on. Only written, never read
	// back.
	Terms      string
	CreateTime time.Time
	UpdateTime time.Time
}

// Match is a memory found by Search.
type Match struct {
	Record
	// Score is the relevance; higher is better.
	Score float64
}

// Keyring is the encryption setting a database was created with.
type Keyring struct {
	// KeyID names the key; empty when the database holds plaintext.
	KeyID string
	// Check is a known value sealed with the key, proving a key is the one
	// the database was created with.
	Check []byte
}

// ErrNotFound is returned for a memory that does not exist.
var ErrNotFound = errors.New("not found")
