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
	"path"
	"path/filepath"
	"slices"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var overlays = []string{"dev", "prod"}

// External objects: made by the operator from secrets that must not live in
// the repository (deploy/README.md says how). Everything else a manifest
// refers to must be in the render.
var external = map[string]bool{
	"ConfigMap/toolmesh-mesh-public-key":  true,
	"Secret/toolmesh-mesh-key":            true,
	"ConfigMap/toolmesh-edge-jwks":        true,
	"Secret/toolmesh-memory-key":          true,
	"Secret/toolmesh-connections-keyring": true,
	"Secret/toolmesh-state-key":           true,
	"Secret/toolmesh-github-token":        true,
	"Secret/toolmesh-github-app":          true,
	"Secret/toolmesh-search-brave":        true,
	"Secret/toolmesh-audit-key":           true,
	"Secret/toolmesh-console-session-key": true,
	"ConfigMap/toolmesh-audit-public-key": true,
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
		switch {
		case e.Value != nil:
			env[e.Name] = *e.Value
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			if cm := r.find("ConfigMap", e.ValueFrom.ConfigMapKeyRef.Name); cm != nil {
				env[e.Name] = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
			}
		}
	}
	return env
}

// secretAt names the Secret mounted in d's container where file lives
// ("" when none is).
func secretAt(d *deployment, file string) string {
	for _, m := range d.spec.Template.Spec.Containers[0].VolumeMounts {
		if path.Dir(file) != m.MountPath {
			continue
		}
		for _, v := range d.spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
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
