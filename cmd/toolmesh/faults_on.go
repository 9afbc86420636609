//go:build faults

package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
)

// The fault suite (make faults) builds toolmesh with -tags faults: the
// binary then also serves the test-only testing domain (internal/testsupport/testingsvc),
// which `toolmesh up` starts beside the product's domains and the edge and
// workers call as tools (testing_wait, testing_purge, ...). It lets the
// suite make the last hop of a call sleep past its deadline and read, from
// the service's log, how each wait ended. The product build has none of it.

// testingDelaysEnv makes side effects of the testing domain slow:
// method=duration pairs, comma-separated, e.g. "Purge=3s".
const testingDelaysEnv = "TOOLMESH_TESTING_DELAYS"

func withFaultsDomains(d map[string]domain) map[string]domain {
	d["testing"] = domain{build: buildTesting}
	return d
}

func buildTesting(_ context.Context, _ *sqldb.DB, deps serveDeps) ([]server.Service, error) {
	delays := map[string]time.Duration{}
	for _, kv := range config.Split(deps.Getenv(testingDelaysEnv)) {
		method, v, ok := strings.Cut(kv, "=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil || d < 0 {
			return nil, fmt.Errorf("%s: want method=duration pairs, got %q", testingDelaysEnv, kv)
		}
		delays[method] = d
	}
	return []server.Service{testingsvc.NewWith(testingsvc.Options{Log: deps.Log, Delays: delays}).Server()}, nil
}
