package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"time"
)

// runHealthcheck succeeds when the URL answers GET with 200: a probe for
// where there is no shell or curl (the image is FROM scratch), such as an
// exec probe of a process that listens on loopback only.
func runHealthcheck(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
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
