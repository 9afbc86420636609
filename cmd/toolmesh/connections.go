package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/services/connections"
	"github.com/toolmesh/toolmesh/services/connections/connectionsstore"
)

// connectionsOptions binds the keyring that seals the connections' upstream
// tokens and the GitHub app client that refreshes GitHub's. The keyring and
// the client secret are read from files (mounted Secrets in Kubernetes),
// never from the database.
func connectionsOptions(s *config.Set) buildFunc {
	var keyringPath, ghClientID, ghSecretPath, ghURL string
	var allowList []string
	s.String(&keyringPath, "", config.Opt{Flag: "keyring-file", Env: "TOOLMESH_CONNECTIONS_KEYRING_FILE",
		Usage:   `file of the key-encryption keys that seal upstream tokens, one "<id> <base64 key>" a line, oldest first: the last seals new tokens, each opens what it sealed; toolmesh keygen creates one`,
		Default: "<data>/" + cli.ConnectionsKeyringFile})
	s.String(&ghClientID, "", config.Opt{Flag: "github-client-id", Env: "TOOLMESH_CONNECTIONS_GITHUB_CLIENT_ID",
		Usage: "client ID of the GitHub App (or OAuth app) agents' GitHub accounts are linked through; with it, expiring GitHub tokens are refreshed and unlinked ones revoked at GitHub"})
	s.String(&ghSecretPath, "", config.Opt{Flag: "github-client-secret-file", Env: "TOOLMESH_CONNECTIONS_GITHUB_CLIENT_SECRET_FILE",
		Usage: "file holding that app's client secret (never the database)"})
	s.String(&ghURL, "", config.Opt{Flag: "github-url", Env: "TOOLMESH_CONNECTIONS_GITHUB_URL",
		Usage: "web URL of the GitHub Enterprise Server the app lives on, and that personal access tokens the owner links are checked with (https://github.example.com); github.com when empty"})
	s.List(&allowList, config.Opt{Flag: "egress-allow", Env: "TOOLMESH_CONNECTIONS_EGRESS_ALLOW",
		Usage: "an internal address (CIDR prefix or single IP) the providers' token endpoints may be reached at anyway (an internal GitHub Enterprise Server)"})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		keyringPath = cli.OrDataFile(keyringPath, deps.DataDir, cli.ConnectionsKeyringFile)
		env, err := readConnectionsKeyring(keyringPath)
		if err != nil {
			return nil, err
		}
		allow, err := egress.ParsePrefixes(allowList...)
		if err != nil {
			return nil, fmt.Errorf("--egress-allow (TOOLMESH_CONNECTIONS_EGRESS_ALLOW): %w", err)
		}
		refreshers := map[connectionsv1.Provider]connections.Refresher{}
		revokers := map[connectionsv1.Provider]connections.Revoker{}
		// A personal access token the owner links is checked with GitHub
		// (GET /user), which names its account.
		identifiers := map[connectionsv1.Provider]connections.Identifier{
			connectionsv1.Provider_PROVIDER_GITHUB: connections.NewGitHubIdentifier(ghURL,
				egress.Policy{Allow: allow}.Client(egress.ClientOptions{Timeout: 20 * time.Second, MaxResponseBytes: 1 << 20})),
		}
		switch {
		case ghClientID != "" && ghSecretPath != "":
			secret, err := os.ReadFile(ghSecretPath)
			if err != nil {
				return nil, fmt.Errorf("--github-client-secret-file (TOOLMESH_CONNECTIONS_GITHUB_CLIENT_SECRET_FILE): %w", err)
			}
			client := egress.Policy{Allow: allow}.Client(egress.ClientOptions{Timeout: 20 * time.Second, MaxResponseBytes: 1 << 20})
			refreshers[connectionsv1.Provider_PROVIDER_GITHUB] = connections.GitHubRefresher(ghURL, ghClientID, strings.TrimSpace(string(secret)), client)
			revokers[connectionsv1.Provider_PROVIDER_GITHUB] = connections.NewGitHubRevoker(ghURL, ghClientID, strings.TrimSpace(string(secret)), client)
			deps.Log.Info("connections.refresher", "provider", "github", "client_id", ghClientID)
		case ghClientID != "" || ghSecretPath != "":
			return nil, errors.New("--github-client-id (TOOLMESH_CONNECTIONS_GITHUB_CLIENT_ID) and --github-client-secret-file (TOOLMESH_CONNECTIONS_GITHUB_CLIENT_SECRET_FILE) go together")
		}
		st, err := connectionsstore.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		svc, err := connections.New(st, connections.Config{Envelope: env, Refreshers: refreshers, Revokers: revokers, Identifiers: identifiers, Log: deps.Log})
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
	path = cli.DataFile(dir, cli.ConnectionsKeyringFile)
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
