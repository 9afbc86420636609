package tilt_test

// A stand-in for Tilt's Tiltfile runtime, enough to execute our Tiltfile the
// way Tilt does: go.starlark.net with Tilt's dialect options, load() and
// every relative path resolved against the file that is executing, and the
// builtins the Tiltfile uses with Tilt's signatures (a misspelled or unknown
// keyword argument is an error, as in Tilt). local() really runs its
// command. What the builtins declare is recorded for the tests to check.
//
// Signatures follow Tilt's API reference (internal/tiltfile/api/__init__.py
// in tilt-dev/tilt).

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	starlarkjson "go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"go.starlark.net/syntax"
)

// tiltDialect is what Tilt's starkit enables for every file.
var tiltDialect = &syntax.FileOptions{Set: true, GlobalReassign: true, Recursion: true, TopLevelControl: true, While: true}

// resource is one local_resource as Tilt would hold it.
type resource struct {
	Name         string
	Cmd          []string // ["sh", "-c", s] for a string, the list as given otherwise
	ServeCmd     []string
	Dir          string // working directory of cmd and serve_cmd
	Deps         []string
	Ignore       []string
	ResourceDeps []string
	Labels       []string
	Links        []tiltLink
	Env          map[string]string
	ServeEnv     map[string]string
	Probe        *tiltProbe
	AutoInit     bool
	TriggerMode  string
}

type tiltLink struct{ URL, Name string }

type tiltProbe struct {
	InitialDelaySecs, TimeoutSecs, PeriodSecs, SuccessThreshold, FailureThreshold int
	HTTPGet                                                                       *httpGetAction
}

type httpGetAction struct {
	Host, Scheme, Path string
	Port               int
}

// tiltRun is the outcome of executing a Tiltfile.
type tiltRun struct {
	Resources []*resource
	byName    map[string]*resource
	Watched   []string // watch_file paths (absolute)
	Local     [][]string
	Version   string // version_settings constraint
	Defined   []string
}

func (r *tiltRun) resource(name string) *resource { return r.byName[name] }

// tiltfileHost is the state of one execution.
type tiltfileHost struct {
	args    map[string]string // `tilt up -- --name=value`
	run     *tiltRun
	loaded  map[string]starlark.StringDict
	loading map[string]bool
	parsed  bool
	errs    []error
}

// execTiltfile executes path as `tilt up -- args` would.
func execTiltfile(path string, args map[string]string) (*tiltRun, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	h := &tiltfileHost{args: args, run: &tiltRun{byName: map[string]*resource{}},
		loaded: map[string]starlark.StringDict{}, loading: map[string]bool{}}
	if _, err := h.exec(nil, abs); err != nil {
		return nil, err
	}
	if err := errors.Join(h.errs...); err != nil {
		return nil, err
	}
	return h.run, nil
}

const execPathKey = "tiltfile.exec_path"

// exec runs one file; relative paths inside resolve against its directory
// (Tilt's starkit.AbsPath).
func (h *tiltfileHost) exec(parent *starlark.Thread, path string) (starlark.StringDict, error) {
	if g, ok := h.loaded[path]; ok {
		return g, nil
	}
	if h.loading[path] {
		return nil, fmt.Errorf("circular load: %s", path)
	}
	h.loading[path] = true
	defer delete(h.loading, path)
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	thread := &starlark.Thread{
		Name:  path,
		Print: func(_ *starlark.Thread, msg string) {},
		Load: func(t *starlark.Thread, module string) (starlark.StringDict, error) {
			return h.exec(t, absPath(t, module))
		},
	}
	thread.SetLocal(execPathKey, path)
	g, err := starlark.ExecFileOptions(tiltDialect, thread, path, src, h.builtins())
	if err != nil {
		var evalErr *starlark.EvalError
		if errors.As(err, &evalErr) {
			return nil, errors.New(evalErr.Backtrace())
		}
		return nil, err
	}
	h.loaded[path] = g
	return g, nil
}

// absPath resolves path against the directory of the file whose code is
// running: a function keeps the file that called into it (Tilt sets the
// path per exec'd file, and a loaded helper runs on the caller's thread).
func absPath(t *starlark.Thread, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(filepath.Dir(t.Local(execPathKey).(string)), path)
}

func (h *tiltfileHost) builtins() starlark.StringDict {
	fn := func(name string, f func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error)) *starlark.Builtin {
		return starlark.NewBuiltin(name, f)
	}
	module := func(name string, members starlark.StringDict) *starlarkstruct.Module {
		return &starlarkstruct.Module{Name: name, Members: members}
	}
	return starlark.StringDict{
		"local_resource":      fn("local_resource", h.localResource),
		"probe":               fn("probe", h.probe),
		"http_get_action":     fn("http_get_action", h.httpGetAction),
		"link":                fn("link", h.link),
		"local":               fn("local", h.local),
		"decode_json":         fn("decode_json", h.decodeJSON),
		"watch_file":          fn("watch_file", h.watchFile),
		"version_settings":    fn("version_settings", h.versionSettings),
		"TRIGGER_MODE_AUTO":   triggerMode("auto"),
		"TRIGGER_MODE_MANUAL": triggerMode("manual"),
		"config": module("config", starlark.StringDict{
			"define_string":      fn("config.define_string", h.defineSetting),
			"define_string_list": fn("config.define_string_list", h.defineSetting),
			"define_bool":        fn("config.define_bool", h.defineSetting),
			"parse":              fn("config.parse", h.parseConfig),
		}),
		"os": module("os", starlark.StringDict{
			"path": module("os.path", starlark.StringDict{
				"exists": fn("os.path.exists", pathExists),
			}),
		}),
		"shlex": module("shlex", starlark.StringDict{
			"quote": fn("shlex.quote", shlexQuote),
		}),
	}
}

// cmdValue turns a cmd argument (a string run with sh -c, or an argv list)
// into an argv, as Tilt's value.ValueGroupToCmdHelper does.
func cmdValue(v starlark.Value) ([]string, error) {
	switch v := v.(type) {
	case nil, starlark.NoneType:
		return nil, nil
	case starlark.String:
		if v == "" {
			return nil, nil
		}
		return []string{"sh", "-c", string(v)}, nil
	case *starlark.List:
		return stringList(v)
	}
	return nil, fmt.Errorf("a command must be a string or a list of strings, got %s", v.Type())
}

func stringList(v starlark.Value) ([]string, error) {
	switch v := v.(type) {
	case nil, starlark.NoneType:
		return nil, nil
	case starlark.String:
		return []string{string(v)}, nil
	case starlark.Sequence:
		var out []string
		it := v.Iterate()
		defer it.Done()
		var x starlark.Value
		for it.Next(&x) {
			s, ok := starlark.AsString(x)
			if !ok {
				return nil, fmt.Errorf("want a string, got %s", x.Type())
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("want a string or a list of strings, got %s", v.Type())
}

func stringMap(v *starlark.Dict) (map[string]string, error) {
	out := map[string]string{}
	if v == nil {
		return out, nil
	}
	for _, item := range v.Items() {
		k, ok1 := starlark.AsString(item[0])
		val, ok2 := starlark.AsString(item[1])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("env must map strings to strings, got %s: %s", item[0].Type(), item[1].Type())
		}
		out[k] = val
	}
	return out, nil
}

// labelRE is Tilt's rule for labels (a Kubernetes label value).
var labelRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

func (h *tiltfileHost) localResource(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		name                                      string
		cmd, serveCmd, cmdBat, serveCmdBat, links starlark.Value
		deps, ignore, resourceDeps, labels        starlark.Value
		env, serveEnv                             *starlark.Dict
		trigger                                   starlark.Value = triggerMode("auto")
		autoInit                                                 = true
		allowParallel                             bool
		readiness                                 starlark.Value
		dir, serveDir                             string
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs,
		"name", &name,
		"cmd?", &cmd,
		"deps?", &deps,
		"trigger_mode?", &trigger,
		"resource_deps?", &resourceDeps,
		"ignore?", &ignore,
		"auto_init?", &autoInit,
		"serve_cmd?", &serveCmd,
		"cmd_bat?", &cmdBat,
		"serve_cmd_bat?", &serveCmdBat,
		"allow_parallel?", &allowParallel,
		"links?", &links,
		"labels?", &labels,
		"env?", &env,
		"serve_env?", &serveEnv,
		"readiness_probe?", &readiness,
		"dir?", &dir,
		"serve_dir?", &serveDir,
	); err != nil {
		return nil, err
	}
	r := &resource{Name: name, AutoInit: autoInit, Dir: filepath.Dir(t.Local(execPathKey).(string))}
	var err error
	if r.Cmd, err = cmdValue(cmd); err != nil {
		return nil, fmt.Errorf("%s: cmd: %w", name, err)
	}
	if r.ServeCmd, err = cmdValue(serveCmd); err != nil {
		return nil, fmt.Errorf("%s: serve_cmd: %w", name, err)
	}
	if r.Cmd == nil && r.ServeCmd == nil {
		return nil, fmt.Errorf("local_resource %s must have a cmd and/or a serve_cmd, but both were empty", name)
	}
	if dir != "" || serveDir != "" {
		return nil, fmt.Errorf("%s: dir/serve_dir are not used by this Tiltfile's tests", name)
	}
	paths, err := stringList(deps)
	if err != nil {
		return nil, fmt.Errorf("%s: deps: %w", name, err)
	}
	for _, p := range paths {
		r.Deps = append(r.Deps, absPath(t, p))
	}
	if r.Ignore, err = stringList(ignore); err != nil {
		return nil, fmt.Errorf("%s: ignore: %w", name, err)
	}
	if r.ResourceDeps, err = stringList(resourceDeps); err != nil {
		return nil, fmt.Errorf("%s: resource_deps: %w", name, err)
	}
	if r.Labels, err = stringList(labels); err != nil {
		return nil, fmt.Errorf("%s: labels: %w", name, err)
	}
	for _, l := range r.Labels {
		if !labelRE.MatchString(l) {
			return nil, fmt.Errorf("%s: invalid label %q", name, l)
		}
	}
	switch v := links.(type) {
	case nil:
	case starlark.String:
		r.Links = []tiltLink{{URL: string(v)}}
	case *linkValue:
		r.Links = []tiltLink{v.l}
	case *starlark.List:
		for i := range v.Len() {
			switch l := v.Index(i).(type) {
			case starlark.String:
				r.Links = append(r.Links, tiltLink{URL: string(l)})
			case *linkValue:
				r.Links = append(r.Links, l.l)
			default:
				return nil, fmt.Errorf("%s: links: want a string or link(), got %s", name, l.Type())
			}
		}
	default:
		return nil, fmt.Errorf("%s: links: want a string, a link() or a list, got %s", name, v.Type())
	}
	if r.Env, err = stringMap(env); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if r.ServeEnv, err = stringMap(serveEnv); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	switch v := readiness.(type) {
	case nil, starlark.NoneType:
	case *probeValue:
		if r.ServeCmd == nil {
			return nil, fmt.Errorf("%s: a readiness probe without a serve_cmd is ignored by Tilt", name)
		}
		r.Probe = &v.p
	default:
		return nil, fmt.Errorf("%s: readiness_probe: want probe(), got %s", name, v.Type())
	}
	tm, ok := trigger.(triggerMode)
	if !ok {
		return nil, fmt.Errorf("%s: trigger_mode: want TRIGGER_MODE_AUTO or TRIGGER_MODE_MANUAL, got %s", name, trigger.Type())
	}
	r.TriggerMode = string(tm)
	if _, dup := h.run.byName[name]; dup {
		return nil, fmt.Errorf("local_resource named %q already exists", name)
	}
	h.run.byName[name] = r
	h.run.Resources = append(h.run.Resources, r)
	return starlark.None, nil
}

func (h *tiltfileHost) probe(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	p := tiltProbe{TimeoutSecs: 1, PeriodSecs: 10, SuccessThreshold: 1, FailureThreshold: 3}
	var execAction, httpGet, tcpSocket starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs,
		"initial_delay_secs?", &p.InitialDelaySecs,
		"timeout_secs?", &p.TimeoutSecs,
		"period_secs?", &p.PeriodSecs,
		"success_threshold?", &p.SuccessThreshold,
		"failure_threshold?", &p.FailureThreshold,
		"exec?", &execAction,
		"http_get?", &httpGet,
		"tcp_socket?", &tcpSocket,
	); err != nil {
		return nil, err
	}
	if execAction != nil || tcpSocket != nil {
		return nil, errors.New("probe: only http_get is used by this Tiltfile's tests")
	}
	g, ok := httpGet.(*httpGetValue)
	if !ok {
		return nil, errors.New("probe: exactly one of exec, http_get, or tcp_socket must be specified")
	}
	if p.InitialDelaySecs < 0 || p.TimeoutSecs <= 0 || p.PeriodSecs <= 0 || p.SuccessThreshold <= 0 || p.FailureThreshold <= 0 {
		return nil, fmt.Errorf("probe: invalid timing %+v", p)
	}
	p.HTTPGet = &g.a
	return &probeValue{p: p}, nil
}

func (h *tiltfileHost) httpGetAction(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	a := httpGetAction{Host: "localhost", Scheme: "http"}
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "port", &a.Port, "host?", &a.Host, "scheme?", &a.Scheme, "path?", &a.Path); err != nil {
		return nil, err
	}
	if a.Port <= 0 || a.Port > 65535 {
		return nil, fmt.Errorf("http_get_action: invalid port %d", a.Port)
	}
	if a.Scheme != "http" && a.Scheme != "https" {
		return nil, fmt.Errorf("http_get_action: invalid scheme %q", a.Scheme)
	}
	return &httpGetValue{a: a}, nil
}

func (h *tiltfileHost) link(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var l tiltLink
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "url", &l.URL, "name?", &l.Name); err != nil {
		return nil, err
	}
	return &linkValue{l: l}, nil
}

// local runs the command, in the executing file's directory, and returns
// its stdout; a failure fails the Tiltfile.
func (h *tiltfileHost) local(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		command, commandBat, stdin starlark.Value
		quiet, echoOff             bool
		env                        *starlark.Dict
		dir                        string
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "command", &command, "quiet?", &quiet,
		"command_bat?", &commandBat, "echo_off?", &echoOff, "env?", &env, "dir?", &dir, "stdin?", &stdin); err != nil {
		return nil, err
	}
	argv, err := cmdValue(command)
	if err != nil || argv == nil {
		return nil, fmt.Errorf("local: empty or invalid command: %v", err)
	}
	envMap, err := stringMap(env)
	if err != nil {
		return nil, err
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = filepath.Dir(t.Local(execPathKey).(string))
	if dir != "" {
		c.Dir = absPath(t, dir)
	}
	c.Env = os.Environ()
	for k, v := range envMap {
		c.Env = append(c.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	h.run.Local = append(h.run.Local, argv)
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("command %q failed: %v\n%s", argv, err, stderr.String())
	}
	return blob(stdout.String()), nil
}

func (h *tiltfileHost) decodeJSON(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "json", &v); err != nil {
		return nil, err
	}
	var s string
	switch v := v.(type) {
	case blob:
		s = string(v)
	case starlark.String:
		s = string(v)
	default:
		return nil, fmt.Errorf("decode_json: want a string or a blob, got %s", v.Type())
	}
	decode := starlarkjson.Module.Members["decode"].(*starlark.Builtin)
	return starlark.Call(t, decode, starlark.Tuple{starlark.String(s)}, nil)
}

func (h *tiltfileHost) watchFile(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var path string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "file_path", &path); err != nil {
		return nil, err
	}
	h.run.Watched = append(h.run.Watched, absPath(t, path))
	return starlark.None, nil
}

func (h *tiltfileHost) versionSettings(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	checkUpdates := true
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "check_updates?", &checkUpdates, "constraint?", &h.run.Version); err != nil {
		return nil, err
	}
	return starlark.None, nil
}

func (h *tiltfileHost) defineSetting(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var name, usage string
	var positional bool
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name", &name, "args?", &positional, "usage?", &usage); err != nil {
		return nil, err
	}
	if h.parsed {
		return nil, fmt.Errorf("%s(%q) after config.parse()", b.Name(), name)
	}
	h.run.Defined = append(h.run.Defined, name)
	return starlark.None, nil
}

// parseConfig returns the `tilt up -- args` settings; an undefined one is
// an error, as in Tilt.
func (h *tiltfileHost) parseConfig(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	if err := starlark.UnpackArgs(b.Name(), args, kwargs); err != nil {
		return nil, err
	}
	h.parsed = true
	d := starlark.NewDict(len(h.args))
	for k, v := range h.args {
		found := false
		for _, name := range h.run.Defined {
			found = found || name == k
		}
		if !found {
			return nil, fmt.Errorf("config.parse: unknown setting --%s", k)
		}
		if err := d.SetKey(starlark.String(k), starlark.String(v)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func pathExists(t *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var path string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "path", &path); err != nil {
		return nil, err
	}
	_, err := os.Stat(absPath(t, path))
	return starlark.Bool(err == nil), nil
}

// shlexQuote is Tilt's shlex.quote (alessio/shellescape.Quote).
func shlexQuote(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var s string
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "name", &s); err != nil {
		return nil, err
	}
	return starlark.String(shellQuote(s)), nil
}

var unsafeShellRE = regexp.MustCompile(`[^\w@%+=:,./-]`)

func shellQuote(s string) string {
	if s == "" {
		return "''"
	}
	if unsafeShellRE.MatchString(s) {
		return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
	}
	return s
}

// Values the builtins hand back to Starlark.

type triggerMode string

func (m triggerMode) String() string        { return "TRIGGER_MODE_" + strings.ToUpper(string(m)) }
func (triggerMode) Type() string            { return "TriggerMode" }
func (triggerMode) Freeze()                 {}
func (triggerMode) Truth() starlark.Bool    { return true }
func (triggerMode) Hash() (uint32, error)   { return 0, errors.New("unhashable") }
func (b blob) String() string               { return string(b) }
func (blob) Type() string                   { return "blob" }
func (blob) Freeze()                        {}
func (b blob) Truth() starlark.Bool         { return len(b) > 0 }
func (blob) Hash() (uint32, error)          { return 0, errors.New("unhashable") }
func (v *probeValue) String() string        { return fmt.Sprintf("probe(%+v)", v.p) }
func (*probeValue) Type() string            { return "Probe" }
func (*probeValue) Freeze()                 {}
func (*probeValue) Truth() starlark.Bool    { return true }
func (*probeValue) Hash() (uint32, error)   { return 0, errors.New("unhashable") }
func (v *httpGetValue) String() string      { return fmt.Sprintf("http_get_action(%+v)", v.a) }
func (*httpGetValue) Type() string          { return "HTTPGetAction" }
func (*httpGetValue) Freeze()               {}
func (*httpGetValue) Truth() starlark.Bool  { return true }
func (*httpGetValue) Hash() (uint32, error) { return 0, errors.New("unhashable") }
func (v *linkValue) String() string         { return fmt.Sprintf("link(%q, %q)", v.l.URL, v.l.Name) }
func (*linkValue) Type() string             { return "Link" }
func (*linkValue) Freeze()                  {}
func (*linkValue) Truth() starlark.Bool     { return true }
func (*linkValue) Hash() (uint32, error)    { return 0, errors.New("unhashable") }

// blob is what local() returns (Tilt's Blob: a string value without string
// methods).
type blob string

type probeValue struct{ p tiltProbe }
type httpGetValue struct{ a httpGetAction }
type linkValue struct{ l tiltLink }
