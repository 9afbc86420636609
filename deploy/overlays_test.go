package deploy_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// What each overlay adds to the base: dev's SQLite volumes; prod's
// PostgreSQL DSNs, external Temporal, disruption budgets and network policy.

func TestDevOverlay(t *testing.T) {
	r := render(t, "dev")
	// A console could not reach the development edge, on its pod's loopback.
	if r.deployments["console"] != nil {
		t.Error("dev runs a console, which cannot reach the edge on its pod's loopback")
	}
	for _, p := range meshProcesses {
		d := r.deployments[p.Name]
		if d == nil {
			continue // TestEveryProcessHasADeployment
		}
		c := d.spec.Template.Spec.Containers[0]
		env := r.config(t, c)
		if p.Label == "services" {
			// SQLite: no DSN, and the data directory is a volume.
			for _, e := range c.Env {
				if strings.HasSuffix(e.Name, "_DSN") {
					t.Errorf("dev %s has %s: dev runs on SQLite", p.Name, e.Name)
				}
			}
			if !mounts(c, env["TOOLMESH_DATA"]) {
				t.Errorf("dev %s: the SQLite directory %q is not a mounted volume", p.Name, env["TOOLMESH_DATA"])
			}
		}
		// Temporal is the dev server in the namespace.
		if p.Label != "edge" && env["TOOLMESH_TEMPORAL"] != "temporal:7233" {
			t.Errorf("dev %s: TOOLMESH_TEMPORAL=%q, want the in-cluster dev server temporal:7233", p.Name, env["TOOLMESH_TEMPORAL"])
		}
	}
	temporal := r.deployments["temporal"]
	if temporal == nil {
		t.Fatal("dev has no Temporal dev server Deployment")
	}
	if args := temporal.spec.Template.Spec.Containers[0].Args; len(args) == 0 || args[0] != "temporal-dev" || !slices.Contains(args, "0.0.0.0") {
		t.Errorf("dev temporal runs %q, want toolmesh temporal-dev on all interfaces", args)
	}
	svc := r.find("Service", "temporal")
	if svc == nil || !strings.Contains(string(svc.Spec), `"port":7233`) {
		t.Errorf("dev: no Service temporal on 7233 for the Temporal frontend")
	}
	// The edge runs in development mode: on loopback only, probed from inside.
	edge := r.deployments["edge"]
	if edge == nil {
		t.Fatal("dev has no edge")
	}
	ec := edge.spec.Template.Spec.Containers[0]
	if i := slices.Index(ec.Args, "--addr"); i < 0 || !strings.HasPrefix(ec.Args[i+1], "127.0.0.1:") {
		t.Errorf("dev edge args %q: development mode needs a loopback address", ec.Args)
	}
	if r.config(t, ec)["TOOLMESH_OAUTH_ISSUER"] != "" {
		t.Error("dev edge has an OAuth issuer")
	}
	if peers := r.config(t, ec)[sessionPeersEnv]; peers != "" {
		t.Errorf("dev edge has session peers %q: its one replica listens on the pod's loopback", peers)
	}
	agents := r.deployments["agents"]
	if agents == nil || r.config(t, agents.spec.Template.Spec.Containers[0])["TOOLMESH_AGENTS_SEED"] != "local" {
		t.Error("dev agents does not seed the edge's development agent local")
	}
}

func mounts(c container, dir string) bool {
	for _, m := range c.VolumeMounts {
		if dir != "" && m.MountPath == dir {
			return true
		}
	}
	return false
}

func TestProdOverlay(t *testing.T) {
	r := render(t, "prod")
	if r.deployments["temporal"] != nil {
		t.Error("prod runs a Temporal dev server; it uses an external Temporal")
	}
	for _, p := range meshProcesses {
		d := r.deployments[p.Name]
		if d == nil {
			continue
		}
		c := d.spec.Template.Spec.Containers[0]
		env := r.config(t, c)
		if p.Label != "edge" {
			if tmp := env["TOOLMESH_TEMPORAL"]; tmp == "" || strings.HasPrefix(tmp, "temporal:") || strings.HasPrefix(tmp, "127.") {
				t.Errorf("prod %s: TOOLMESH_TEMPORAL=%q, want the external Temporal", p.Name, tmp)
			}
		}
		if p.Label == "services" && !p.Stateless {
			// The DSN comes from the domain's own Secret, never a literal.
			dsn := "TOOLMESH_" + strings.ToUpper(p.Name) + "_DSN"
			found := false
			for _, e := range c.Env {
				if e.Name != dsn {
					continue
				}
				found = true
				if e.Value != nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != postgresSecret(p.Name) {
					t.Errorf("prod %s: %s must come from Secret %s", p.Name, dsn, postgresSecret(p.Name))
				}
			}
			if !found {
				t.Errorf("prod %s: no %s (PostgreSQL) from Secret %s: add overlays/prod/postgres/%s.yaml", p.Name, dsn, postgresSecret(p.Name), p.Name)
			}
		}
		if p.Label != "edge" && (d.spec.Replicas == nil || *d.spec.Replicas < 2) {
			t.Errorf("prod %s: replicas %v, want at least 2", p.Name, d.spec.Replicas)
		}
	}

	// The edge: autoscaled, authenticated.
	edge := r.deployments["edge"]
	if edge == nil {
		t.Fatal("prod has no edge")
	}
	if edge.spec.Replicas != nil {
		t.Errorf("prod edge sets replicas %d: the HPA owns it", *edge.spec.Replicas)
	}
	var hpaFound bool
	for _, h := range r.ofKind("HorizontalPodAutoscaler") {
		var spec struct {
			ScaleTargetRef struct{ Kind, Name string } `json:"scaleTargetRef"`
			MinReplicas    int                         `json:"minReplicas"`
			MaxReplicas    int                         `json:"maxReplicas"`
			Metrics        []any                       `json:"metrics"`
		}
		if err := json.Unmarshal(h.Spec, &spec); err != nil {
			t.Fatal(err)
		}
		if spec.ScaleTargetRef.Kind == "Deployment" && spec.ScaleTargetRef.Name == "edge" {
			hpaFound = true
			if spec.MinReplicas < 2 || spec.MaxReplicas <= spec.MinReplicas || len(spec.Metrics) == 0 {
				t.Errorf("edge HPA %+v: want at least 2 replicas, room to grow and a metric", spec)
			}
		}
	}
	if !hpaFound {
		t.Error("prod: no HorizontalPodAutoscaler for the edge")
	}
	env := r.config(t, edge.spec.Template.Spec.Containers[0])
	if !strings.HasPrefix(env["TOOLMESH_OAUTH_ISSUER"], "https://") || !strings.HasPrefix(env["TOOLMESH_EDGE_RESOURCE"], "https://") || env["TOOLMESH_OAUTH_JWKS_FILE"] == "" {
		t.Errorf("prod edge: OAuth settings missing: issuer %q resource %q jwks %q", env["TOOLMESH_OAUTH_ISSUER"], env["TOOLMESH_EDGE_RESOURCE"], env["TOOLMESH_OAUTH_JWKS_FILE"])
	}
	if i := slices.Index(edge.spec.Template.Spec.Containers[0].Args, "--addr"); i < 0 || strings.HasPrefix(edge.spec.Template.Spec.Containers[0].Args[i+1], "127.") {
		t.Errorf("prod edge listens on loopback: %q", edge.spec.Template.Spec.Containers[0].Args)
	}

	// The console signs people in at the edge's issuer, for the edge's
	// audience, and is reached at its public URL.
	if con := r.deployments["console"]; con == nil {
		t.Error("prod has no console")
	} else {
		cenv := r.config(t, con.spec.Template.Spec.Containers[0])
		if cenv["TOOLMESH_OAUTH_ISSUER"] != env["TOOLMESH_OAUTH_ISSUER"] || cenv["TOOLMESH_EDGE_RESOURCE"] != env["TOOLMESH_EDGE_RESOURCE"] ||
			!strings.HasPrefix(cenv["TOOLMESH_CONSOLE_PUBLIC_URL"], "https://") || cenv["TOOLMESH_CONSOLE_ALLOWED_HOSTS"] == "" {
			t.Errorf("prod console: sign-in settings %v, want the edge's issuer and resource, an https public URL and its host", cenv)
		}
	}

	checkGitHubLink(t, r, env["TOOLMESH_OAUTH_ISSUER"])
	checkEdgeSessions(t, r, edge)
	checkDisruptionBudgets(t, r)
	checkNetworkPolicy(t, r)
}

// checkDisruptionBudgets: every Deployment has one budget of its own that
// still lets a drain evict one of its pods.
func checkDisruptionBudgets(t *testing.T, r *rendered) {
	t.Helper()
	type pdb struct {
		name           string
		selector       labelSelector
		minAvailable   any
		maxUnavailable any
	}
	var pdbs []pdb
	for _, o := range r.ofKind("PodDisruptionBudget") {
		var spec struct {
			Selector       labelSelector `json:"selector"`
			MinAvailable   any           `json:"minAvailable"`
			MaxUnavailable any           `json:"maxUnavailable"`
		}
		if err := json.Unmarshal(o.Spec, &spec); err != nil {
			t.Fatal(err)
		}
		pdbs = append(pdbs, pdb{o.Metadata.Name, spec.Selector, spec.MinAvailable, spec.MaxUnavailable})
	}
	for name, d := range r.deployments {
		var mine []pdb
		for _, p := range pdbs {
			if p.selector.matches(d.podLabels()) {
				mine = append(mine, p)
			}
		}
		if len(mine) != 1 {
			t.Errorf("Deployment %s: %d PodDisruptionBudgets select its pods, want 1", name, len(mine))
			continue
		}
		p := mine[0]
		for other, od := range r.deployments {
			if other != name && p.selector.matches(od.podLabels()) {
				t.Errorf("PodDisruptionBudget %s spans %s and %s", p.name, name, other)
			}
		}
		// A budget that allows no eviction blocks every node drain.
		switch {
		case p.maxUnavailable != nil:
			if fmt.Sprint(p.maxUnavailable) == "0" || fmt.Sprint(p.maxUnavailable) == "0%" {
				t.Errorf("PodDisruptionBudget %s allows no disruption", p.name)
			}
		case p.minAvailable != nil:
			replicas := 2 // the edge: the HPA's minimum
			if d.spec.Replicas != nil {
				replicas = *d.spec.Replicas
			}
			n, err := strconv.Atoi(fmt.Sprint(p.minAvailable))
			if err != nil || n >= replicas {
				t.Errorf("PodDisruptionBudget %s: minAvailable %v of %d replicas blocks drains", p.name, p.minAvailable, replicas)
			}
		default:
			t.Errorf("PodDisruptionBudget %s has no budget", p.name)
		}
	}
}

// checkNetworkPolicy evaluates the rendered NetworkPolicies: which pods may
// open a connection to each service's pods. Only the edge and the workers
// may, and the services too for the agents directory they check callers
// against.
func checkNetworkPolicy(t *testing.T, r *rendered) {
	t.Helper()
	type peer struct {
		PodSelector       *labelSelector `json:"podSelector"`
		NamespaceSelector *labelSelector `json:"namespaceSelector"`
		IPBlock           any            `json:"ipBlock"`
	}
	type policy struct {
		name        string
		PodSelector labelSelector `json:"podSelector"`
		PolicyTypes []string      `json:"policyTypes"`
		Ingress     []struct {
			From  []peer `json:"from"`
			Ports []struct {
				Port any `json:"port"`
			} `json:"ports"`
		} `json:"ingress"`
	}
	var policies []policy
	for _, o := range r.ofKind("NetworkPolicy") {
		var p policy
		if err := json.Unmarshal(o.Spec, &p); err != nil {
			t.Fatal(err)
		}
		p.name = o.Metadata.Name
		policies = append(policies, p)
	}
	// allowed reports whether pods labelled src may reach dst's http port.
	allowed := func(src, dst map[string]string) (bool, bool) {
		isolated := false
		for _, p := range policies {
			if !p.PodSelector.matches(dst) || !(len(p.PolicyTypes) == 0 || slices.Contains(p.PolicyTypes, "Ingress")) {
				continue
			}
			isolated = true
			for _, rule := range p.Ingress {
				portOK := len(rule.Ports) == 0
				for _, port := range rule.Ports {
					portOK = portOK || port.Port == nil || fmt.Sprint(port.Port) == "http" || fmt.Sprint(port.Port) == "8080"
				}
				if !portOK {
					continue
				}
				if len(rule.From) == 0 {
					return true, true // from anywhere
				}
				for _, f := range rule.From {
					if f.IPBlock != nil {
						return true, true // addresses: too wide
					}
					if f.NamespaceSelector != nil {
						// Pods of other namespaces: src is one when it
						// carries the namespace it runs in.
						ns, ok := src[namespaceOf]
						if ok && f.NamespaceSelector.matches(map[string]string{"kubernetes.io/metadata.name": ns}) &&
							(f.PodSelector == nil || f.PodSelector.matches(src)) {
							return true, true
						}
						continue
					}
					if f.PodSelector != nil && f.PodSelector.matches(src) {
						return true, true
					}
				}
			}
		}
		return !isolated, isolated
	}
	// The edge replicas forward session requests to each other.
	if e := r.deployments["edge"]; e != nil {
		if ok, _ := allowed(e.podLabels(), e.podLabels()); !ok {
			t.Error("NetworkPolicy: the edge replicas cannot reach each other's http port")
		}
	}
	// calls: the services each service calls besides the directory (its
	// --service flags under `toolmesh up`).
	calls := map[string]map[string]bool{}
	for _, p := range meshProcesses {
		if p.Label != "services" {
			continue
		}
		calls[p.Name] = map[string]bool{}
		for i, a := range p.Args {
			if i+1 == len(p.Args) {
				break
			}
			switch a {
			case "--service":
				d, _, _ := strings.Cut(p.Args[i+1], "=")
				calls[p.Name][d] = true
			case "--connections-url":
				// The directory unlinks a retired agent's connections.
				calls[p.Name]["connections"] = true
			}
		}
	}
	outsider := map[string]string{"app": "something-else"}
	elsewhere := map[string]string{namespaceOf: "someone-else"}
	ingress := map[string]string{namespaceOf: "ingress-nginx", "app.kubernetes.io/name": "ingress-nginx"}
	for dstName, dst := range r.deployments {
		if dst.Metadata.Labels["app.kubernetes.io/component"] != "service" {
			continue
		}
		if ok, isolated := allowed(outsider, dst.podLabels()); !isolated || ok {
			t.Errorf("NetworkPolicy: service %s is reachable from any pod", dstName)
		}
		if ok, _ := allowed(elsewhere, dst.podLabels()); ok {
			t.Errorf("NetworkPolicy: service %s is reachable from any namespace", dstName)
		}
		// People's browsers reach the github service's link page through
		// the ingress controller; no other service faces it.
		if got, want := first(allowed(ingress, dst.podLabels())), dstName == "github"; got != want {
			t.Errorf("NetworkPolicy: ingress controller -> %s allowed=%v, want %v", dstName, got, want)
		}
		for srcName, src := range r.deployments {
			c := src.Metadata.Labels["app.kubernetes.io/component"]
			want := c == "edge" || c == "worker" || (dstName == "agents" && c == "service") || calls[srcName][dstName]
			if got, _ := allowed(src.podLabels(), dst.podLabels()); got != want {
				t.Errorf("NetworkPolicy: %s (%s) -> %s allowed=%v, want %v", srcName, c, dstName, got, want)
			}
		}
	}
}

// namespaceOf is the pseudo-label of a test's pod from another namespace:
// the namespace it runs in.
const namespaceOf = "(namespace)"

func first(a, _ bool) bool { return a }

// checkGitHubLink: prod's github service serves the link page at a public
// URL, signs people in at the edge's issuer, and holds the GitHub app's
// client ID and its secret as a file from a Secret; the connections service
// refreshes and revokes with the same app; and the agents directory unlinks
// a retired agent's connections, signing with the mesh key.
func checkGitHubLink(t *testing.T, r *rendered, issuer string) {
	t.Helper()
	gh, conn, agents := r.deployments["github"], r.deployments["connections"], r.deployments["agents"]
	if gh == nil || conn == nil || agents == nil {
		t.Fatal("prod lacks github, connections or agents")
	}
	g := r.config(t, gh.spec.Template.Spec.Containers[0])
	if g["TOOLMESH_GITHUB_POLICY"] != "per_agent" || !strings.HasPrefix(g["TOOLMESH_GITHUB_LINK_URL"], "https://") ||
		g["TOOLMESH_GITHUB_CLIENT_ID"] == "" || g["TOOLMESH_GITHUB_LINK_ISSUER"] != issuer || g["TOOLMESH_GITHUB_LINK_CLIENT_ID"] == "" {
		t.Errorf("prod github: link settings %v, want per_agent, an https link URL, the app's client ID and sign-in at the edge's issuer %q", g, issuer)
	}
	if g["TOOLMESH_GITHUB_CLIENT_SECRET"] != "" {
		t.Error("prod github: the app's client secret is a literal")
	}
	if s := secretAt(gh, g["TOOLMESH_GITHUB_CLIENT_SECRET_FILE"]); s != "toolmesh-github-app" {
		t.Errorf("prod github: the client secret file %q is not from Secret toolmesh-github-app (%q)", g["TOOLMESH_GITHUB_CLIENT_SECRET_FILE"], s)
	}
	c := r.config(t, conn.spec.Template.Spec.Containers[0])
	if c["TOOLMESH_CONNECTIONS_GITHUB_CLIENT_ID"] != g["TOOLMESH_GITHUB_CLIENT_ID"] {
		t.Errorf("prod connections: GitHub app client %q, want the github service's %q", c["TOOLMESH_CONNECTIONS_GITHUB_CLIENT_ID"], g["TOOLMESH_GITHUB_CLIENT_ID"])
	}
	if s := secretAt(conn, c["TOOLMESH_CONNECTIONS_GITHUB_CLIENT_SECRET_FILE"]); s != "toolmesh-github-app" {
		t.Errorf("prod connections: the client secret file %q is not from Secret toolmesh-github-app (%q)", c["TOOLMESH_CONNECTIONS_GITHUB_CLIENT_SECRET_FILE"], s)
	}
	for _, d := range []*deployment{gh, agents} {
		args := d.spec.Template.Spec.Containers[0].Args
		i := slices.Index(args, "--mesh-key")
		if i < 0 || secretAt(d, args[i+1]) != "toolmesh-mesh-key" {
			t.Errorf("prod %s: args %q, want --mesh-key from Secret toolmesh-mesh-key", d.Metadata.Name, args)
		}
	}
	if u := r.config(t, agents.spec.Template.Spec.Containers[0])["TOOLMESH_AGENTS_CONNECTIONS_URL"]; u != "http://connections:8080" {
		t.Errorf("prod agents: TOOLMESH_AGENTS_CONNECTIONS_URL=%q, want the connections Service", u)
	}
}
