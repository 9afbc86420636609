package config

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// settings is a command's configuration as the tests bind it.
type settings struct {
	Addr     string
	Verbose  bool
	Conns    int
	MaxBody  int64
	Ratio    float64
	Timeout  time.Duration
	Origins  []string
	Services map[string]string
	Once     bool
}

func bind(env map[string]string) (*Set, *settings) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := New(fs, func(k string) string { return env[k] })
	c := &settings{}
	s.String(&c.Addr, "127.0.0.1:7100", Opt{Flag: "addr", Env: "T_ADDR", Usage: "listen address"})
	s.Bool(&c.Verbose, false, Opt{Flag: "verbose", Env: "T_VERBOSE", Usage: "say more"})
	s.Int(&c.Conns, 512, Opt{Flag: "conns", Env: "T_CONNS", Usage: "connections"})
	s.Int64(&c.MaxBody, 1<<20, Opt{Flag: "max-body", Env: "T_MAX_BODY", Usage: "body cap"})
	s.Float64(&c.Ratio, 1, Opt{Flag: "ratio", Env: "T_RATIO", Usage: "sample ratio"})
	s.Duration(&c.Timeout, 15*time.Second, Opt{Flag: "timeout", Env: "T_TIMEOUT", Usage: "deadline"})
	s.List(&c.Origins, Opt{Flag: "origin", Env: "T_ORIGINS", Usage: "allowed origin"})
	s.Pairs(&c.Services, Opt{Flag: "service", Env: "T_SERVICES", Usage: "domain=url", Default: "every domain on loopback"})
	s.Bool(&c.Once, false, Opt{Flag: "once", Usage: "a per-invocation flag"})
	return s, c
}

func TestBinder(t *testing.T) {
	defaults := settings{Addr: "127.0.0.1:7100", Conns: 512, MaxBody: 1 << 20, Ratio: 1, Timeout: 15 * time.Second, Services: map[string]string{}}
	with := func(f func(*settings)) settings {
		c := defaults
		c.Services = map[string]string{}
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    settings
		wantErr string // a substring of the error
	}{
		{name: "defaults", want: defaults},
		{
			name: "variables are the defaults",
			env: map[string]string{"T_ADDR": ":8080", "T_VERBOSE": "true", "T_CONNS": "0", "T_MAX_BODY": "2048",
				"T_RATIO": "0.25", "T_TIMEOUT": "1m", "T_ORIGINS": "https://a.example, ,https://b.example", "T_SERVICES": "tasks=http://t:1, agents=http://a:2"},
			want: settings{Addr: ":8080", Verbose: true, Conns: 0, MaxBody: 2048, Ratio: 0.25, Timeout: time.Minute,
				Origins: []string{"https://a.example", "https://b.example"}, Services: map[string]string{"tasks": "http://t:1", "agents": "http://a:2"}},
		},
		{
			name: "flags win over variables",
			env:  map[string]string{"T_ADDR": ":8080", "T_VERBOSE": "true", "T_TIMEOUT": "1m", "T_CONNS": "3"},
			args: []string{"--addr", ":9090", "--verbose=false", "--timeout", "2s", "--once"},
			want: with(func(c *settings) { c.Addr, c.Timeout, c.Conns, c.Once = ":9090", 2*time.Second, 3, true }),
		},
		{
			name: "repeated flags add to the variable's list; a pair replaces its key",
			env:  map[string]string{"T_ORIGINS": "https://a.example", "T_SERVICES": "tasks=http://t:1,agents=http://a:2"},
			args: []string{"--origin", "https://c.example", "--origin", "https://d.example", "--service", "tasks=http://t:9"},
			want: with(func(c *settings) {
				c.Origins = []string{"https://a.example", "https://c.example", "https://d.example"}
				c.Services = map[string]string{"tasks": "http://t:9", "agents": "http://a:2"}
			}),
		},
		{name: "a bad duration names its variable", env: map[string]string{"T_TIMEOUT": "soon"}, wantErr: `T_TIMEOUT="soon": time: invalid duration`},
		{name: "a bad integer names its variable", env: map[string]string{"T_CONNS": "many"}, wantErr: `T_CONNS="many": invalid syntax`},
		{name: "a bad boolean names its variable", env: map[string]string{"T_VERBOSE": "yes"}, wantErr: `T_VERBOSE="yes"`},
		{name: "a bad float names its variable", env: map[string]string{"T_RATIO": "half"}, wantErr: `T_RATIO="half"`},
		{name: "a bad pair names its variable", env: map[string]string{"T_SERVICES": "tasks"}, wantErr: `T_SERVICES="tasks": want key=value`},
		{
			name: "a bad variable does not matter when its flag is given",
			env:  map[string]string{"T_TIMEOUT": "soon"},
			args: []string{"--timeout", "3s"},
			want: with(func(c *settings) { c.Timeout = 3 * time.Second }),
		},
		{name: "an empty list item from a flag", args: []string{"--origin", " "}, wantErr: "empty value"},
		{name: "a bad pair from a flag", args: []string{"--service", "tasks="}, wantErr: "want key=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, got := bind(tc.env)
			err := s.Parse(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRetiredVariable(t *testing.T) {
	s, _ := bind(map[string]string{"T_OLD_TIMEOUT": "5s"})
	s.Retired("T_OLD_TIMEOUT", "T_TIMEOUT or --timeout")
	if err := s.Parse(nil); err == nil || !strings.Contains(err.Error(), "T_OLD_TIMEOUT is no longer read: use T_TIMEOUT or --timeout") {
		t.Errorf("a retired variable: error %v", err)
	}
}

func TestUsageShowsFlagVariableAndDefault(t *testing.T) {
	// The variable set in the environment does not change the default shown.
	s, _ := bind(map[string]string{"T_TIMEOUT": "1m"})
	var out bytes.Buffer
	s.FlagSet().SetOutput(&out)
	if err := s.Parse([]string{"--help"}); err != flag.ErrHelp {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{
		"--addr value\n    \tlisten address\n    \t($T_ADDR; default 127.0.0.1:7100)\n",
		"--verbose\n    \tsay more\n    \t($T_VERBOSE; default false)\n",
		"--timeout value\n    \tdeadline\n    \t($T_TIMEOUT; default 15s)\n",
		"--origin value\n    \tallowed origin\n    \t($T_ORIGINS (comma-separated); repeatable)\n",
		"--service value\n    \tdomain=url\n    \t($T_SERVICES (comma-separated); default every domain on loopback; repeatable)\n",
		"--once\n    \ta per-invocation flag\n    \t(flag only; default false)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSplit(t *testing.T) {
	for in, want := range map[string][]string{
		"":                   nil,
		" , ,":               nil,
		"a":                  {"a"},
		" a , b,,c ":         {"a", "b", "c"},
		"10.0.0.0/8,::1/128": {"10.0.0.0/8", "::1/128"},
	} {
		if got := Split(in); !cmp.Equal(got, want) {
			t.Errorf("Split(%q) = %q, want %q", in, got, want)
		}
	}
}
