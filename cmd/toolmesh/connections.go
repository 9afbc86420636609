package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/services/connections"
	"github.com/toolmesh/toolmesh/services/connections/connectionsstore"
)

// connectionsOptions binds the keyring that seals the connections' upstream
// tokens. The keyring is read from a file (a mounted Secret in Kubernetes),
// never from the database.
func connectionsOptions(s *config.Set) buildFunc {
	var keyringPath string
	s.String(&keyringPath, "", config.Opt{Flag: "keyring-file", Env: "TOOLMESH_CONNECTIONS_KEYRING_FILE",
		Usage:   `file of the key-encryption keys that seal upstream tokens, one "<id> <base64 key>" a line, oldest first: the last seals new tokens, each opens what it sealed; toolmesh keygen creates one`,
		Default: "<data>/" + connectionsKeyringFile})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		keyringPath = orDataFile(keyringPath, deps.DataDir, connectionsKeyringFile)
		env, err := readConnectionsKeyring(keyringPath)
		if err != nil {
			return nil, err
		}
		st, err := connectionsstore.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		svc, err := connections.New(st, connections.Config{Envelope: env, Log: deps.Log})
		if err != nil {
			return nil, err
		}
		deps.Log.Info("connections.keyring", "file", keyringPath, "newest", env.Newest())
		// Tokens sealed under an older key are rewrapped under the newest
		// at start, so the older key can be removed once every replica
		// has restarted with the new keyring (docs/connections.md).
		deps.runBeside(ctx, func(ctx context.Context) {
			n, err := svc.Rewrap(ctx)
			switch {
			case err != nil:
				deps.Log.Error("connections.rewrap", "rewrapped", n, "error", err.Error())
			case n > 0:
				deps.Log.Info("connections.rewrap", "rewrapped", n, "newest", env.Newest())
			}
		})
		return []server.Service{svc.Registration()}, nil
	}
}

func readConnectionsKeyring(path string) (*seal.Envelope, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the connections keyring (create one with `toolmesh keygen`): %w", err)
	}
	keks, err := seal.ParseKeyring("connections keyring "+path, string(b))
	if err != nil {
		return nil, err
	}
	return seal.NewEnvelope(connections.SealPurpose, keks...)
}

// ensureConnectionsKeyring creates the connections keyring under dir, with
// one fresh key, unless one is there, and returns its path.
func ensureConnectionsKeyring(dir string) (path string, created bool, err error) {
	path = dataFile(dir, connectionsKeyringFile)
	if _, err := os.Stat(path); err == nil {
		return path, false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("connections keyring: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", false, fmt.Errorf("create data dir: %w", err)
	}
	key := make([]byte, seal.KeySize)
	if _, err := rand.Read(key); err != nil {
		return "", false, err
	}
	line := fmt.Sprintf("# toolmesh connections keyring: \"<id> <base64 key>\" a line, oldest first; the last seals.\n%s %s\n",
		time.Now().UTC().Format("2006-01-02"), base64.StdEncoding.EncodeToString(key))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("write connections keyring: %w", err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return "", false, fmt.Errorf("write connections keyring: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("write connections keyring: %w", err)
	}
	return path, true, nil
}
