package deploy_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

const sessionPeersEnv = "TOOLMESH_EDGE_SESSION_PEERS"

// checkEdgeSessions: the edge replicas serve each other's 2025-era sessions.
// Each advertises its pod IP, and the peers name a headless Service on the
// edge's http port that lists exactly the edge pods, ready or not (a
// draining replica still holds its sessions).
func checkEdgeSessions(t *testing.T, r *rendered, edge *deployment) {
	t.Helper()
	c := edge.spec.Template.Spec.Containers[0]
	env := r.config(t, c)
	podIP := ""
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			podIP = e.Name
		}
		if e.Name == "TOOLMESH_EDGE_SESSION_ADVERTISE" && podIP == "" {
			t.Error("prod edge: TOOLMESH_EDGE_SESSION_ADVERTISE comes before the pod IP variable it refers to")
		}
	}
	if podIP == "" || env["TOOLMESH_EDGE_SESSION_ADVERTISE"] != "$("+podIP+")" {
		t.Errorf("prod edge advertises %q to its peers, want its pod IP (downward API status.podIP)", env["TOOLMESH_EDGE_SESSION_ADVERTISE"])
	}
	host, port, ok := strings.Cut(env[sessionPeersEnv], ":")
	if !ok || strings.Contains(host, ",") {
		t.Fatalf("prod edge: %s=%q, want one Service name:port", sessionPeersEnv, env[sessionPeersEnv])
	}
	httpPort := ""
	for _, p := range c.Ports {
		if p.Name == "http" {
			httpPort = strconv.Itoa(p.ContainerPort)
		}
	}
	if port != httpPort {
		t.Errorf("prod edge peers on port %s, want the edge's http port %s", port, httpPort)
	}
	svc := r.find("Service", host)
	if svc == nil {
		t.Fatalf("prod edge peers %q: no such Service", host)
	}
	var spec struct {
		ClusterIP                string            `json:"clusterIP"`
		PublishNotReadyAddresses bool              `json:"publishNotReadyAddresses"`
		Selector                 map[string]string `json:"selector"`
	}
	if err := json.Unmarshal(svc.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.ClusterIP != "None" || !spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless Service listing pods ready or not", host, spec.ClusterIP, spec.PublishNotReadyAddresses)
	}
	sel := labelSelector{MatchLabels: spec.Selector}
	for name, d := range r.deployments {
		if got := sel.matches(d.podLabels()); got != (name == "edge") {
			t.Errorf("Service %s selects the pods of %s: %v", host, name, got)
		}
	}
}
