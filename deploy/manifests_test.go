package deploy_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Checks every overlay must pass: a Deployment per process, pinned and
// probed containers with bounds, and references that resolve.

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
