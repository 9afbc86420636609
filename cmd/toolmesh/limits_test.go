package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/server"
)

func TestLimitFlagsTakeTheEnvironmentThenFlags(t *testing.T) {
	parse := func(env map[string]string, args ...string) (server.Limits, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s := config.New(fs, func(k string) string { return env[k] })
		l := bindLimits(s, "TOOLMESH_SERVICE_", 1<<20)
		if err := s.Parse(args); err != nil {
			return server.Limits{}, err
		}
		return l.limits()
	}
	got, err := parse(nil)
	want := server.Limits{HeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second, MaxBodyBytes: 1 << 20, MaxConnsPerClient: 512}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("defaults = %+v, %v; want %+v", got, err, want)
	}
	env := map[string]string{"TOOLMESH_SERVICE_BODY_TIMEOUT": "3s", "TOOLMESH_SERVICE_MAX_BODY": "2048", "TOOLMESH_SERVICE_MAX_CONNS_PER_CLIENT": "0"}
	got, err = parse(env, "--body-timeout", "4s")
	want = server.Limits{HeaderTimeout: 10 * time.Second, BodyTimeout: 4 * time.Second, MaxBodyBytes: 2048, MaxConnsPerClient: -1}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("environment and a flag = %+v, %v; want %+v (the flag wins, 0 connections is no cap)", got, err, want)
	}
	if _, err := parse(map[string]string{"TOOLMESH_SERVICE_HEADER_TIMEOUT": "soon"}); err == nil || !strings.Contains(err.Error(), "TOOLMESH_SERVICE_HEADER_TIMEOUT") {
		t.Errorf("a malformed variable = %v, want an error naming it", err)
	}
	if _, err := parse(nil, "--max-body", "0"); err == nil {
		t.Error("--max-body 0 was accepted")
	}
}
