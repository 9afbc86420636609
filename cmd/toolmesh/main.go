// Command toolmesh is the one binary of the mesh:
//
//	toolmesh serve <domain>   run one domain service (tasks, ...)
//	toolmesh edge             run the MCP edge
//	toolmesh console          run the web console (the owner's inbox), a client of the edge
//	toolmesh worker <queue>   run the Temporal worker of one task queue
//	toolmesh temporal-dev     run the Temporal dev server (pinned CLI) with /healthz
//	toolmesh up               run everything locally (what `make run` does), restarting what dies
//	toolmesh up status        print the state of each process of a running up
//	toolmesh processes        print what `up` starts (--json: for the Tiltfile)
//	toolmesh healthcheck URL  exit 0 when URL answers 200 (a probe without curl)
//	toolmesh keygen           create the mesh and audit key pairs under the data dir
//	toolmesh token            mint a mesh token for calling services directly
//	toolmesh audit verify     check the audit trail offline against signed checkpoints
//	toolmesh check            check the mesh's invariants on its databases (books, keys, asks, runs)
//
// Only cmd/ reads flags and the environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolmesh/toolmesh/cmd/internal/edgecmd"

	"github.com/toolmesh/toolmesh/internal/logging"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "toolmesh:", err)
		}
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

const usage = `usage: toolmesh <command> [flags]

commands:
  serve <domain>   run one domain service (domains: %s)
  worker <queue>   run the Temporal worker of one task queue
  edge             run the MCP edge (--stdio: over stdin/stdout for desktop clients)
  console          run the web console: the owner's inbox, calling tools through the edge
  temporal-dev     run the Temporal dev server (pinned CLI) with a /healthz probe
  up               run the whole mesh locally with embedded defaults, restarting what dies
  up status        print the state and restarts of each process of a running up
  processes        print the processes up starts, in order (--json for Tilt)
  healthcheck URL  succeed when URL answers 200 (an exec probe in the image)
  keygen           create the key pairs (.toolmesh/mesh.key, mesh.pub, audit.key, audit.pub)
  token            mint a mesh token to call services directly (grpcurl, curl)
  audit verify     check the audit trail offline against signed checkpoints (exit 2: not intact)
  check            check the mesh's invariants on its databases (exit 2: one is broken)

Run 'toolmesh <command> -h' for the flags of a command.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintf(stderr, usage, domainNames())
		return errors.New("no command")
	}
	log := logging.New(stderr, logging.ParseLevel(getenv("TOOLMESH_LOG_LEVEL")))
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], getenv, stdout, stderr, log)
	case "worker":
		return runWorker(ctx, args[1:], getenv, stdout, stderr, log)
	case "edge":
		return edgecmd.Run(ctx, args[1:], getenv, stdin, stdout, stderr, log)
	case "console":
		return runConsole(ctx, args[1:], getenv, stdout, stderr, log)
	case "temporal-dev":
		return runTemporalDev(ctx, args[1:], getenv, stderr, log)
	case "up":
		return runUp(ctx, args[1:], getenv, stdout, stderr, log)
	case "processes":
		return runProcesses(args[1:], getenv, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, args[1:], stderr)
	case "keygen":
		return runKeygen(args[1:], getenv, stdout, stderr)
	case "token":
		return runToken(args[1:], getenv, stdout, stderr)
	case "audit":
		return runAudit(ctx, args[1:], getenv, stdout, stderr)
	case "check":
		return runCheck(ctx, args[1:], getenv, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprintf(stdout, usage, domainNames())
		return nil
	}
	fmt.Fprintf(stderr, usage, domainNames())
	return fmt.Errorf("unknown command %q", args[0])
}
