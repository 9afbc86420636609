// Package config binds a command's settings to its flags and to TOOLMESH_…
// environment variables, in one place: each option names its flag, its
// variable, its default (written once) and its usage.
//
// A variable that is set is the option's default; a flag given on the
// command line wins over it. A repeatable option (a list, or domain=url
// pairs) takes a comma-separated list from its variable, and each flag adds
// an item (a pair replaces that key's value). A variable whose value does
// not parse is an error that names it. An option without a variable is
// flag-only: what one invocation is asked to do, not how a process is
// configured.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Opt describes one option.
type Opt struct {
	// Flag is the flag's name, without dashes.
	Flag string
	// Env is the environment variable that gives the default; empty for a
	// flag-only option.
	Env string
	// Usage says what the option does.
	Usage string
	// Default, when set, is shown instead of the option's zero default:
	// for a default derived at run time, such as "<data>/mesh.key".
	Default string
}

// Option is one bound option, as --help and the documentation list it.
type Option struct {
	Opt
	// Repeatable marks a list or pairs option.
	Repeatable bool
	value      flag.Value
	// defText is the default written in the code, before the variable.
	defText string
}

// DefaultText is the default as --help shows it ("" for none).
func (o Option) DefaultText() string {
	if o.Default != "" {
		return o.Default
	}
	return o.defText
}

// Set is the options of one command, bound to its flag set and environment.
type Set struct {
	fs      *flag.FlagSet
	getenv  func(string) string
	opts    []*Option
	envErrs map[string]error
	envSet  map[string]bool
	retired map[string]string
}

// New returns a Set that defines its options on fs and reads variables with
// getenv. It replaces fs.Usage with one that lists every option's flag,
// variable and default.
func New(fs *flag.FlagSet, getenv func(string) string) *Set {
	s := &Set{fs: fs, getenv: getenv, envErrs: map[string]error{}, envSet: map[string]bool{}, retired: map[string]string{}}
	fs.Usage = func() { s.PrintUsage(fs.Output()) }
	return s
}

// FlagSet is the flag set the options are defined on.
func (s *Set) FlagSet() *flag.FlagSet { return s.fs }

// Options lists the options in the order they were defined.
func (s *Set) Options() []Option {
	out := make([]Option, len(s.opts))
	for i, o := range s.opts {
		out[i] = *o
	}
	return out
}

// String binds a string option.
func (s *Set) String(p *string, def string, o Opt) {
	*p = def
	s.bind(o, &value[string]{p: p, parse: func(v string) (string, error) { return v, nil }, format: func(v string) string { return v }})
}

// Bool binds a boolean option ("true", "false", "1", "0", ...).
func (s *Set) Bool(p *bool, def bool, o Opt) {
	*p = def
	s.bind(o, &boolValue{value[bool]{p: p, parse: strconv.ParseBool, format: strconv.FormatBool}})
}

// Int binds an integer option.
func (s *Set) Int(p *int, def int, o Opt) {
	*p = def
	s.bind(o, &value[int]{p: p, parse: strconv.Atoi, format: strconv.Itoa})
}

// Int64 binds a 64-bit integer option.
func (s *Set) Int64(p *int64, def int64, o Opt) {
	*p = def
	s.bind(o, &value[int64]{p: p, parse: func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) },
		format: func(v int64) string { return strconv.FormatInt(v, 10) }})
}

// Float64 binds a floating-point option.
func (s *Set) Float64(p *float64, def float64, o Opt) {
	*p = def
	s.bind(o, &value[float64]{p: p, parse: func(v string) (float64, error) { return strconv.ParseFloat(v, 64) },
		format: func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }})
}

// Duration binds a Go duration option (e.g. 15s, 5m).
func (s *Set) Duration(p *time.Duration, def time.Duration, o Opt) {
	*p = def
	s.bind(o, &value[time.Duration]{p: p, parse: time.ParseDuration, format: time.Duration.String})
}

// List binds a repeatable option: its variable holds a comma-separated
// list (see Split) and each flag adds an item.
func (s *Set) List(p *[]string, o Opt) {
	*p = nil
	s.bind(o, &listValue{p: p})
}

// Pairs binds a repeatable key=value option: its variable holds a
// comma-separated list of pairs and each flag adds a pair or replaces the
// value of its key.
func (s *Set) Pairs(p *map[string]string, o Opt) {
	*p = map[string]string{}
	s.bind(o, &pairsValue{p: p})
}

// Retired makes Parse refuse the variable old, which was replaced by the
// option now, instead of ignoring it silently.
func (s *Set) Retired(old, now string) { s.retired[old] = now }

func (s *Set) bind(o Opt, v flag.Value) {
	r, isRepeatable := v.(repeatable)
	s.opts = append(s.opts, &Option{Opt: o, Repeatable: isRepeatable, value: v, defText: v.String()})
	if o.Env != "" {
		if env := s.getenv(o.Env); env != "" {
			if err := v.Set(env); err != nil {
				s.envErrs[o.Flag] = fmt.Errorf("%s=%q: %w", o.Env, env, err)
			}
			s.envSet[o.Flag] = true
		}
	}
	// From here on, each flag adds one item.
	if isRepeatable {
		r.flagsNext()
	}
	s.fs.Var(v, o.Flag, o.Usage)
}

// Parse parses args. A variable that does not parse is an error naming it,
// unless the option's flag was given.
func (s *Set) Parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	for _, o := range s.opts {
		if err := s.envErrs[o.Flag]; err != nil && !given[o.Flag] {
			errs = append(errs, err)
		}
	}
	for _, old := range slices.Sorted(maps.Keys(s.retired)) {
		if s.getenv(old) != "" {
			errs = append(errs, fmt.Errorf("%s is no longer read: use %s", old, s.retired[old]))
		}
	}
	return errors.Join(errs...)
}

// Explicit reports whether the option name was given, on the command line
// or by its variable, rather than left at its default.
func (s *Set) Explicit(name string) bool {
	given := s.envSet[name]
	s.fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// PrintUsage writes every option: its flag, usage, variable and default.
func (s *Set) PrintUsage(w io.Writer) {
	fmt.Fprintf(w, "usage of toolmesh %s:\n", s.fs.Name())
	for _, o := range s.opts {
		kind := ""
		if _, isBool := o.value.(*boolValue); !isBool {
			kind = " value"
		}
		fmt.Fprintf(w, "  --%s%s\n    \t%s\n    \t%s\n", o.Flag, kind, o.Usage, describe(*o))
	}
}

// describe is the line --help prints under an option's usage.
func describe(o Option) string {
	var parts []string
	if o.Env != "" {
		v := "$" + o.Env
		if o.Repeatable {
			v += " (comma-separated)"
		}
		parts = append(parts, v)
	} else {
		parts = append(parts, "flag only")
	}
	if d := o.DefaultText(); d != "" {
		parts = append(parts, "default "+d)
	}
	if o.Repeatable {
		parts = append(parts, "repeatable")
	}
	return "(" + strings.Join(parts, "; ") + ")"
}

// Split splits a comma-separated list, trimming spaces and dropping blank
// items: the one way the mesh reads a list from a variable.
func Split(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

type value[T any] struct {
	p      *T
	parse  func(string) (T, error)
	format func(T) string
}

func (v *value[T]) Set(s string) error {
	x, err := v.parse(strings.TrimSpace(s))
	var numErr *strconv.NumError
	if errors.As(err, &numErr) {
		return numErr.Err // the caller names the input
	}
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v *value[T]) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return v.format(*v.p)
}

type boolValue struct{ value[bool] }

func (*boolValue) IsBoolFlag() bool { return true }

// repeatable is a list or pairs value: it reads its variable as a
// comma-separated list, then takes one item per flag.
type repeatable interface{ flagsNext() }

type listValue struct {
	p     *[]string
	flags bool
}

func (l *listValue) flagsNext() { l.flags = true }

func (l *listValue) Set(s string) error {
	if !l.flags {
		*l.p = append(*l.p, Split(s)...)
		return nil
	}
	if s = strings.TrimSpace(s); s == "" {
		return errors.New("empty value")
	}
	*l.p = append(*l.p, s)
	return nil
}

func (l *listValue) String() string {
	if l == nil || l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

type pairsValue struct {
	p     *map[string]string
	flags bool
}

func (m *pairsValue) flagsNext() { m.flags = true }

func (m *pairsValue) Set(s string) error {
	items := []string{s}
	if !m.flags {
		items = Split(s)
	}
	for _, item := range items {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || k == "" || v == "" {
			return fmt.Errorf("want key=value, got %q", item)
		}
		(*m.p)[k] = v
	}
	return nil
}

func (m *pairsValue) String() string {
	if m == nil || m.p == nil {
		return ""
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(*m.p)) {
		out = append(out, k+"="+(*m.p)[k])
	}
	return strings.Join(out, ",")
}
