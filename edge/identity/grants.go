package identity

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Grants is the grants file: what each token subject may do beyond what its
// token's scopes allow. It is how an operator hands out privileged tools and
// roles without changing the identity provider.
//
//	# grants.yaml
//	subjects:
//	  "user-123":                  # the token's sub claim
//	    roles: [owner]             # carried to services in the mesh token
//	    scopes: [toolmesh:admin]   # added to the token's scopes
//	    tools: [credits_grant]     # explicit grants (privileged tools need one)
//	  "*":                         # applies to every authenticated caller
//	    scopes: [toolmesh:read]
type Grants struct {
	Subjects map[string]Grant `yaml:"subjects"`
}

// Grant is what one subject is granted.
type Grant struct {
	Roles  []string `yaml:"roles"`
	Scopes []string `yaml:"scopes"`
	Tools  []string `yaml:"tools"`
}

// wildcardSubject is the grants entry every authenticated caller gets.
const wildcardSubject = "*"

// ParseGrants reads a grants file (YAML, or JSON). Unknown keys are errors,
// so a typo never silently grants nothing.
func ParseGrants(data []byte) (*Grants, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var g Grants
	if err := dec.Decode(&g); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("grants file: %w", err)
	}
	for subject, entry := range g.Subjects {
		if strings.TrimSpace(subject) == "" {
			return nil, errors.New("grants file: empty subject")
		}
		for _, s := range entry.Scopes {
			if !strings.HasPrefix(s, "toolmesh:") {
				return nil, fmt.Errorf("grants file: subject %q: scope %q is not a toolmesh scope", subject, s)
			}
		}
		for _, r := range entry.Roles {
			if r == "" || len(r) > 64 {
				return nil, fmt.Errorf("grants file: subject %q: a role must be 1 to 64 characters", subject)
			}
		}
	}
	return &g, nil
}

// lookup returns the merged grant of subject: its own entry plus the
// wildcard entry (nil when neither exists).
func (g *Grants) lookup(subject string) *Grant {
	if g == nil {
		return nil
	}
	own, okOwn := g.Subjects[subject]
	every, okAny := g.Subjects[wildcardSubject]
	if subject == "" {
		okOwn = false
	}
	switch {
	case okOwn && okAny:
		return &Grant{
			Roles:  append(append([]string{}, own.Roles...), every.Roles...),
			Scopes: append(append([]string{}, own.Scopes...), every.Scopes...),
			Tools:  append(append([]string{}, own.Tools...), every.Tools...),
		}
	case okOwn:
		return &own
	case okAny:
		return &every
	}
	return nil
}

// Check reports grants of tools the edge does not have (a typo); known
// reports whether the edge has a tool.
func (g *Grants) Check(known func(string) bool) error {
	if g == nil {
		return nil
	}
	for subject, entry := range g.Subjects {
		for _, t := range entry.Tools {
			if !known(t) {
				return fmt.Errorf("grants file: subject %q is granted unknown tool %q", subject, t)
			}
		}
	}
	return nil
}
