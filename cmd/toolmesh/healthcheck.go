package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
)

// bindHealthcheck binds the one option of a probe, flag-only.
func bindHealthcheck(s *config.Set) *time.Duration {
	timeout := new(time.Duration)
	s.Duration(timeout, 2*time.Second, config.Opt{Flag: "timeout", Usage: "how long to wait for the answer"})
	return timeout
}

// runHealthcheck succeeds when the URL answers GET with 200: a probe for
// where there is no shell or curl (the image is FROM scratch), such as an
// exec probe of a process that listens on loopback only.
func runHealthcheck(ctx context.Context, args []string, stderr io.Writer) error {
	s := cli.NewConfig("healthcheck", func(string) string { return "" }, stderr)
	timeout := bindHealthcheck(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	fs := s.FlagSet()
	if fs.NArg() != 1 {
		return errors.New("healthcheck needs one URL, e.g. http://127.0.0.1:7100/healthz")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := checkHealth(ctx, fs.Arg(0)); err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	return nil
}

// checkHealth checks once that url answers GET with 200: the readiness
// check of `toolmesh up`, and the healthcheck command.
func checkHealth(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
