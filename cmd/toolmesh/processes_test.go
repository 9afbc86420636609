package main

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
)

func defaultPlan(t *testing.T, args ...string) []meshProcess {
	t.Helper()
	var out bytes.Buffer
	if err := run(t.Context(), append([]string{"processes", "--json"}, args...), func(string) string { return "" }, nil, &out, discard{}); err != nil {
		t.Fatalf("toolmesh processes --json %s: %v", strings.Join(args, " "), err)
	}
	var v struct{ Processes []meshProcess }
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return v.Processes
}

func TestPlanStartsEveryDomainAndQueueInDependencyOrder(t *testing.T) {
	plan := defaultPlan(t)
	index := map[string]int{}
	for i, p := range plan {
		if _, dup := index[p.Name]; dup {
			t.Errorf("process %s twice", p.Name)
		}
		index[p.Name] = i
		for _, d := range p.Deps {
			j, ok := index[d]
			if !ok {
				t.Errorf("%s depends on %s, which does not start before it", p.Name, d)
				continue
			}
			if plan[j].Once && p.Once {
				t.Errorf("%s and its dep %s both run once", p.Name, d)
			}
		}
		if p.Once != (p.Probe == nil) {
			t.Errorf("%s: once=%v but probe=%v: a serving process needs a probe, a setup step none", p.Name, p.Once, p.Probe)
		}
		if p.Probe != nil && p.Probe.Path != "/healthz" {
			t.Errorf("%s probes %s, want /healthz", p.Name, p.Probe.URL())
		}
	}
	for name, d := range domains {
		p, ok := index[name]
		if !ok {
			t.Errorf("domain %s is not started", name)
			continue
		}
		if got := plan[p]; got.Label != labelServices || got.Args[0] != "serve" || got.Args[1] != name || got.Probe.Port != d.port {
			t.Errorf("domain %s runs as %+v", name, got)
		}
		if !slices.Contains(plan[p].Deps, procTemporal) {
			t.Errorf("service %s does not wait for Temporal", name)
		}
		if !d.directory && !slices.Contains(plan[p].Deps, "agents") {
			t.Errorf("service %s does not wait for the agents directory it checks callers against", name)
		}
	}
	for name, q := range workerQueues {
		p, ok := index[workerPrefix+name]
		if !ok {
			t.Errorf("task queue %s has no worker", name)
			continue
		}
		if got := plan[p]; got.Label != labelWorkers || got.Args[1] != name || got.Probe.Port != q.port {
			t.Errorf("worker %s runs as %+v", name, got)
		}
		for d := range domains {
			if !slices.Contains(plan[p].Deps, d) {
				t.Errorf("worker %s starts before service %s its activities call", name, d)
			}
		}
	}
	// The edge after everything it calls; the console, its client, last.
	if e := plan[len(plan)-2]; e.Name != procEdge || e.Label != labelEdge {
		t.Errorf("last but one process %s: want the edge", e.Name)
	}
	if last := plan[len(plan)-1]; last.Name != procConsole || last.Label != labelConsole || !slices.Equal(last.Deps, []string{procEdge}) {
		t.Errorf("last process %s (after %v): want the console, after the edge only", last.Name, last.Deps)
	}
	if c := plan[len(plan)-1]; slices.Contains(c.Args, "--mesh-key") || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--service") }) {
		t.Errorf("the console is given a mesh key or a service: %q", c.Args)
	}
	if plan[index[procTemporal]].Label != labelInfra || plan[index[procMeshKeys]].Label != labelInfra {
		t.Error("temporal and mesh-keys are not labelled infra")
	}

	// The edge and every worker reach every domain.
	for _, p := range plan {
		if p.Label != labelEdge && p.Label != labelWorkers {
			continue
		}
		for name, d := range domains {
			want := name + "=http://127.0.0.1:" + strconv.Itoa(d.port)
			if i := slices.Index(p.Args, want); i < 1 || p.Args[i-1] != "--service" {
				t.Errorf("%s is not given --service %s: %q", p.Name, want, p.Args)
			}
		}
	}
}

func TestPlanPortsAreDistinctAndShiftTogether(t *testing.T) {
	ports := func(plan []meshProcess) []int {
		var out []int
		for _, p := range plan {
			if p.Probe != nil {
				out = append(out, p.Probe.Port)
			}
			for i, a := range p.Args {
				if a == "--port" || a == "--ui-port" {
					n, _ := strconv.Atoi(p.Args[i+1])
					out = append(out, n)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	base := ports(defaultPlan(t))
	if c := slices.Compact(slices.Clone(base)); len(c) != len(base) {
		t.Errorf("two processes share a port: %v", base)
	}
	shifted := ports(defaultPlan(t, "--port-offset", "300"))
	for i := range base {
		base[i] += 300
	}
	if diff := cmp.Diff(base, shifted); diff != "" {
		t.Errorf("--port-offset 300 ports (-want +got):\n%s", diff)
	}

	// Explicit ports win over the offset; the UI can be turned off.
	plan := defaultPlan(t, "--port-offset", "300", "--temporal-port", "17233", "--temporal-ui-port", "0", "--edge-addr", "127.0.0.1:17100")
	for _, p := range plan {
		switch p.Name {
		case procTemporal:
			if i := slices.Index(p.Args, "--port"); p.Args[i+1] != "17233" || len(p.Links) != 0 {
				t.Errorf("temporal %q links %v: want port 17233 and no UI link", p.Args, p.Links)
			}
		case procEdge:
			if p.Probe.Port != 17100 || p.Links[0].URL != "http://127.0.0.1:17100/mcp" {
				t.Errorf("edge probe %v links %v: want 17100", p.Probe, p.Links)
			}
		}
		if slices.Contains(p.Args, "--temporal") && !slices.Contains(p.Args, "127.0.0.1:17233") {
			t.Errorf("%s does not dial Temporal at 17233: %q", p.Name, p.Args)
		}
	}
}

func TestPlanServesA2AWhereTheWorkerSignsFor(t *testing.T) {
	plan := defaultPlan(t, "--port-offset", "300")
	var edgeA2A, signs string
	for _, p := range plan {
		if i := slices.Index(p.Args, "--a2a-addr"); i >= 0 {
			edgeA2A = "http://" + p.Args[i+1]
		}
		if p.Name == workerPrefix+"remoteagents" {
			signs = p.Env[cli.A2AURLEnv]
		}
	}
	if edgeA2A != "http://127.0.0.1:7470" || signs != edgeA2A {
		t.Errorf("the edge serves A2A at %q, the remoteagents worker signs for %q; want both at http://127.0.0.1:7470", edgeA2A, signs)
	}
}

func TestPlanSeedsTheDevAgent(t *testing.T) {
	var out bytes.Buffer
	env := map[string]string{agentsSeedEnv: "ops, ci"}
	if err := run(t.Context(), []string{"processes", "--json", "--dev-agent", "me", "--data", "/srv/mesh"}, func(k string) string { return env[k] }, nil, &out, discard{}); err != nil {
		t.Fatal(err)
	}
	var v struct{ Processes []meshProcess }
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range v.Processes {
		if p.Name == "agents" {
			if diff := cmp.Diff(map[string]string{agentsSeedEnv: "me,ops,ci"}, p.Env); diff != "" {
				t.Errorf("agents env (-want +got):\n%s", diff)
			}
		} else if _, seeded := p.Env[agentsSeedEnv]; seeded {
			t.Errorf("%s env %v: only the agents service is seeded", p.Name, p.Env)
		}
		if i := slices.Index(p.Args, "--data"); i >= 0 && p.Args[i+1] != "/srv/mesh" {
			t.Errorf("%s --data %s", p.Name, p.Args[i+1])
		}
		for _, a := range p.Args {
			if strings.HasSuffix(a, "mesh.key") && a != "/srv/mesh/mesh.key" || strings.HasSuffix(a, "mesh.pub") && a != "/srv/mesh/mesh.pub" {
				t.Errorf("%s key path %s not under --data", p.Name, a)
			}
		}
		if p.Name == procEdge && !slices.Contains(p.Args, "me") {
			t.Errorf("edge %q: not the dev agent me", p.Args)
		}
	}
}

func TestProcessesTable(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"processes"}, func(string) string { return "" }, nil, &out, discard{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range append(slices.Sorted(maps.Keys(domains)), procTemporal, procEdge) {
		if !strings.Contains(out.String(), "\n"+name+" ") {
			t.Errorf("table does not list %s:\n%s", name, out.String())
		}
	}
	for _, bad := range [][]string{{"processes", "extra"}, {"processes", "--port-offset", "-1"}, {"processes", "--edge-addr", "nowhere"}} {
		if err := run(t.Context(), bad, func(string) string { return "" }, nil, &out, discard{}); err == nil {
			t.Errorf("toolmesh %s: no error", strings.Join(bad, " "))
		}
	}
}

func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	hc := func(args ...string) error {
		return run(t.Context(), append([]string{"healthcheck"}, args...), func(string) string { return "" }, nil, io.Discard, discard{})
	}
	if err := hc(srv.URL + "/healthz"); err != nil {
		t.Errorf("healthy: %v", err)
	}
	status = http.StatusServiceUnavailable
	if err := hc(srv.URL + "/healthz"); err == nil {
		t.Error("503: healthcheck succeeded")
	}
	srv.Close()
	if err := hc("--timeout", "500ms", srv.URL+"/healthz"); err == nil {
		t.Error("nothing listening: healthcheck succeeded")
	}
	if err := hc(); err == nil {
		t.Error("no URL: healthcheck succeeded")
	}
}
