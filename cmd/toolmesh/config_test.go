package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/cmd/internal/edgecmd"
	"github.com/toolmesh/toolmesh/internal/server"
)

var updateDocs = flag.Bool("update", false, "rewrite the flag table of docs/configuration.md")

// command is one command's option set, bound as its run function binds it.
type command struct {
	args []string // e.g. serve tasks
	set  *config.Set
}

// commands binds the options of every command, with getenv as the
// environment.
func commands(getenv func(string) string) []command {
	var out []command
	add := func(bind func(s *config.Set), args ...string) {
		fs := flag.NewFlagSet(strings.Join(args, " "), flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s := config.New(fs, getenv)
		bind(s)
		out = append(out, command{args: args, set: s})
	}
	add(func(s *config.Set) { edgecmd.Bind(s, getenv) }, "edge")
	add(func(s *config.Set) { bindConsole(s, getenv) }, "console")
	for _, name := range slices.Sorted(maps.Keys(domains)) {
		add(func(s *config.Set) { bindServe(s, getenv, name, domains[name]) }, "serve", name)
	}
	for _, name := range slices.Sorted(maps.Keys(workerQueues)) {
		add(func(s *config.Set) { bindWorker(s, getenv, name, workerQueues[name]) }, "worker", name)
	}
	add(func(s *config.Set) { bindTemporalDev(s) }, "temporal-dev")
	add(func(s *config.Set) { bindUp(s, getenv) }, "up")
	add(func(s *config.Set) { bindUpStatus(s) }, "up", "status")
	add(func(s *config.Set) { bindProcesses(s, getenv) }, "processes")
	add(func(s *config.Set) { bindHealthcheck(s) }, "healthcheck")
	add(func(s *config.Set) { bindKeygen(s) }, "keygen")
	add(func(s *config.Set) { bindToken(s) }, "token")
	add(func(s *config.Set) { bindAuditVerify(s) }, "audit", "verify")
	add(func(s *config.Set) { bindCheck(s) }, "check")
	return out
}

// perInvocation are the flags without a variable: what one run of a
// command-line tool is asked to do (docs/configuration.md says which).
var perInvocation = map[string][]string{
	"edge":         {"stdio"},
	"up status":    {"json"},
	"processes":    {"json"},
	"healthcheck":  {"timeout"},
	"keygen":       {"rotate-state-key"},
	"token":        {"agent", "subject", "depth", "ttl", "role", "grant"},
	"audit verify": {"json"},
	"check":        {"acked", "faults", "json"},
}

func TestCommandsCoverTheUsage(t *testing.T) {
	// Every command the usage lists has its options in commands.
	listed := map[string]bool{}
	for _, c := range commands(noEnv) {
		listed[c.args[0]] = true
		if len(c.args) > 1 {
			listed[c.args[0]+" "+c.args[1]] = true
		}
	}
	for _, line := range strings.Split(usage, "\n") {
		f := strings.Fields(line)
		if !strings.HasPrefix(line, "  ") || len(f) == 0 {
			continue
		}
		name := f[0]
		if len(f) > 1 && (f[1] == "status" || f[1] == "verify") {
			name += " " + f[1]
		}
		if !listed[name] {
			t.Errorf("the usage lists %q, which the test's commands do not bind", name)
		}
	}
}

func TestEveryFlagHasAVariable(t *testing.T) {
	for _, c := range commands(noEnv) {
		name := strings.Join(c.args, " ")
		for _, o := range c.set.Options() {
			allowed := slices.Contains(perInvocation[strings.Join(c.args, " ")], o.Flag)
			switch {
			case o.Env == "" && !allowed:
				t.Errorf("%s --%s has no variable and is not a per-invocation flag", name, o.Flag)
			case o.Env != "" && allowed:
				t.Errorf("%s --%s is listed as per-invocation but has the variable %s", name, o.Flag, o.Env)
			case o.Env != "" && !strings.HasPrefix(o.Env, "TOOLMESH_") && !strings.HasPrefix(o.Env, "OTEL_") && o.Env != "WORK_TASK_MAX_PER_DAY":
				t.Errorf("%s --%s: variable %s is neither TOOLMESH_… nor a standard OTEL_… one", name, o.Flag, o.Env)
			}
		}
	}
}

// TestHelpShowsVariableAndDefault runs `toolmesh <command> --help` for
// every command and finds each flag with its variable and default.
func TestHelpShowsVariableAndDefault(t *testing.T) {
	for _, c := range commands(noEnv) {
		var stderr bytes.Buffer
		err := run(t.Context(), append(slices.Clone(c.args), "--help"), noEnv, nil, io.Discard, &stderr)
		if err != flag.ErrHelp {
			t.Errorf("toolmesh %s --help: %v, want flag.ErrHelp", strings.Join(c.args, " "), err)
			continue
		}
		for _, o := range c.set.Options() {
			block := helpBlock(stderr.String(), o.Flag)
			if block == "" {
				t.Errorf("toolmesh %s --help does not list --%s:\n%s", strings.Join(c.args, " "), o.Flag, stderr.String())
				continue
			}
			if o.Env != "" && !strings.Contains(block, "$"+o.Env) {
				t.Errorf("toolmesh %s --help: --%s does not name $%s:\n%s", strings.Join(c.args, " "), o.Flag, o.Env, block)
			}
			if d := o.DefaultText(); d != "" && !strings.Contains(block, "default "+d) {
				t.Errorf("toolmesh %s --help: --%s does not show its default %q:\n%s", strings.Join(c.args, " "), o.Flag, d, block)
			}
		}
	}
}

// helpBlock is the part of a --help output about one flag.
func helpBlock(help, name string) string {
	i := strings.Index(help, "  --"+name+" ")
	if i < 0 {
		i = strings.Index(help, "  --"+name+"\n")
	}
	if i < 0 {
		return ""
	}
	rest := help[i+2:]
	if j := strings.Index(rest, "\n  --"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func noEnv(string) string { return "" }

// domainBuild is the build of the domain name, its options bound to getenv
// as `toolmesh serve <name>` binds them.
func domainBuild(t testing.TB, name string, getenv func(string) string) buildFunc {
	t.Helper()
	s := cli.NewConfig("serve "+name, getenv, io.Discard)
	c := bindServe(s, getenv, name, domains[name])
	if err := s.Parse(nil); err != nil {
		t.Fatal(err)
	}
	return c.build
}

const (
	tableBegin = "<!-- flags: generated by go test ./cmd/toolmesh -run TestConfigurationDoc -update -->"
	tableEnd   = "<!-- flags: end -->"
)

// TestConfigurationDoc checks that the flag table of docs/configuration.md
// is the one the commands bind (go test -run TestConfigurationDoc -update
// rewrites it).
func TestConfigurationDoc(t *testing.T) {
	const path = "../../docs/configuration.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := bytes.Index(doc, []byte(tableBegin)), bytes.Index(doc, []byte(tableEnd))
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the markers %q and %q", path, tableBegin, tableEnd)
	}
	got := string(doc[begin+len(tableBegin) : end])
	want := "\n" + flagTable(commands(noEnv))
	if *updateDocs {
		out := append(slices.Clone(doc[:begin+len(tableBegin)]), want...)
		out = append(out, doc[end:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s is out of date (go test ./cmd/toolmesh -run TestConfigurationDoc -update) (-want +got):\n%s", path, diff)
	}
}

// flagTable renders the options of cmds as a Markdown table: one row per
// flag of a command; the serve domains and the worker queues are folded
// into one row per flag, with <DOMAIN> (<QUEUE>) standing for the name.
func flagTable(cmds []command) string {
	type member struct{ name, env, def, usage string }
	type row struct {
		command, flag string
		members       []member
	}
	var rows []*row
	index := map[string]*row{}
	groupSize := map[string]int{}
	for _, c := range cmds {
		group, name := strings.Join(c.args, " "), ""
		if c.args[0] == "serve" || c.args[0] == "worker" {
			group, name = c.args[0], c.args[1]
			groupSize[group]++
		}
		for _, o := range c.set.Options() {
			r := index[group+" "+o.Flag]
			if r == nil {
				r = &row{command: group, flag: o.Flag}
				index[group+" "+o.Flag] = r
				rows = append(rows, r)
			}
			r.members = append(r.members, member{name: name, env: o.Env, def: o.DefaultText(), usage: o.Usage})
		}
	}
	// fold is what every member of r has, with the member's name replaced
	// by a placeholder, or "per domain" ("per queue").
	fold := func(r *row, get func(member) string) string {
		if len(r.members) == 1 {
			return get(r.members[0])
		}
		kind := map[string]string{"serve": "domain", "worker": "queue"}[r.command]
		var out string
		for i, m := range r.members {
			v := strings.ReplaceAll(get(m), "_"+strings.ToUpper(m.name)+"_", "_<"+strings.ToUpper(kind)+">_")
			v = strings.ReplaceAll(v, "/"+m.name+".", "/<"+kind+">.")
			if i > 0 && v != out {
				return "per " + kind
			}
			out = v
		}
		return out
	}
	var b strings.Builder
	b.WriteString("| command | flag | variable | default | meaning |\n|---|---|---|---|---|\n")
	cell := func(s string) string {
		if s == "" || strings.HasPrefix(s, "per ") {
			return s
		}
		return "`" + s + "`"
	}
	for _, r := range rows {
		cmdText := r.command
		if n := groupSize[r.command]; n > 0 && len(r.members) < n {
			var names []string
			for _, m := range r.members {
				names = append(names, m.name)
			}
			cmdText += " " + strings.Join(names, ", ")
		}
		env := cell(fold(r, func(m member) string { return m.env }))
		if env == "" {
			env = "(flag only)"
		}
		def := cell(fold(r, func(m member) string { return m.def }))
		usage := fold(r, func(m member) string { return m.usage })
		fmt.Fprintf(&b, "| %s | `--%s` | %s | %s | %s |\n", cmdText, r.flag, env, def, strings.ReplaceAll(usage, "|", `\|`))
	}
	return b.String()
}

// TestMalformedVariablesStopTheCommand starts commands with a variable
// that does not parse: each refuses to start and names the variable.
func TestMalformedVariablesStopTheCommand(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		variable string
		value    string
	}{
		{[]string{"serve", "tasks"}, "WORK_TASK_MAX_PER_DAY", "many"},
		{[]string{"serve", "schedules"}, "TOOLMESH_SCHEDULES_MIN_INTERVAL", "often"},
		{[]string{"serve", "memory"}, "TOOLMESH_SERVICE_MAX_BODY", "big"},
		{[]string{"edge"}, "TOOLMESH_EDGE_RATE_LIMIT", "fast"},
		{[]string{"edge"}, "TOOLMESH_EDGE_READ_ONLY", "maybe"},
		{[]string{"worker", "calls"}, "TOOLMESH_CALL_TIMEOUT", "soon"},
		{[]string{"up"}, "TOOLMESH_PORT_OFFSET", "ten"},
		{[]string{"edge"}, "TOOLMESH_TRACE_SAMPLE_RATIO", "half"},
	} {
		env := map[string]string{tc.variable: tc.value, "TOOLMESH_DATA": t.TempDir()}
		err := run(t.Context(), tc.args, func(k string) string { return env[k] }, nil, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.variable) {
			t.Errorf("toolmesh %s with %s=%q: %v, want an error naming the variable", strings.Join(tc.args, " "), tc.variable, tc.value, err)
		}
	}
}

func TestLimitFlagsTakeTheEnvironmentThenFlags(t *testing.T) {
	parse := func(env map[string]string, args ...string) (server.Limits, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		s := config.New(fs, func(k string) string { return env[k] })
		l := cli.BindLimits(s, "TOOLMESH_SERVICE_", 1<<20)
		if err := s.Parse(args); err != nil {
			return server.Limits{}, err
		}
		return l.Limits()
	}
	got, err := parse(nil)
	want := server.Limits{HeaderTimeout: 10 * time.Second, BodyTimeout: 30 * time.Second, MaxBodyBytes: 1 << 20, MaxConnsPerClient: 512}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("defaults = %+v, %v; want %+v", got, err, want)
	}
	env := map[string]string{"TOOLMESH_SERVICE_BODY_TIMEOUT": "3s", "TOOLMESH_SERVICE_MAX_BODY": "2048", "TOOLMESH_SERVICE_MAX_CONNS_PER_CLIENT": "0"}
	got, err = parse(env, "--body-timeout", "4s")
	want = server.Limits{HeaderTimeout: 10 * time.Second, BodyTimeout: 4 * time.Second, MaxBodyBytes: 2048, MaxConnsPerClient: -1}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("environment and a flag = %+v, %v; want %+v (the flag wins, 0 connections is no cap)", got, err, want)
	}
	if _, err := parse(map[string]string{"TOOLMESH_SERVICE_HEADER_TIMEOUT": "soon"}); err == nil || !strings.Contains(err.Error(), "TOOLMESH_SERVICE_HEADER_TIMEOUT") {
		t.Errorf("a malformed variable = %v, want an error naming it", err)
	}
	if _, err := parse(nil, "--max-body", "0"); err == nil {
		t.Error("--max-body 0 was accepted")
	}
}
