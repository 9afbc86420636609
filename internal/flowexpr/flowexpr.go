// Package flowexpr is the expression language of agents' workflows: CEL
// (https://cel.dev, cel-go) over JSON values, and the template rule that
// puts expressions into strings. The service that checks a definition
// compiles with it; the worker that runs one evaluates with it; both see the
// same variables:
//
//	input   the run's input object
//	nodes   the nodes that completed so far: nodes.<id>.output
//	run     {id, workflow_id, version, agent}
//
// A template is a string. One that is exactly "${expr}" stands for the
// value of expr, whatever its type; "${expr}" inside a longer string is
// replaced by the value as text (a string as it is, anything else as
// JSON), and "$${" writes a literal "${".
//
//	env, _ := flowexpr.New()
//	x, _ := env.Compile("size(nodes.search.output.results) > 0")
//	ok, _ := x.EvalBool(flowexpr.Vars{Nodes: map[string]any{"search": map[string]any{"output": out}}})
//
// JSON numbers that are whole become CEL ints (so input.count + 1 works),
// others doubles; every value an expression produces goes back to JSON
// (ints as numbers, so beyond 2^53 they lose precision).
package flowexpr

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/ext"
	"google.golang.org/protobuf/types/known/structpb"
)

// The variables every expression sees.
const (
	VarInput = "input"
	VarNodes = "nodes"
	VarRun   = "run"
)

// costLimit bounds the work of one evaluation (CEL's cost units: roughly
// one per operation and per element a comprehension visits).
const costLimit = 1_000_000

// Env compiles expressions. It is safe for concurrent use.
type Env struct {
	env *cel.Env
}

// New returns the environment of workflow expressions.
func New() (*Env, error) {
	env, err := cel.NewEnv(
		cel.Variable(VarInput, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(VarNodes, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(VarRun, cel.MapType(cel.StringType, cel.DynType)),
		ext.Strings(),
	)
	if err != nil {
		return nil, fmt.Errorf("flowexpr: %w", err)
	}
	return &Env{env: env}, nil
}

// Vars are the values of the variables for one evaluation, as JSON values
// (what encoding/json or structpb's AsMap decode to).
type Vars struct {
	Input map[string]any
	Nodes map[string]any
	Run   map[string]any
}

// Expr is a compiled expression.
type Expr struct {
	src   string
	prg   cel.Program
	nodes []string
}

// Compile checks src and returns it ready to evaluate; the error says what
// is wrong and where.
func (e *Env) Compile(src string) (*Expr, error) {
	a, iss := e.env.Compile(src)
	if iss != nil && iss.Err() != nil {
		return nil, errors.New(iss.Err().Error())
	}
	prg, err := e.env.Program(a, cel.CostLimit(costLimit))
	if err != nil {
		return nil, err
	}
	return &Expr{src: src, prg: prg, nodes: nodeRefs(a.NativeRep())}, nil
}

// Nodes are the ids of the nodes the expression reads (nodes.<id> or
// nodes["<id>"]), in order of first mention.
func (x *Expr) Nodes() []string { return x.nodes }

// String is the expression's source.
func (x *Expr) String() string { return x.src }

// nodeRefs finds the node ids an expression reads.
func nodeRefs(a *ast.AST) []string {
	var out []string
	add := func(id string) {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	ast.PreOrderVisit(a.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.SelectKind:
			s := e.AsSelect()
			if s.Operand().Kind() == ast.IdentKind && s.Operand().AsIdent() == VarNodes {
				add(s.FieldName())
			}
		case ast.CallKind:
			c := e.AsCall()
			if (c.FunctionName() == operators.Index || c.FunctionName() == operators.OptIndex) && len(c.Args()) == 2 &&
				c.Args()[0].Kind() == ast.IdentKind && c.Args()[0].AsIdent() == VarNodes && c.Args()[1].Kind() == ast.LiteralKind {
				if s, ok := c.Args()[1].AsLiteral().Value().(string); ok {
					add(s)
				}
			}
		}
	}))
	return out
}

// Eval evaluates the expression and returns its value as JSON (nil, bool,
// float64, string, []any, map[string]any).
func (x *Expr) Eval(v Vars) (any, error) {
	out, _, err := x.prg.Eval(map[string]any{
		VarInput: toCEL(orEmpty(v.Input)),
		VarNodes: toCEL(orEmpty(v.Nodes)),
		VarRun:   toCEL(orEmpty(v.Run)),
	})
	if err != nil {
		return nil, err
	}
	pv, err := out.ConvertToNative(reflect.TypeFor[*structpb.Value]())
	if err != nil {
		return nil, fmt.Errorf("the value (%s) is not JSON: %w", out.Type().TypeName(), err)
	}
	return pv.(*structpb.Value).AsInterface(), nil
}

// EvalBool evaluates an expression that must be true or false.
func (x *Expr) EvalBool(v Vars) (bool, error) {
	out, err := x.Eval(v)
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("the value is %s, not true or false", describe(out))
	}
	return b, nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// toCEL readies a JSON value for CEL: whole numbers become ints.
func toCEL(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = toCEL(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = toCEL(e)
		}
		return out
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v)
		}
		return v
	}
	return v
}

// describe names a JSON value's type for an error.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
