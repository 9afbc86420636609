package toolcatalog

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Toolset is a named group of tools a client selects instead of every tool
// of the mesh. A service's tools are the toolset of its domain (the element
// of its proto package before the version: toolmesh.tasks.v1 is "tasks")
// unless the service's toolset option names another; a tool's own toolset
// option moves it to another toolset of the registry. The description is
// the first paragraph of the service's leading comment, which a model reads
// to pick a group.
type Toolset struct {
	Name        string
	Description string
	// Default puts the toolset in the `default` selection (the service
	// option's default).
	Default bool
	// Tools are the toolset's tools, sorted by name.
	Tools []*Tool
}

// toolsetName is the form of a toolset's name: it never contains "_", so a
// name in a selection is a toolset's or, with "_", a tool's.
var toolsetName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// Toolsets returns the registry's toolsets, sorted by name; each has at
// least one tool. The slice must not be modified.
func (r *Registry) Toolsets() []*Toolset { return r.toolsets }

// serviceToolset is the toolset a service's tools belong to and what the
// service says of it.
func serviceToolset(sd protoreflect.ServiceDescriptor, docs Docs) (name string, def bool, desc string, err error) {
	var opt *toolv1.Toolset
	if opts := sd.Options(); opts != nil && proto.HasExtension(opts, toolv1.E_Toolset) {
		opt, _ = proto.GetExtension(opts, toolv1.E_Toolset).(*toolv1.Toolset)
	}
	name = opt.GetName()
	if name == "" {
		name = domainOf(sd.ParentFile().Package())
	}
	if !toolsetName.MatchString(name) {
		return "", false, "", fmt.Errorf("service %s: toolset name %q must be lower case letters, digits and hyphens, starting with a letter, at most 32 characters", sd.FullName(), name)
	}
	desc, _, _ = strings.Cut(docs.Lookup(sd.FullName()), "\n\n")
	if desc == "" {
		return "", false, "", fmt.Errorf("service %s: no leading comment to describe its toolset %q", sd.FullName(), name)
	}
	return name, opt.GetDefault(), desc, nil
}

// domainOf is the domain a proto package names: the element before its
// version ("toolmesh.tasks.v1" is "tasks"), or its last element.
func domainOf(pkg protoreflect.FullName) string {
	parts := strings.Split(string(pkg), ".")
	last := len(parts) - 1
	if last > 0 && isVersion(parts[last]) {
		last--
	}
	return parts[last]
}

// isVersion reports whether a package element is a version: v1, v2beta1.
func isVersion(s string) bool {
	return len(s) > 1 && s[0] == 'v' && s[1] >= '0' && s[1] <= '9'
}

// bindToolsets groups the registry's tools into toolsets: each service's
// into its service's toolset, a tool with a toolset option into the
// toolset it names, which must be one of the registry's.
func (r *Registry) bindToolsets(services []protoreflect.ServiceDescriptor, docs Docs) error {
	byName := map[string]*Toolset{}
	ofService := map[protoreflect.FullName]*Toolset{}
	withTools := map[string]bool{}
	for _, t := range r.tools {
		withTools[t.Service] = true
	}
	for _, sd := range services {
		if !withTools[string(sd.FullName())] {
			continue
		}
		name, def, desc, err := serviceToolset(sd, docs)
		if err != nil {
			return err
		}
		ts := byName[name]
		switch {
		case ts == nil:
			ts = &Toolset{Name: name, Description: desc, Default: def}
			byName[name] = ts
		case ts.Default != def:
			return fmt.Errorf("toolset %q: its services disagree on whether it is a default toolset (see %s)", name, sd.FullName())
		case !strings.Contains(ts.Description, desc):
			ts.Description += " " + desc
		}
		ofService[sd.FullName()] = ts
	}
	for _, t := range r.tools {
		ts := ofService[protoreflect.FullName(t.Service)]
		if name := toolOption(t.Method).GetToolset(); name != "" {
			if ts = byName[name]; ts == nil {
				return fmt.Errorf("tool %q: toolset %q is not a toolset of this registry (a service's domain or its toolset option)", t.Name, name)
			}
		}
		t.Toolset = ts.Name
		ts.Tools = append(ts.Tools, t) // r.tools is sorted by name
	}
	for _, ts := range byName {
		if len(ts.Tools) > 0 {
			r.toolsets = append(r.toolsets, ts)
		}
	}
	sort.Slice(r.toolsets, func(i, j int) bool { return r.toolsets[i].Name < r.toolsets[j].Name })
	return nil
}
