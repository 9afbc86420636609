// Command benchmesh is `make bench-mesh`: it builds toolmesh, starts the
// mesh with `toolmesh up` at a free port offset, and measures, in one run,
// tools/call tasks_get through the edge, the same Get straight to the tasks
// service over Connect, and a stock go-sdk server doing the same lookup
// (cmd/benchmesh/stocksdk), from load generators that are processes of
// their own. It prints calls/s, p50/p99, the CPU time per call of every
// process and their resident memory, and writes them as JSON.
//
//	benchmesh [--callers 8] [--duration 5s] [--heavy-callers 200] [--out bench-mesh.json]
//	benchmesh load --kind mcp|connect-json|connect-proto|mcp-write|connect-json-write --url URL --task-id ID ...
//	benchmesh hop --addr 127.0.0.1:7301 --to http://127.0.0.1:7101
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/benchmesh"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintln(os.Stderr, "benchmesh:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "load" {
		return runLoad(ctx, args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "hop" {
		return runHop(ctx, args[1:])
	}
	fs := flag.NewFlagSet("benchmesh", flag.ContinueOnError)
	var cfg benchmesh.Config
	fs.StringVar(&cfg.RepoDir, "repo", ".", "the repository's root (binaries are built from it)")
	fs.StringVar(&cfg.TemporalBin, "temporal-bin", "", "the pinned Temporal CLI (default <repo>/bin/temporal)")
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "directory for the binaries, the mesh's data and the logs, kept afterwards (default: a temporary one, removed after a successful run)")
	fs.IntVar(&cfg.Callers, "callers", 8, "concurrent callers of the throughput phases")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "how long each phase calls")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "how long each phase's target is called before it is measured")
	fs.IntVar(&cfg.HeavyCallers, "heavy-callers", 200, "concurrent callers of the memory and tail latency phases (0: none)")
	fs.IntVar(&cfg.Rounds, "rounds", 1, "run every phase this many times, interleaved; targets use the median")
	fs.StringVar(&cfg.ProfileDir, "profile", "", "start the mesh with --pprof and save CPU and allocation profiles of the edge and the tasks service, taken during the first edge phase, into this directory")
	fs.StringVar(&cfg.Out, "out", "", "write the report as JSON to this file")
	overhead := fs.String("overhead-callers", "1,8,32", "numbers of callers of the overhead table (the edge's added p50/p99 over direct Connect), comma-separated; empty for none")
	targets := fs.String("targets", "", "run only these targets, comma-separated: edge, edge-capable, edge-session, direct-json, direct-proto, bare-hop, stock-sdk, edge-write, direct-write, edge-admin-write, direct-admin-write (default: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Targets = config.Split(*targets)
	for _, c := range config.Split(*overhead) {
		n, err := strconv.Atoi(c)
		if err != nil {
			return fmt.Errorf("--overhead-callers: %q is not a number", c)
		}
		cfg.OverheadCallers = append(cfg.OverheadCallers, n)
	}
	_, err := benchmesh.Run(ctx, cfg, stdout)
	return err
}

// runHop is the bare hop baseline: a reverse proxy in front of a service.
func runHop(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("benchmesh hop", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7301", "listen address")
	to := fs.String("to", "", "the service's base URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return benchmesh.Hop(ctx, *addr, *to)
}

// runLoad is the load generator: it calls for --duration and prints what it
// measured as JSON.
func runLoad(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("benchmesh load", flag.ContinueOnError)
	var cfg benchmesh.LoadConfig
	fs.StringVar(&cfg.Kind, "kind", benchmesh.KindMCP, "what to call: mcp (tools/call tasks_get), mcp-capable (the same from a client that can answer questions), mcp-session (the same within a 2025-11-25 session), connect-json or connect-proto (TasksService.Get), mcp-write (tools/call memory_save), connect-json-write (MemoryService.Save), mcp-admin-write (tools/call agents_set_status, its confirmation elicited) or connect-json-admin-write (AgentsService.SetStatus)")
	fs.StringVar(&cfg.URL, "url", "", "the MCP endpoint, or the tasks (memory, agents) service's base URL")
	fs.StringVar(&cfg.TaskID, "task-id", "", "the task to read")
	tokenFile := fs.String("token-file", "", "file holding the mesh token of Connect calls")
	fs.IntVar(&cfg.Callers, "callers", 8, "concurrent callers")
	fs.DurationVar(&cfg.Duration, "duration", 5*time.Second, "how long to call")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.URL == "" || cfg.TaskID == "" {
		return fmt.Errorf("load needs --url and --task-id")
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return err
		}
		cfg.Token = strings.TrimSpace(string(b))
	}
	res, err := benchmesh.Load(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}
