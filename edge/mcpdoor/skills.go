package mcpdoor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/toolmesh/toolmesh/edge/httpguard"
)

// Skills (the Skills extension, SEP-2640): a toolset may ship skills —
// Markdown instructions (SKILL.md, with YAML frontmatter) that teach a
// model to chain its tools — kept beside its contract in
// proto/toolmesh/<domain>/v1/assets/skills/<name>/ and embedded with the
// rest of the contracts' assets (Config.Assets). Each file of a skill is a
// resource, skill://toolmesh/<toolset>/<name>/<file>; skills/list lists the
// skills of the toolsets the request's selection reaches, and skills/get
// answers for any skill, listed or not (skills are not secrets). Every
// file's bytes, digest and size are read once, at start.

// ExtensionSkills is the Skills extension's identifier.
const ExtensionSkills = "io.modelcontextprotocol/skills"

const (
	methodSkillsList = "skills/list"
	methodSkillsGet  = "skills/get"
	// skillScheme and skillAuthority begin every skill URI.
	skillPrefix = "skill://toolmesh/"
	skillFile   = "SKILL.md"
	// The extension's bounds on one skill.
	maxSkillFiles = 512
	maxSkillBytes = 16 << 20
)

// skillName is the form of a skill's name (agentskills.io): lower-case
// words joined by single hyphens, at most 64 characters.
var skillName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// skill is a skill as the door serves it.
type skill struct {
	toolset string
	entry   *skillEntry
	files   []skillBlob
}

// skillBlob is one file of a skill; a SKILL.md's resource is named and
// described as its frontmatter says.
type skillBlob struct {
	uri, name, description string
	b                      []byte
}

// skillEntry is a Skill of skills/list and skills/get.
type skillEntry struct {
	URI         string          `json:"uri"`
	Frontmatter map[string]any  `json:"frontmatter"`
	Resources   []skillResource `json:"resources"`
}

type skillResource struct {
	URI    string `json:"uri"`
	Digest string `json:"digest"`
	Size   int    `json:"size"`
}

type skillParams struct {
	mcp.ParamsBase
	URI    string `json:"uri,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

type skillsListResult struct {
	mcp.ResultBase
	ResultType string        `json:"resultType"`
	Skills     []*skillEntry `json:"skills"`
	TTLMs      int           `json:"ttlMs"`
	CacheScope string        `json:"cacheScope"`
}

type skillsGetResult struct {
	mcp.ResultBase
	ResultType string      `json:"resultType"`
	Skill      *skillEntry `json:"skill"`
	TTLMs      int         `json:"ttlMs"`
	CacheScope string      `json:"cacheScope"`
}

// skillFeature serves the skills of the toolsets the door serves, sorted
// by URI, and byURI finds them.
type skillFeature struct {
	skills   []*skill
	byURI    map[string]*skill
	assets   fs.FS
	listTTL  time.Duration
	toolsets *toolsets
}

// loadSkills reads the skills of the assets whose contract the door
// serves (a domain's skills belong to its services' toolset), sorted by
// URI. A skill that breaks the format stops the edge at start.
func (sk *skillFeature) loadSkills(sorted []*tool) error {
	if sk.assets == nil {
		return nil
	}
	toolsetOf := map[string]string{} // proto package → toolset
	for _, t := range sorted {
		pkg := t.catalog.Service[:max(strings.LastIndexByte(t.catalog.Service, '.'), 0)]
		if _, ok := toolsetOf[pkg]; !ok {
			toolsetOf[pkg] = t.catalog.Toolset
		}
	}
	dirs, err := fs.Glob(sk.assets, "toolmesh/*/v1/skills/*/"+skillFile)
	if err != nil {
		return err
	}
	for _, f := range dirs {
		dir := path.Dir(f)
		parts := strings.Split(dir, "/") // toolmesh <domain> v1 skills <name>
		toolset, ok := toolsetOf[strings.Join(parts[:3], ".")]
		if !ok {
			continue // a contract this edge does not serve
		}
		s, err := sk.loadSkill(dir, toolset, parts[4])
		if err != nil {
			return fmt.Errorf("edge: skill %s: %w", dir, err)
		}
		sk.skills = append(sk.skills, s)
		sk.byURI[s.entry.URI] = s
	}
	sort.Slice(sk.skills, func(i, j int) bool { return sk.skills[i].entry.URI < sk.skills[j].entry.URI })
	return nil
}

func (sk *skillFeature) loadSkill(dir, toolset, name string) (*skill, error) {
	base := skillPrefix + toolset + "/" + name + "/"
	s := &skill{toolset: toolset, entry: &skillEntry{URI: base + skillFile}}
	total := 0
	err := fs.WalkDir(sk.assets, dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sk.assets, p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, dir+"/")
		blob := skillBlob{uri: base + rel, name: name + "/" + rel, b: b}
		if rel == skillFile {
			if s.entry.Frontmatter, err = frontmatter(b, name); err != nil {
				return err
			}
			blob.name, blob.description = name, s.entry.Frontmatter["description"].(string)
		}
		total += len(b)
		sum := sha256.Sum256(b)
		s.entry.Resources = append(s.entry.Resources, skillResource{URI: blob.uri, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(b)})
		s.files = append(s.files, blob)
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case len(s.entry.Resources) > maxSkillFiles || total > maxSkillBytes:
		return nil, fmt.Errorf("%d files, %d bytes: more than a skill may hold (%d files, %d bytes)", len(s.entry.Resources), total, maxSkillFiles, maxSkillBytes)
	}
	return s, nil
}

// frontmatter is a SKILL.md's YAML frontmatter, which must name the skill
// as its directory does and describe it.
func frontmatter(b []byte, dirName string) (map[string]any, error) {
	rest, ok := bytes.CutPrefix(b, []byte("---\n"))
	end := bytes.Index(rest, []byte("\n---\n"))
	if !ok || end < 0 {
		return nil, errors.New("SKILL.md does not begin with a YAML frontmatter between --- lines")
	}
	var fm map[string]any
	if err := yaml.Unmarshal(rest[:end], &fm); err != nil {
		return nil, fmt.Errorf("SKILL.md frontmatter: %w", err)
	}
	name, _ := fm["name"].(string)
	desc, _ := fm["description"].(string)
	switch {
	case name != dirName || len(name) > 64 || !skillName.MatchString(name):
		return nil, fmt.Errorf("frontmatter name %q must be its directory's name, lower-case words joined by hyphens, at most 64 characters", name)
	case strings.TrimSpace(desc) == "" || utf8.RuneCountInString(desc) > 1024:
		return nil, errors.New("frontmatter description must have 1 to 1024 characters")
	}
	return fm, nil
}

// addSkillResource serves one file of a skill as a resource.
func (sk *skillFeature) addSkillResource(server *mcp.Server, f skillBlob) {
	uri, b := f.uri, f.b
	mt := "text/markdown"
	if path.Base(uri) != skillFile {
		if mt = mime.TypeByExtension(path.Ext(uri)); mt == "" {
			mt = "application/octet-stream"
		}
	}
	server.AddResource(&mcp.Resource{URI: uri, Name: f.name, Description: f.description, MIMEType: mt, Size: int64(len(b))},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			c := &mcp.ResourceContents{URI: uri, MIMEType: mt}
			if strings.HasPrefix(mt, "text/") && utf8.Valid(b) {
				c.Text = string(b)
			} else {
				c.Blob = b
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
		})
}

// addSkills registers each file of each skill as a resource, and
// skills/list and skills/get, which the door's middleware answers
// (serveSkills).
func (sk *skillFeature) addSkills(server *mcp.Server) error {
	if len(sk.skills) == 0 {
		return nil
	}
	for _, s := range sk.skills {
		for _, f := range s.files {
			sk.addSkillResource(server, f)
		}
	}
	unreachable := func(context.Context, *mcp.ServerSession, *skillParams) (*skillsGetResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "skills method outside the edge's middleware"}
	}
	for _, m := range []string{methodSkillsList, methodSkillsGet} {
		if err := mcp.AddReceivingCustomMethod(server, m, unreachable); err != nil {
			return fmt.Errorf("register %s: %w", m, err)
		}
	}
	return nil
}

// serveSkills answers skills/list (the skills of the toolsets r reaches)
// and skills/get (any skill).
func (sk *skillFeature) serveSkills(method string, req mcp.Request, r *reach) (mcp.Result, error) {
	var p skillParams
	if sr, ok := req.(*mcp.ServerRequest[*skillParams]); ok && sr.Params != nil {
		p = *sr.Params
	}
	ttl := int(sk.listTTL.Milliseconds())
	if method == methodSkillsGet {
		s := sk.byURI[p.URI]
		if s == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("no skill %q: a skill's uri is its SKILL.md's, as skills/list shows it", httpguard.Truncate(p.URI, 200))}
		}
		return &skillsGetResult{ResultType: "complete", Skill: s.entry, TTLMs: ttl, CacheScope: "public"}, nil
	}
	if p.Cursor != "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "skills/list has one page: its answer has no nextCursor"}
	}
	out := &skillsListResult{ResultType: "complete", Skills: []*skillEntry{}, TTLMs: ttl, CacheScope: "public"}
	for _, s := range sk.skills {
		if sk.toolsets.selects(r.sel, s.toolset) {
			out.Skills = append(out.Skills, s.entry)
		}
	}
	return out, nil
}
