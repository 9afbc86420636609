package toolcall

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/untrusted"
)

// EventGuardrail is the event logged when a tool's untrusted output held
// secrets that were redacted: the tool, the fields and the rules that
// found them, never the secrets.
const EventGuardrail = "guardrail"

// screen redacts the secrets in the untrusted string values of a tool's
// response, in place, logging one guardrail event when it redacted any,
// and returns the untrusted fields' names (nil when the scanner could not
// be built). It is the one place a service's answer is screened: the edge
// and the workers that run tool calls build envelopes only through it, so
// a redacted secret reaches no client, log, store or workflow history.
func (b *Binding) screen(ctx context.Context, out protoreflect.Message) []string {
	s, err := untrusted.Default()
	if err != nil {
		b.log.ErrorContext(ctx, "tool.scanner_failed", "tool", b.tool.Name, "error", err)
		return nil
	}
	names := make([]string, 0, len(b.tool.Untrusted))
	var rules, fields []string
	for _, p := range b.tool.Untrusted {
		names = append(names, p.String())
		n := len(rules)
		rules = redactPath(s, out, p, rules)
		if len(rules) > n {
			fields = append(fields, p.String())
		}
	}
	if len(rules) > 0 {
		b.log.WarnContext(ctx, EventGuardrail, "guardrail", "secret_redacted", "tool", b.tool.Name,
			"redacted", len(rules), "rules", dedupe(rules), "fields", fields)
	}
	return names
}

// redactPath redacts the strings p leads to in m, appending the rule of
// each secret redacted to rules.
func redactPath(s *untrusted.Scanner, m protoreflect.Message, p toolcatalog.UntrustedPath, rules []string) []string {
	fd := p[0]
	if !m.Has(fd) {
		return rules
	}
	if len(p) > 1 {
		if fd.IsList() {
			l := m.Mutable(fd).List()
			for i := 0; i < l.Len(); i++ {
				rules = redactPath(s, l.Get(i).Message(), p[1:], rules)
			}
			return rules
		}
		return redactPath(s, m.Mutable(fd).Message(), p[1:], rules)
	}
	if fd.IsList() {
		l := m.Mutable(fd).List()
		for i := 0; i < l.Len(); i++ {
			if clean, found := s.Redact(l.Get(i).String()); len(found) > 0 {
				l.Set(i, protoreflect.ValueOfString(clean))
				rules = append(rules, found...)
			}
		}
		return rules
	}
	if clean, found := s.Redact(m.Get(fd).String()); len(found) > 0 {
		m.Set(fd, protoreflect.ValueOfString(clean))
		rules = append(rules, found...)
	}
	return rules
}

func dedupe(rules []string) []string {
	var out []string
	for _, r := range rules {
		if !strings.Contains(","+strings.Join(out, ",")+",", ","+r+",") {
			out = append(out, r)
		}
	}
	return out
}

// MarkedText is the text a model reads of env: the envelope's JSON with
// every value of its untrusted fields wrapped (untrusted.Wrap). For an
// envelope without untrusted fields it is the envelope's JSON, as the
// structured content carries it. Only the text is marked: the structured
// content keeps the values as they are, valid against the tool's output
// schema, for views and programs.
func MarkedText(env *Envelope) ([]byte, error) {
	if len(env.Untrusted) == 0 || len(env.Data) == 0 {
		return Marshal(env)
	}
	dec := json.NewDecoder(bytes.NewReader(env.Data))
	dec.UseNumber()
	var data any
	if err := dec.Decode(&data); err != nil {
		return nil, err
	}
	for _, p := range env.Untrusted {
		data = wrapAt(data, strings.Split(p, "."))
	}
	marked := *env
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The markers are read as written, not as \u003c escapes.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(data); err != nil {
		return nil, err
	}
	marked.Data = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	buf = bytes.Buffer{}
	enc = json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&marked); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// wrapAt wraps the strings path leads to in v (decoded JSON): objects are
// entered by key, arrays element by element.
func wrapAt(v any, path []string) any {
	switch x := v.(type) {
	case []any:
		for i := range x {
			x[i] = wrapAt(x[i], path)
		}
		return x
	case map[string]any:
		if len(path) == 0 {
			return x
		}
		if child, ok := x[path[0]]; ok {
			x[path[0]] = wrapAt(child, path[1:])
		}
		return x
	case string:
		if len(path) == 0 {
			return untrusted.Wrap(x)
		}
	}
	return v
}
