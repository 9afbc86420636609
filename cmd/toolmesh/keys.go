package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/keyfile"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/requeststate"
)

// ensureMeshKeys creates an Ed25519 mesh key pair under dir unless one is
// there, and returns the paths of both files.
func ensureMeshKeys(dir string) (keyPath, pubPath string, created bool, err error) {
	keyPath, pubPath = cli.DataFile(dir, cli.MeshKeyFile), cli.DataFile(dir, cli.MeshPubKeyFile)
	created, err = keyfile.Ensure(keyPath, pubPath)
	if err != nil {
		return "", "", false, fmt.Errorf("mesh key: %w", err)
	}
	return keyPath, pubPath, created, nil
}

// ensureAuditKeys creates the audit service's checkpoint key pair under dir
// unless one is there, and returns the paths of both files.
func ensureAuditKeys(dir string) (keyPath, pubPath string, created bool, err error) {
	keyPath, pubPath = cli.DataFile(dir, cli.AuditKeyFile), cli.DataFile(dir, cli.AuditPubKeyFile)
	created, err = keyfile.Ensure(keyPath, pubPath)
	if err != nil {
		return "", "", false, fmt.Errorf("audit key: %w", err)
	}
	return keyPath, pubPath, created, nil
}

// ensureStateKey creates the request state key under dir unless one is
// there, and returns its path.
func ensureStateKey(dir string) (path string, created bool, err error) {
	path = cli.DataFile(dir, cli.StateKeyFile)
	if _, err := os.Stat(path); err == nil {
		return path, false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("request state key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", false, fmt.Errorf("create data dir: %w", err)
	}
	return path, true, writeStateKey(path)
}

func writeStateKey(path string) error {
	k, err := requeststate.GenerateKey()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write request state key: %w", err)
	}
	if _, err := f.Write(requeststate.MarshalKey(k)); err != nil {
		f.Close()
		return fmt.Errorf("write request state key: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write request state key: %w", err)
	}
	return nil
}

// rotateStateKey makes the current request state key the previous one
// (replacing the previous) and creates a new current key.
func rotateStateKey(dir string) (current, previous string, err error) {
	current, previous = cli.DataFile(dir, cli.StateKeyFile), cli.DataFile(dir, cli.StatePreviousKeyFile)
	if _, err := os.Stat(current); err != nil {
		return "", "", fmt.Errorf("no request state key to rotate (create one with toolmesh keygen): %w", err)
	}
	if err := os.Rename(current, previous); err != nil {
		return "", "", fmt.Errorf("rotate request state key: %w", err)
	}
	return current, previous, writeStateKey(current)
}

// keygenConfig is the configuration of `toolmesh keygen`.
type keygenConfig struct {
	dataDir string
	rotate  bool
}

func bindKeygen(s *config.Set) *keygenConfig {
	c := &keygenConfig{}
	cli.BindData(s, &c.dataDir, "directory for the key files")
	s.Bool(&c.rotate, false, config.Opt{Flag: "rotate-state-key", Usage: "make the request state key the previous one (still accepted) and create a new current key"})
	return c
}

func runKeygen(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s := cli.NewConfig("keygen", getenv, stderr)
	c := bindKeygen(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	dataDir, rotate := &c.dataDir, &c.rotate
	keyPath, pubPath, created, err := ensureMeshKeys(*dataDir)
	if err != nil {
		return err
	}
	verb := "kept existing"
	if created {
		verb = "created"
	}
	fmt.Fprintf(stdout, "%s mesh key pair:\n  private (edge, workers, toolmesh token)  %s\n  public  (services)                      %s\n", verb, keyPath, pubPath)
	auditKey, auditPub, created, err := ensureAuditKeys(*dataDir)
	if err != nil {
		return err
	}
	verb = "kept existing"
	if created {
		verb = "created"
	}
	fmt.Fprintf(stdout, "%s audit checkpoint key pair:\n  private (serve audit)                   %s\n  public  (toolmesh audit verify)         %s\n", verb, auditKey, auditPub)
	keyring, created, err := ensureConnectionsKeyring(*dataDir)
	if err != nil {
		return err
	}
	verb = "kept existing"
	if created {
		verb = "created"
	}
	fmt.Fprintf(stdout, "%s connections keyring (serve connections):\n  %s\n", verb, keyring)
	if *rotate {
		current, previous, err := rotateStateKey(*dataDir)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rotated the request state key (edge):\n  current  (seals and verifies)  %s\n  previous (verifies only)       %s\nrestart the edges to use it\n", current, previous)
		return nil
	}
	statePath, created, err := ensureStateKey(*dataDir)
	if err != nil {
		return err
	}
	verb = "kept existing"
	if created {
		verb = "created"
	}
	fmt.Fprintf(stdout, "%s request state key (edge):\n  %s\n", verb, statePath)
	return nil
}

// maxDevTokenTTL bounds `toolmesh token --ttl`.
const maxDevTokenTTL = 24 * time.Hour

// tokenConfig is the configuration of `toolmesh token`: where the key is,
// and the claims of the one token (flag-only).
type tokenConfig struct {
	dataDir, keyPath, agent, subject string
	depth                            int
	ttl                              time.Duration
	roles, grants                    []string
}

func bindToken(s *config.Set) *tokenConfig {
	c := &tokenConfig{}
	cli.BindData(s, &c.dataDir, "directory holding mesh.key")
	cli.BindMeshKey(s, &c.keyPath, "mesh private key file")
	s.String(&c.agent, "", config.Opt{Flag: "agent", Usage: "agent id the token acts as (required)"})
	s.String(&c.subject, "", config.Opt{Flag: "subject", Usage: "subject of the token", Default: "the agent"})
	s.Int(&c.depth, 0, config.Opt{Flag: "depth", Usage: "invocation depth"})
	s.Duration(&c.ttl, time.Hour, config.Opt{Flag: "ttl", Usage: "lifetime of the token (at most 24h)"})
	s.List(&c.roles, config.Opt{Flag: "role", Usage: "a role of the caller, e.g. owner"})
	s.List(&c.grants, config.Opt{Flag: "grant", Usage: "what the caller may call, as the edge's scopes say it (toolmesh:write, toolmesh:tool:<name>, * for every tool): what workflow runs it starts may call"})
	return c
}

func runToken(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s := cli.NewConfig("token", getenv, stderr)
	c := bindToken(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	dataDir, keyPath, agent, subject, depth, ttl, roles := &c.dataDir, &c.keyPath, &c.agent, &c.subject, &c.depth, &c.ttl, c.roles
	if *agent == "" {
		return errors.New("token needs --agent")
	}
	if *ttl <= 0 || *ttl > maxDevTokenTTL {
		return fmt.Errorf("--ttl must be between 1s and %s", maxDevTokenTTL)
	}
	*keyPath = cli.OrDataFile(*keyPath, *dataDir, cli.MeshKeyFile)
	key, err := cli.ReadMeshKey(*keyPath)
	if err != nil {
		return err
	}
	signer, err := mesh.NewSigner(key, "toolmesh-cli")
	if err != nil {
		return err
	}
	now := time.Now()
	tok, err := signer.Mint(mesh.Caller{Subject: *subject, Agent: *agent, Roles: roles, Depth: *depth, Grants: c.grants}, now, now.Add(*ttl))
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
