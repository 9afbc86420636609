// Command toolmesh-edge is the MCP edge alone: `toolmesh-edge [flags]` is
// `toolmesh edge [flags]`, the same command, in a binary that links none of
// the domain services. A process maps the pages of its binary that it and
// its neighbours on disk touch, so the edge run from this binary holds less
// memory than from toolmesh; `toolmesh up` runs it when it sits next to
// toolmesh (make run builds both).
//
// Only cmd/ reads flags and the environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolmesh/toolmesh/cmd/internal/edgecmd"
	"github.com/toolmesh/toolmesh/internal/logging"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := logging.New(os.Stderr, logging.ParseLevel(os.Getenv("TOOLMESH_LOG_LEVEL")))
	if err := edgecmd.Run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr, log); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "toolmesh-edge:", err)
		}
		stop()
		os.Exit(1)
	}
}
