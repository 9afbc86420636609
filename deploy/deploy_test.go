package deploy_test

// Renders every overlay with the kustomize library (what `kubectl apply -k`
// runs) and checks the invariants a cluster operator relies on, against the
// processes the binary itself says it runs (`toolmesh processes --json`):
// a domain or task queue added to the binary without its manifests fails
// here.

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var overlays = []string{"dev", "prod"}

// External objects: made by the operator from secrets that must not live in
// the repository (deploy/README.md says how). Everything else a manifest
// refers to must be in the render.
var external = map[string]bool{
	"ConfigMap/toolmesh-mesh-public-key": true,
	"Secret/toolmesh-mesh-key":           true,
	"ConfigMap/toolmesh-edge-jwks":       true,
	"Secret/toolmesh-memory-key":         true,
	"Secret/toolmesh-state-key":          true,
	"Secret/toolmesh-github-token":       true,
	"Secret/toolmesh-search-brave":       true,
	"Secret/toolmesh-audit-key":          true,
}

// postgresSecret is the Secret holding a domain's DSN in prod.
func postgresSecret(domain string) string { return "toolmesh-" + domain + "-postgres" }

type process struct {
	Name      string   `json:"name"`
	Label     string   `json:"label"`
	Args      []string `json:"args"`
	Stateless bool     `json:"stateless"`
}

// meshProcesses is what the binary runs: every service, worker and edge.
var meshProcesses []process

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Fprintln(os.Stderr, "deploy: every test here needs the process list of a freshly built toolmesh binary, which -short does not build (make test does)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "toolmesh-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "toolmesh")
		build := exec.Command("go", "build", "-o", bin, "./cmd/toolmesh")
		build.Dir = ".."
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build toolmesh:", err)
			return 1
		}
		out, err := exec.Command(bin, "processes", "--json").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "toolmesh processes --json:", err)
			return 1
		}
		var v struct{ Processes []process }
		if err := json.Unmarshal(out, &v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, p := range v.Processes {
			switch p.Label {
			case "services", "workers", "edge":
				meshProcesses = append(meshProcesses, p)
			}
		}
		return m.Run()
	}()
	os.Exit(code)
}

// Just enough of the Kubernetes objects for the checks.

type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec json.RawMessage   `json:"spec"`
	Data map[string]string `json:"data"`
}

type labelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"matchExpressions"`
}

// matches reports whether the selector selects labels (an empty selector
// selects everything, as in Kubernetes).
func (s *labelSelector) matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, has := labels[e.Key]
		switch e.Operator {
		case "In":
			if !has || !slices.Contains(e.Values, v) {
				return false
			}
		case "NotIn":
			if has && slices.Contains(e.Values, v) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		default:
			return false
		}
	}
	return true
}

type probe struct {
	HTTPGet *struct {
		Path string `json:"path"`
		Port any    `json:"port"`
	} `json:"httpGet"`
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec"`
}

type container struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	Args    []string `json:"args"`
	Command []string `json:"command"`
	EnvFrom []struct {
		ConfigMapRef *struct{ Name string } `json:"configMapRef"`
		SecretRef    *struct{ Name string } `json:"secretRef"`
	} `json:"envFrom"`
	Env []struct {
		Name      string  `json:"name"`
		Value     *string `json:"value"`
		ValueFrom *struct {
			SecretKeyRef    *struct{ Name, Key string } `json:"secretKeyRef"`
			ConfigMapKeyRef *struct{ Name, Key string } `json:"configMapKeyRef"`
			FieldRef        *struct {
				FieldPath string `json:"fieldPath"`
			} `json:"fieldRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	ReadinessProbe *probe `json:"readinessProbe"`
	LivenessProbe  *probe `json:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `json:"requests"`
		Limits   map[string]string `json:"limits"`
	} `json:"resources"`
	SecurityContext *struct {
		ReadOnlyRootFilesystem   *bool `json:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

type deploymentSpec struct {
	Replicas *int          `json:"replicas"`
	Selector labelSelector `json:"selector"`
	Template struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			SecurityContext *struct {
				RunAsNonRoot *bool `json:"runAsNonRoot"`
			} `json:"securityContext"`
			Containers []container `json:"containers"`
			Volumes    []struct {
				Name      string                       `json:"name"`
				EmptyDir  *struct{}                    `json:"emptyDir"`
				ConfigMap *struct{ Name string }       `json:"configMap"`
				Secret    *struct{ SecretName string } `json:"secret"`
			} `json:"volumes"`
		} `json:"spec"`
	} `json:"template"`
}

type deployment struct {
	object
	spec deploymentSpec
}

func (d *deployment) podLabels() map[string]string { return d.spec.Template.Metadata.Labels }

// rendered is one overlay's output.
type rendered struct {
	name        string
	objects     []object
	deployments map[string]*deployment
}

func (r *rendered) find(kind, name string) *object {
	for i := range r.objects {
		if r.objects[i].Kind == kind && r.objects[i].Metadata.Name == name {
			return &r.objects[i]
		}
	}
	return nil
}

func (r *rendered) ofKind(kind string) []object {
	var out []object
	for _, o := range r.objects {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// config is the merged environment a container gets from its ConfigMaps
// (envFrom, in order) and literal env values.
func (r *rendered) config(t *testing.T, c container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		cm := r.find("ConfigMap", ef.ConfigMapRef.Name)
		if cm == nil {
			continue // reported by the reference check
		}
		for k, v := range cm.Data {
			env[k] = v
		}
	}
	for _, e := range c.Env {
		if e.Value != nil {
			env[e.Name] = *e.Value
		}
	}
	return env
}

func render(t *testing.T, overlay string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join("overlays", overlay))
	if err != nil {
		t.Fatalf("kustomize build overlays/%s: %v", overlay, err)
	}
	r := &rendered{name: overlay, deployments: map[string]*deployment{}}
	for _, res := range resMap.Resources() {
		m, err := res.Map()
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var o object
		if err := json.Unmarshal(b, &o); err != nil {
			t.Fatal(err)
		}
		r.objects = append(r.objects, o)
		if o.Kind == "Deployment" {
			d := &deployment{object: o}
			if err := json.Unmarshal(o.Spec, &d.spec); err != nil {
				t.Fatalf("Deployment %s: %v", o.Metadata.Name, err)
			}
			r.deployments[o.Metadata.Name] = d
		}
	}
	return r
}

// componentOf is the Deployment label of a process's kind.
var componentOf = map[string]string{"services": "service", "workers": "worker", "edge": "edge"}

func TestEveryProcessHasADeployment(t *testing.T) {
	if len(meshProcesses) == 0 {
		t.Fatal("toolmesh processes listed no service")
	}
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			r := render(t, overlay)
			known := map[string]bool{}
			for _, p := range meshProcesses {
				known[p.Name] = true
				d := r.deployments[p.Name]
				if d == nil {
					t.Errorf("%s (%s) has no Deployment %s: add deploy/base/%s (see deploy/README.md)", p.Name, p.Label, p.Name, manifestPath(p))
					continue
				}
				if got := d.Metadata.Labels["app.kubernetes.io/component"]; got != componentOf[p.Label] {
					t.Errorf("Deployment %s: component %q, want %q", p.Name, got, componentOf[p.Label])
				}
				cs := d.spec.Template.Spec.Containers
				if len(cs) != 1 {
					t.Errorf("Deployment %s: %d containers, want 1", p.Name, len(cs))
					continue
				}
				// It runs this process: the same subcommand and target.
				n := 1
				if p.Label != "edge" {
					n = 2
				}
				if len(cs[0].Args) < n || !slices.Equal(cs[0].Args[:n], p.Args[:n]) {
					t.Errorf("Deployment %s runs %q, want toolmesh %q", p.Name, cs[0].Args, p.Args[:n])
				}
				if p.Label == "services" {
					checkServiceObject(t, r, p.Name)
				}
			}
			// And nothing runs a process the binary does not know.
			for name, d := range r.deployments {
				if c := d.Metadata.Labels["app.kubernetes.io/component"]; (c == "service" || c == "worker" || c == "edge") && !known[name] {
					t.Errorf("Deployment %s (%s) is not a process of this binary", name, c)
				}
			}
		})
	}
}

func manifestPath(p process) string {
	switch p.Label {
	case "services":
		return "services/" + p.Name + ".yaml"
	case "workers":
		return "workers/" + strings.TrimPrefix(p.Name, "worker-") + ".yaml"
	}
	return p.Name + ".yaml"
}

// checkServiceObject: the Kubernetes Service <domain> on 8080 selects the
// domain's pods, and the edge and the workers are told its URL.
func checkServiceObject(t *testing.T, r *rendered, domain string) {
	t.Helper()
	svc := r.find("Service", domain)
	if svc == nil {
		t.Errorf("no Service %s for the %s Deployment", domain, domain)
		return
	}
	var spec struct {
		Selector map[string]string `json:"selector"`
		Ports    []struct {
			Port       int `json:"port"`
			TargetPort any `json:"targetPort"`
		} `json:"ports"`
	}
	if err := json.Unmarshal(svc.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	sel := labelSelector{MatchLabels: spec.Selector}
	for name, d := range r.deployments {
		if got := sel.matches(d.podLabels()); got != (name == domain) {
			t.Errorf("Service %s selects the pods of %s: %v", domain, name, got)
		}
	}
	if len(spec.Ports) != 1 || spec.Ports[0].Port != 8080 || fmt.Sprint(spec.Ports[0].TargetPort) != "http" {
		t.Errorf("Service %s ports %+v: want 8080 to the container's http port", domain, spec.Ports)
	}
	url := "http://" + domain + ":8080"
	for name, d := range r.deployments {
		c := d.Metadata.Labels["app.kubernetes.io/component"]
		if c != "edge" && c != "worker" {
			continue
		}
		services := map[string]string{}
		for _, kv := range strings.Split(r.config(t, d.spec.Template.Spec.Containers[0])["TOOLMESH_SERVICES"], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				services[k] = v
			}
		}
		if services[domain] != url {
			t.Errorf("%s does not reach %s at %s: TOOLMESH_SERVICES has %q", name, domain, url, services[domain])
		}
	}
}

var imageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._/:-]*?(:(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(@sha256:[a-f0-9]{64})?$`)

func TestEveryContainerIsPinnedProbedAndBounded(t *testing.T) {
	for _, overlay := range overlays {
		t.Run(overlay, func(t *testing.T) {
			r := render(t, overlay)
			for name, d := range r.deployments {
				sel := d.spec.Selector
				if !sel.matches(d.podLabels()) || len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
					t.Errorf("Deployment %s: selector %+v does not select its own pods %v", name, sel, d.podLabels())
				}
				if sc := d.spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
					t.Errorf("Deployment %s: pods may run as root", name)
				}
				for _, c := range d.spec.Template.Spec.Containers {
					where := fmt.Sprintf("%s/%s", name, c.Name)
					checkImage(t, where, c.Image)
					checkProbe(t, where+" readinessProbe", c, c.ReadinessProbe)
					checkProbe(t, where+" livenessProbe", c, c.LivenessProbe)
					for _, res := range []string{"cpu", "memory"} {
						if c.Resources.Requests[res] == "" || c.Resources.Limits[res] == "" {
							t.Errorf("%s: no %s request and limit (%+v)", where, res, c.Resources)
						}
					}
					if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
						sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
						t.Errorf("%s: want a read-only root filesystem and no privilege escalation", where)
					}
				}
			}
			checkReferences(t, r)
		})
	}
}

func checkImage(t *testing.T, where, image string) {
	t.Helper()
	m := imageRE.FindStringSubmatch(image)
	if m == nil {
		t.Errorf("%s: malformed image %q", where, image)
		return
	}
	tag, digest := m[2], m[3]
	switch {
	case tag == "latest":
		t.Errorf("%s: image %q uses the latest tag", where, image)
	case tag == "" && digest == "":
		t.Errorf("%s: image %q has no tag or digest (it would pull latest)", where, image)
	}
}

// checkProbe: the probe asks /healthz on a port the container declares, or
// runs `toolmesh healthcheck <url>/healthz` inside the pod.
func checkProbe(t *testing.T, where string, c container, p *probe) {
	t.Helper()
	switch {
	case p == nil:
		t.Errorf("%s: missing", where)
	case p.HTTPGet != nil:
		if p.HTTPGet.Path != "/healthz" {
			t.Errorf("%s: GET %s, want /healthz", where, p.HTTPGet.Path)
		}
		declared := false
		for _, port := range c.Ports {
			declared = declared || port.Name == fmt.Sprint(p.HTTPGet.Port) || fmt.Sprint(port.ContainerPort) == fmt.Sprint(p.HTTPGet.Port)
		}
		if !declared {
			t.Errorf("%s: port %v is not a port of the container %+v", where, p.HTTPGet.Port, c.Ports)
		}
	case p.Exec != nil:
		cmd := p.Exec.Command
		if len(cmd) != 3 || !strings.HasSuffix(cmd[0], "/toolmesh") || cmd[1] != "healthcheck" || !strings.HasSuffix(cmd[2], "/healthz") {
			t.Errorf("%s: exec %q, want toolmesh healthcheck <url>/healthz", where, cmd)
		}
	default:
		t.Errorf("%s: neither httpGet nor exec", where)
	}
}

// checkReferences: every ConfigMap and Secret a pod uses is rendered, or is
// one of the documented objects the operator creates.
func checkReferences(t *testing.T, r *rendered) {
	t.Helper()
	need := func(where, kind, name string) {
		if r.find(kind, name) == nil && !external[kind+"/"+name] && !strings.HasSuffix(name, "-postgres") {
			t.Errorf("%s refers to %s %s, which is neither rendered nor documented as made by the operator", where, kind, name)
		}
	}
	for name, d := range r.deployments {
		for _, v := range d.spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				need(name, "ConfigMap", v.ConfigMap.Name)
			}
			if v.Secret != nil {
				need(name, "Secret", v.Secret.SecretName)
			}
		}
		for _, c := range d.spec.Template.Spec.Containers {
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil {
					need(name, "ConfigMap", ef.ConfigMapRef.Name)
				}
				if ef.SecretRef != nil {
					need(name, "Secret", ef.SecretRef.Name)
				}
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					need(name, "Secret", e.ValueFrom.SecretKeyRef.Name)
				}
			}
			for _, m := range c.VolumeMounts {
				found := false
				for _, v := range d.spec.Template.Spec.Volumes {
					found = found || v.Name == m.Name
				}
				if !found {
					t.Errorf("%s/%s mounts volume %s, which the pod does not have", name, c.Name, m.Name)
				}
			}
		}
	}
}

func TestDevOverlay(t *testing.T) {
	r := render(t, "dev")
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

	checkEdgeSessions(t, r, edge)
	checkDisruptionBudgets(t, r)
	checkNetworkPolicy(t, r)
}

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
					if f.IPBlock != nil || f.NamespaceSelector != nil {
						return true, true // beyond this namespace's pods: too wide
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
		for i, a := range p.Args {
			if a == "--service" && i+1 < len(p.Args) {
				d, _, _ := strings.Cut(p.Args[i+1], "=")
				if calls[p.Name] == nil {
					calls[p.Name] = map[string]bool{}
				}
				calls[p.Name][d] = true
			}
		}
	}
	outsider := map[string]string{"app": "something-else"}
	for dstName, dst := range r.deployments {
		if dst.Metadata.Labels["app.kubernetes.io/component"] != "service" {
			continue
		}
		if ok, isolated := allowed(outsider, dst.podLabels()); !isolated || ok {
			t.Errorf("NetworkPolicy: service %s is reachable from any pod", dstName)
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

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	args := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^ARG (\w+)=(\S+)$`).FindAllStringSubmatch(src, -1) {
		args[m[1]] = m[2]
	}
	stages := map[string]bool{}
	froms := regexp.MustCompile(`(?m)^FROM (\S+)(?: AS (\S+))?$`).FindAllStringSubmatch(src, -1)
	if len(froms) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build", len(froms))
	}
	for _, m := range froms {
		image := regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllStringFunc(m[1], func(ref string) string {
			return args[ref[2:len(ref)-1]]
		})
		switch {
		case stages[image], image == "scratch":
		default:
			checkImage(t, "Dockerfile FROM "+m[1], image)
		}
		if m[2] != "" {
			stages[m[2]] = true
		}
	}
	if last := froms[len(froms)-1]; last[1] == "" || !stages[last[1]] && last[1] != "scratch" {
		t.Errorf("the default (last) stage %q does not build on an earlier stage", last[0])
	}
	if !strings.Contains(src, "go build") || !strings.Contains(src, "./cmd/toolmesh") {
		t.Error("Dockerfile does not build ./cmd/toolmesh")
	}

	// The same Temporal CLI and Go as the Makefile and go.mod.
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TEMPORAL_CLI_VERSION\s*:=\s*(\S+)`).FindSubmatch(mk)
	if m == nil || args["TEMPORAL_CLI_VERSION"] != string(m[1]) {
		t.Errorf("Dockerfile TEMPORAL_CLI_VERSION %q, Makefile %q", args["TEMPORAL_CLI_VERSION"], m)
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil || !strings.HasPrefix(args["GO_IMAGE"], "golang:"+string(goVersion[1])+".") {
		t.Errorf("Dockerfile GO_IMAGE %q is not the Go %s of go.mod", args["GO_IMAGE"], goVersion[1])
	}

	ignore, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(ignore))
	for _, want := range []string{"bin", ".toolmesh", ".git", "/toolmesh"} {
		if !slices.Contains(lines, want) {
			t.Errorf("Dockerfile.dockerignore does not exclude %s from the build context", want)
		}
	}
}
