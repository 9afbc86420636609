// Package untrusted screens text that reaches the mesh from outside — web
// pages, issue bodies, other agents' answers — before a model reads it.
// Two things happen to such text, always together:
//
//   - Scanner finds secrets in it (token formats of the major providers,
//     private keys: the rules of gitleaks' default configuration) and
//     Redact replaces each with "[REDACTED:<rule id>]", so that a token an
//     upstream leaked reaches no client, log, store or workflow history;
//   - Wrap marks each value for the model that reads it:
//     "<untrusted>…</untrusted>", with any marker inside the text defused,
//     so the text cannot pretend to end its own marking.
//
// Which values are untrusted is said by the contracts: the
// toolmesh.tool.v1 untrusted field option (internal/toolcatalog reads it).
// internal/toolcall applies both steps in the one place where a service's
// response becomes a tool's envelope.
//
//	s, _ := untrusted.NewScanner()
//	clean, rules := s.Redact("token ghp_…")   // "token [REDACTED:github-pat]", ["github-pat"]
//	text := untrusted.Wrap(clean)              // "<untrusted>token [REDACTED:github-pat]</untrusted>"
package untrusted

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/viper"
	"github.com/zricethezav/gitleaks/v8/config"
)

// Scanner finds secrets with gitleaks' default rules (the detector
// configuration only: its scanning of files, archives and git histories is
// not linked in). Build one at start and share it: it is safe for
// concurrent use.
type Scanner struct {
	rules []config.Rule
	// global are the configuration's allowlists, which apply to every rule.
	global []*config.Allowlist
}

// NewScanner compiles gitleaks' default rules.
func NewScanner() (*Scanner, error) {
	v := viper.New()
	v.SetConfigType("toml")
	if err := v.ReadConfig(strings.NewReader(config.DefaultConfig)); err != nil {
		return nil, fmt.Errorf("secret rules: %w", err)
	}
	var vc config.ViperConfig
	if err := v.Unmarshal(&vc); err != nil {
		return nil, fmt.Errorf("secret rules: %w", err)
	}
	cfg, err := vc.Translate()
	if err != nil {
		return nil, fmt.Errorf("secret rules: %w", err)
	}
	s := &Scanner{global: cfg.Allowlists}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range cfg.Rules {
			if !yield(id) {
				return
			}
		}
	}) {
		r := cfg.Rules[id]
		// A rule on file paths only, or one that only supports another
		// rule's finding, finds nothing in text on its own.
		if r.Regex == nil || r.SkipReport || len(r.RequiredRules) > 0 {
			continue
		}
		s.rules = append(s.rules, r)
	}
	return s, nil
}

// Rules is the number of rules the scanner applies.
func (s *Scanner) Rules() int { return len(s.rules) }

// span is a secret found in a text: its byte range and its rule.
type span struct {
	start, end int
	rule       string
}

// Redact returns text with every secret found replaced by
// "[REDACTED:<rule id>]", and the ids of the rules that found them, one
// per secret, in the order of the text. A text without secrets is returned
// as it is.
func (s *Scanner) Redact(text string) (string, []string) {
	if s == nil || text == "" {
		return text, nil
	}
	var found []span
	lower := strings.ToLower(text)
	for i := range s.rules {
		r := &s.rules[i]
		if len(r.Keywords) > 0 && !slices.ContainsFunc(r.Keywords, func(k string) bool { return strings.Contains(lower, k) }) {
			continue
		}
		for _, m := range r.Regex.FindAllStringSubmatchIndex(text, -1) {
			start, end := secretOf(r, m)
			if start < 0 {
				continue
			}
			secret := text[start:end]
			if r.Entropy != 0 && entropy(secret) <= r.Entropy {
				continue
			}
			if allowed(secret, text[m[0]:m[1]], r.Allowlists) || allowed(secret, text[m[0]:m[1]], s.global) {
				continue
			}
			found = append(found, span{start: start, end: end, rule: r.RuleID})
		}
	}
	if len(found) == 0 {
		return text, nil
	}
	// Overlapping finds (two rules on one token) become one redaction, the
	// widest first.
	slices.SortFunc(found, func(a, b span) int {
		if a.start != b.start {
			return a.start - b.start
		}
		return b.end - a.end
	})
	var (
		b     strings.Builder
		rules []string
		at    int
	)
	for _, f := range found {
		if f.start < at {
			continue
		}
		b.WriteString(text[at:f.start])
		b.WriteString("[REDACTED:" + f.rule + "]")
		rules = append(rules, f.rule)
		at = f.end
	}
	b.WriteString(text[at:])
	return b.String(), rules
}

// secretOf is the part of match m (submatch indexes) that is the secret:
// the rule's secret group, else the first group that matched, else the
// whole match — as gitleaks takes it. -1 when the rule's group is missing.
func secretOf(r *config.Rule, m []int) (start, end int) {
	groups := len(m)/2 - 1
	switch {
	case r.SecretGroup > 0 && r.SecretGroup <= groups && m[2*r.SecretGroup] >= 0:
		return m[2*r.SecretGroup], m[2*r.SecretGroup+1]
	case r.SecretGroup > 0:
		return -1, -1
	}
	for g := 1; g <= groups; g++ {
		if m[2*g] >= 0 && m[2*g+1] > m[2*g] {
			return m[2*g], m[2*g+1]
		}
	}
	return m[0], m[1]
}

// allowed reports whether an allowlist lets secret (found in match) pass:
// one of its regexes matches it, or it holds a stop word. Allowlists on
// commits and paths do not apply to text outside a repository.
func allowed(secret, match string, lists []*config.Allowlist) bool {
	for _, a := range lists {
		if a.MatchCondition == config.AllowlistMatchAnd && (len(a.Paths) > 0 || len(a.Commits) > 0) {
			continue // also needs a path or commit, which text has not
		}
		target := secret
		if a.RegexTarget == "match" || a.RegexTarget == "line" {
			target = match
		}
		if a.RegexAllowed(target) {
			return true
		}
		if ok, _ := a.ContainsStopWord(secret); ok {
			return true
		}
	}
	return false
}

// entropy is the Shannon entropy of s, in bits per byte.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	var e float64
	n := float64(len(s))
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			e -= p * math.Log2(p)
		}
	}
	return e
}

// Open and Close mark untrusted text where a model reads it.
const (
	Open  = "<untrusted>"
	Close = "</untrusted>"
)

// Wrap marks s as untrusted text: Open, s, Close. A marker inside s is
// defused (its "<" becomes "‹"), so s cannot close its own marking early or
// open another.
func Wrap(s string) string {
	if strings.Contains(strings.ToLower(s), "untrusted>") {
		s = defuse(s)
	}
	return Open + s + Close
}

// defuse replaces the "<" of every "<untrusted>" and "</untrusted>" in s,
// in any case, with "‹".
func defuse(s string) string {
	lower := strings.ToLower(s)
	var b strings.Builder
	at := 0
	for i := 0; i < len(lower); i++ {
		if lower[i] != '<' {
			continue
		}
		rest := lower[i+1:]
		if strings.HasPrefix(rest, "untrusted>") || strings.HasPrefix(rest, "/untrusted>") {
			b.WriteString(s[at:i])
			b.WriteString("‹")
			at = i + 1
		}
	}
	b.WriteString(s[at:])
	return b.String()
}

// Default is the scanner of gitleaks' default rules, built once, on first
// use, and shared: like a compiled regular expression, it never changes.
var Default = sync.OnceValues(NewScanner)
