package flowexpr

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Template is a string with expressions in it (see the package comment).
type Template struct {
	// whole is the expression of a template that is exactly "${expr}".
	whole *Expr
	// parts are the literal text and the expressions, in order.
	parts []part
}

type part struct {
	text string
	expr *Expr
}

// Template compiles the template s; the error says which expression is
// wrong and why.
func (e *Env) Template(s string) (*Template, error) {
	var t Template
	var lit strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			lit.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end, err := closing(s, i+2)
			if err != nil {
				return nil, err
			}
			src := s[i+2 : end]
			x, err := e.Compile(src)
			if err != nil {
				return nil, fmt.Errorf("${%s}: %w", src, err)
			}
			if lit.Len() > 0 {
				t.parts = append(t.parts, part{text: lit.String()})
				lit.Reset()
			}
			t.parts = append(t.parts, part{expr: x})
			i = end + 1
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	if lit.Len() > 0 {
		t.parts = append(t.parts, part{text: lit.String()})
	}
	if len(t.parts) == 1 && t.parts[0].expr != nil {
		t.whole = t.parts[0].expr
	}
	return &t, nil
}

// closing finds the "}" that closes the expression starting at from: the
// first one outside quotes and outside braces the expression opens.
func closing(s string, from int) (int, error) {
	depth := 0
	var quote byte
	for i := from; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '{':
			depth++
		case c == '}':
			if depth == 0 {
				return i, nil
			}
			depth--
		}
	}
	return 0, fmt.Errorf("${ at offset %d has no closing }", from-2)
}

// Constant reports whether the template has no expression: its value is
// its text.
func (t *Template) Constant() bool {
	return !slices.ContainsFunc(t.parts, func(p part) bool { return p.expr != nil })
}

// Nodes are the ids of the nodes the template's expressions read.
func (t *Template) Nodes() []string {
	var out []string
	for _, p := range t.parts {
		if p.expr != nil {
			for _, n := range p.expr.Nodes() {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		}
	}
	return out
}

// Eval is the template's value: the expression's value for "${expr}",
// else the text with every expression's value in its place.
func (t *Template) Eval(v Vars) (any, error) {
	if t.whole != nil {
		return t.whole.Eval(v)
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.expr == nil {
			b.WriteString(p.text)
			continue
		}
		val, err := p.expr.Eval(v)
		if err != nil {
			return nil, fmt.Errorf("${%s}: %w", p.expr, err)
		}
		b.WriteString(text(val))
	}
	return b.String(), nil
}

// text is a value as it stands in a string: a string as it is, a whole
// number without a fraction, anything else as JSON.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Value is a JSON value whose strings are templates (a tool's arguments).
type Value struct {
	tree any
}

// Value compiles every string of the JSON value v (as structpb's AsMap or
// encoding/json decode it); an error names the path of the bad string,
// e.g. "query" or "labels[2]".
func (e *Env) Value(v any) (*Value, error) {
	tree, err := e.compileTree(v, "")
	if err != nil {
		return nil, err
	}
	return &Value{tree: tree}, nil
}

// PathError is a template that does not compile, at a path in a value.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *PathError) Unwrap() error { return e.Err }

func (e *Env) compileTree(v any, path string) (any, error) {
	switch v := v.(type) {
	case string:
		t, err := e.Template(v)
		if err != nil {
			return nil, &PathError{Path: path, Err: err}
		}
		if t.Constant() {
			return literal(t), nil
		}
		return t, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for _, k := range sortedKeys(v) {
			c, err := e.compileTree(v[k], join(path, k))
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, el := range v {
			c, err := e.compileTree(el, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	}
	return v, nil
}

// literal is a constant template's string ("$${" already unescaped).
func literal(t *Template) string {
	if len(t.parts) == 0 {
		return ""
	}
	return t.parts[0].text
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Templated are the top-level keys of an object value whose value holds a
// template, sorted.
func (val *Value) Templated() []string {
	m, ok := val.tree.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	for _, k := range sortedKeys(m) {
		if hasTemplate(m[k]) {
			out = append(out, k)
		}
	}
	return out
}

// Constant is the value without the top-level keys that hold templates
// (everything that can be checked before a run).
func (val *Value) Constant() any {
	m, ok := val.tree.(map[string]any)
	if !ok {
		return val.tree
	}
	out := map[string]any{}
	for k, v := range m {
		if !hasTemplate(v) {
			out[k] = v
		}
	}
	return out
}

func hasTemplate(v any) bool {
	switch v := v.(type) {
	case *Template:
		return true
	case map[string]any:
		for _, e := range v {
			if hasTemplate(e) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, hasTemplate)
	}
	return false
}

// Nodes are the ids of the nodes the value's templates read.
func (val *Value) Nodes() []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case *Template:
			for _, n := range v.Nodes() {
				if !slices.Contains(out, n) {
					out = append(out, n)
				}
			}
		case map[string]any:
			for _, k := range sortedKeys(v) {
				walk(v[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(val.tree)
	return out
}

// Eval is the value with every template replaced by its value; an error
// names the path of the template that failed.
func (val *Value) Eval(v Vars) (any, error) {
	return evalTree(val.tree, v, "")
}

func evalTree(t any, v Vars, path string) (any, error) {
	switch t := t.(type) {
	case *Template:
		out, err := t.Eval(v)
		if err != nil {
			return nil, &PathError{Path: path, Err: err}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(t))
		for _, k := range sortedKeys(t) {
			e, err := evalTree(t[k], v, join(path, k))
			if err != nil {
				return nil, err
			}
			out[k] = e
		}
		return out, nil
	case []any:
		out := make([]any, len(t))
		for i, el := range t {
			e, err := evalTree(el, v, fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	}
	return t, nil
}
