package flowexpr_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/flowexpr"
)

func env(t *testing.T) *flowexpr.Env {
	t.Helper()
	e, err := flowexpr.New()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// vars decodes JSON into the variables, as a run holds them.
func vars(t *testing.T, input, nodes string) flowexpr.Vars {
	t.Helper()
	var v flowexpr.Vars
	if err := json.Unmarshal([]byte(input), &v.Input); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(nodes), &v.Nodes); err != nil {
		t.Fatal(err)
	}
	v.Run = map[string]any{"id": "run_1", "version": 2.0}
	return v
}

func TestExpressionsSeeTheInputEarlierNodesAndTheRun(t *testing.T) {
	e := env(t)
	v := vars(t, `{"topic":"temporal","count":3}`, `{"search":{"output":{"results":[{"url":"https://a"},{"url":"https://b"}]}}}`)
	for src, want := range map[string]any{
		`input.topic`:                                    "temporal",
		`input.count + 1`:                                4.0, // a whole JSON number is an int
		`size(nodes.search.output.results) > 1`:          true,
		`nodes["search"].output.results[1].url`:          "https://b",
		`has(nodes.skipped)`:                             false,
		`run.version == 2`:                               true,
		`{"n": input.count, "tags": ["a", input.topic]}`: map[string]any{"n": 3.0, "tags": []any{"a", "temporal"}},
		`input.topic.upperAscii()`:                       "TEMPORAL",
		`nodes.search.output.results.map(r, r.url)`:      []any{"https://a", "https://b"},
	} {
		x, err := e.Compile(src)
		if err != nil {
			t.Errorf("Compile(%s): %v", src, err)
			continue
		}
		got, err := x.Eval(v)
		if err != nil {
			t.Errorf("Eval(%s): %v", src, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Eval(%s) (-want +got):\n%s", src, diff)
		}
	}
}

func TestCompileRefusesWhatCannotRun(t *testing.T) {
	e := env(t)
	for src, says := range map[string]string{
		`input.topic +`:      "Syntax error",
		`nodez.fetch.output`: "undeclared reference",
		`input.topic.nope()`: "undeclared reference",
		`1 + "a"`:            "no matching overload",
	} {
		if _, err := e.Compile(src); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Compile(%s) = %v, want an error saying %q", src, err, says)
		}
	}
}

func TestExpressionsNameTheNodesTheyRead(t *testing.T) {
	x, err := env(t).Compile(`nodes.a.output.x + nodes["b"].output.y + (has(nodes.c) ? 1 : 0) + nodes.a.output.z`)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, x.Nodes()); diff != "" {
		t.Errorf("Nodes (-want +got):\n%s", diff)
	}
}

func TestEvalBoolRefusesOtherValues(t *testing.T) {
	x, err := env(t).Compile(`input.topic`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.EvalBool(vars(t, `{"topic":"x"}`, `{}`)); err == nil || !strings.Contains(err.Error(), "not true or false") {
		t.Errorf("EvalBool of a string = %v, want an error", err)
	}
}

func TestRunawayExpressionsStop(t *testing.T) {
	x, err := env(t).Compile(`[1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10].map(e, [1,2,3,4,5,6,7,8,9,10].map(f, a+b+c+d+e+f))))))`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Eval(flowexpr.Vars{}); err == nil || !strings.Contains(err.Error(), "cost") {
		t.Errorf("a million-step expression = %v, want stopped by the cost limit", err)
	}
}

func TestTemplates(t *testing.T) {
	e := env(t)
	v := vars(t, `{"topic":"temporal","n":2,"labels":["a","b"]}`, `{"fetch":{"output":{"title":"Hi } there","score":0.5}}}`)
	for tmpl, want := range map[string]any{
		`plain text`:                         "plain text",
		`${input.n}`:                         2.0,
		`${input.labels}`:                    []any{"a", "b"},
		`About ${input.topic}: ${input.n}`:   "About temporal: 2",
		`score ${nodes.fetch.output.score}`:  "score 0.5",
		`labels ${input.labels}`:             `labels ["a","b"]`,
		`${nodes.fetch.output.title}!`:       "Hi } there!",
		`${ {"a": input.n}["a"] } items`:     "2 items",
		`literal $${input.topic} and ${"}"}`: "literal ${input.topic} and }",
	} {
		tp, err := e.Template(tmpl)
		if err != nil {
			t.Errorf("Template(%s): %v", tmpl, err)
			continue
		}
		got, err := tp.Eval(v)
		if err != nil {
			t.Errorf("Eval(%s): %v", tmpl, err)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Eval(%s) (-want +got):\n%s", tmpl, diff)
		}
	}
	for _, bad := range []string{`${input.topic`, `x ${input.}`, `${}`} {
		if _, err := e.Template(bad); err == nil {
			t.Errorf("Template(%s) compiled, want an error", bad)
		}
	}
}

func TestValuesKeepConstantsAndNameTemplatePaths(t *testing.T) {
	e := env(t)
	var args map[string]any
	if err := json.Unmarshal([]byte(`{"description":"${input.topic}","priority":2,"meta":{"k":"v","from":"${nodes.a.output.x}"},"tags":["x","$${y}"]}`), &args); err != nil {
		t.Fatal(err)
	}
	val, err := e.Value(args)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"description", "meta"}, val.Templated()); diff != "" {
		t.Errorf("Templated (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"priority": 2.0, "tags": []any{"x", "${y}"}}, val.Constant()); diff != "" {
		t.Errorf("Constant (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a"}, val.Nodes()); diff != "" {
		t.Errorf("Nodes (-want +got):\n%s", diff)
	}
	got, err := val.Eval(vars(t, `{"topic":"t"}`, `{"a":{"output":{"x":7}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"description": "t", "priority": 2.0, "meta": map[string]any{"k": "v", "from": 7.0}, "tags": []any{"x", "${y}"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Eval (-want +got):\n%s", diff)
	}
	// A template that fails at run time names its path.
	if _, err := val.Eval(vars(t, `{"topic":"t"}`, `{}`)); err == nil || !strings.HasPrefix(err.Error(), "meta.from: ") {
		t.Errorf("Eval without node a = %v, want an error at meta.from", err)
	}
	// One that does not compile, too.
	if _, err := e.Value(map[string]any{"list": []any{"ok", "${nope}"}}); err == nil || !strings.HasPrefix(err.Error(), "list[1]: ") {
		t.Errorf("Value with a bad template = %v, want an error at list[1]", err)
	}
}
