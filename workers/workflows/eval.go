package workflows

import (
	"encoding/json"
	"errors"
	"sort"

	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/flowexpr"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// Expressions are evaluated inside workflow.SideEffect: the value (or why
// there is none) is recorded in the history, and a replay reads it back
// instead of evaluating again, so a change to the expression library never
// changes a run in flight. Inside, anything goes (maps iterate in any
// order, the CEL environment is built once per worker process and run).

// evaluated is a SideEffect's record: the value as JSON, or why it failed.
type evaluated struct {
	JSON  string `json:"json,omitempty"`
	Error string `json:"error,omitempty"`
}

// What an evaluation computes.
const (
	evalArguments = iota // a JSON value with templates (an action's arguments)
	evalBool             // an expression that is true or false (a condition)
	evalText             // a template, as text (an approval's question)
	evalOutput           // an expression, or every node's output (an end node)
)

// evaluation is one thing to evaluate.
type evaluation struct {
	kind int
	src  string
	args *structpb.Struct
}

// evaluate computes e, once, and returns its value as JSON.
func (r *run) evaluate(ctx workflow.Context, e evaluation) (string, error) {
	var res evaluated
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		val, err := r.compute(e)
		if err != nil {
			return evaluated{Error: err.Error()}
		}
		b, err := json.Marshal(val)
		if err != nil {
			return evaluated{Error: "the value is not JSON: " + err.Error()}
		}
		return evaluated{JSON: string(b)}
	}).Get(&res)
	if err != nil {
		return "", err
	}
	if res.Error != "" {
		return "", errors.New(res.Error)
	}
	return res.JSON, nil
}

// compute evaluates e with the run's variables. Only called inside
// SideEffect.
func (r *run) compute(e evaluation) (any, error) {
	if r.env == nil {
		env, err := flowexpr.New()
		if err != nil {
			return nil, err
		}
		r.env = env
	}
	v := r.vars()
	switch e.kind {
	case evalArguments:
		val, err := r.env.Value(e.args.AsMap())
		if err != nil {
			return nil, err
		}
		return val.Eval(v)
	case evalBool:
		x, err := r.env.Compile(e.src)
		if err != nil {
			return nil, err
		}
		return x.EvalBool(v)
	case evalText:
		t, err := r.env.Template(e.src)
		if err != nil {
			return nil, err
		}
		val, err := t.Eval(v)
		if s, ok := val.(string); ok || err != nil {
			return s, err
		}
		b, err := json.Marshal(val)
		return string(b), err
	}
	if e.src == "" {
		ids := make([]string, 0, len(v.Nodes))
		for id := range v.Nodes {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		out := map[string]any{}
		for _, id := range ids {
			out[id] = v.Nodes[id].(map[string]any)["output"]
		}
		return out, nil
	}
	x, err := r.env.Compile(e.src)
	if err != nil {
		return nil, err
	}
	return x.Eval(v)
}

// vars are the variables expressions see: the input, the completed nodes'
// outputs, the run. Only called inside SideEffect.
func (r *run) vars() flowexpr.Vars {
	nodes := make(map[string]any, len(r.outputs))
	for id, out := range r.outputs {
		nodes[id] = map[string]any{"output": out.AsInterface()}
	}
	return flowexpr.Vars{
		Input: r.in.GetInput().AsMap(),
		Nodes: nodes,
		Run: map[string]any{"id": r.in.GetRunId(), "workflow_id": r.in.GetWorkflowId(), "version": float64(r.in.GetVersion()),
			"agent": r.in.GetStarter().GetAgent()},
	}
}

// arguments are an action's arguments with their templates filled in, as
// a JSON object.
func (r *run) arguments(ctx workflow.Context, args *structpb.Struct) (string, error) {
	return r.evaluate(ctx, evaluation{kind: evalArguments, args: args})
}

// evalBool is a condition's value.
func (r *run) evalBool(ctx workflow.Context, src string) (bool, error) {
	js, err := r.evaluate(ctx, evaluation{kind: evalBool, src: src})
	return js == "true", err
}

// text is a template's value as text.
//
//workflowcheck:ignore decoding the recorded JSON string is deterministic
func (r *run) text(ctx workflow.Context, tmpl string) (string, error) {
	js, err := r.evaluate(ctx, evaluation{kind: evalText, src: tmpl})
	if err != nil {
		return "", err
	}
	var s string
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		return "", err
	}
	return s, nil
}

// endOutput is an end node's output: its expression's value, or every
// completed node's output by node id.
func (r *run) endOutput(ctx workflow.Context, src string) (*structpb.Value, error) {
	js, err := r.evaluate(ctx, evaluation{kind: evalOutput, src: src})
	if err != nil {
		return nil, err
	}
	return jsonValue(js)
}

// jsonValue decodes recorded JSON into a value.
//
//workflowcheck:ignore decoding recorded JSON is deterministic
func jsonValue(js string) (*structpb.Value, error) {
	var out structpb.Value
	if err := protojson.Unmarshal([]byte(js), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// envelope is what a node reads of a tool's result envelope.
type envelope struct {
	status, code, message string
	data                  *structpb.Value
}

// decodeEnvelope reads the calls worker's result envelope (the activity's
// recorded result): a success's data, or an error's domain code and
// message.
//
//workflowcheck:ignore decoding a recorded activity result is deterministic
func decodeEnvelope(raw string) envelope {
	var env toolcall.Envelope
	if err := json.Unmarshal([]byte(raw), &env); err != nil || env.Status == "" {
		return envelope{status: "error", code: toolcall.CodeInternal, message: "the call returned no result envelope"}
	}
	if env.IsError() {
		msg := env.Message
		if env.DomainCode == toolcall.CodeInvalidArgument && len(env.Violations) > 0 {
			msg = env.Violations[0].String()
		}
		return envelope{status: env.Status, code: env.DomainCode, message: msg}
	}
	out := envelope{status: env.Status}
	if len(env.Data) > 0 {
		var v structpb.Value
		if err := protojson.Unmarshal(env.Data, &v); err != nil {
			return envelope{status: "error", code: toolcall.CodeInternal, message: "the call's data is not JSON"}
		}
		out.data = &v
	}
	return out
}
