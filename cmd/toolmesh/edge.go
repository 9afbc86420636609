package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
)

// serviceFlag collects repeated --service domain=url flags.
type serviceFlag map[string]string

func (s serviceFlag) String() string { return fmt.Sprint(map[string]string(s)) }

func (s serviceFlag) Set(v string) error {
	name, url, ok := strings.Cut(v, "=")
	if !ok || name == "" || url == "" {
		return fmt.Errorf("want domain=url, got %q", v)
	}
	s[name] = url
	return nil
}

func runEdge(ctx context.Context, args []string, getenv func(string) string, log *slog.Logger) error {
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	addr := fs.String("addr", envOr(getenv, "TOOLMESH_EDGE_ADDR", "127.0.0.1:7100"), "listen address")
	services := serviceFlag{}
	fs.Var(services, "service", "a domain service as domain=url (repeatable), e.g. tasks=http://127.0.0.1:7101")
	timeout := fs.Duration("call-timeout", 15*time.Second, "deadline of each service call")
	agent := fs.String("dev-agent", envOr(getenv, "TOOLMESH_DEV_AGENT", "local"), "agent id of calls in development mode")
	dataDir := fs.String("data", envOr(getenv, "TOOLMESH_DATA", ".toolmesh"), "directory holding mesh.key")
	keyPath := fs.String("mesh-key", getenv("TOOLMESH_MESH_KEY"), "mesh private key file that signs service calls (default <data>/mesh.key)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(services) == 0 {
		for name, d := range domains {
			services[name] = fmt.Sprintf("http://127.0.0.1:%d", d.port)
		}
	}
	urls, err := serviceURLs(services)
	if err != nil {
		return err
	}
	if *keyPath == "" {
		*keyPath = filepath.Join(*dataDir, meshKeyFile)
	}
	key, err := readMeshKey(*keyPath)
	if err != nil {
		return err
	}
	signer, err := mesh.NewSigner(key, "toolmesh-edge")
	if err != nil {
		return err
	}
	e, err := edge.New(edge.Config{Services: urls, CallTimeout: *timeout, DevAgent: *agent, Mesh: signer}, log.With("service", "edge"))
	if err != nil {
		return err
	}
	lis, err := server.Listen(*addr)
	if err != nil {
		return err
	}
	log.Warn("edge.dev_mode", "message", "no authentication: every caller acts as the development agent; bind to loopback only", "agent", *agent)
	log.Info("edge.started", "mcp", "http://"+lis.Addr().String()+"/mcp", "tools", len(e.Registry().Tools()))
	return server.RunHTTP(ctx, server.NewHTTPServer(e.Handler(), log), lis, log, server.HTTPOptions{})
}

// serviceURLs maps domain names to the fully-qualified names of their
// services in the edge's contracts.
func serviceURLs(byDomain map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for domain, url := range byDomain {
		found := false
		for _, sd := range edge.Contracts() {
			if string(sd.ParentFile().Package()) == "toolmesh."+domain+".v1" {
				out[string(sd.FullName())] = url
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("no contract for domain %q", domain)
		}
	}
	return out, nil
}
