package edgecmd

import (
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/topology"
)

func TestSessionSelf(t *testing.T) {
	for _, c := range []struct {
		advertise, addr, want string
	}{
		{"", "127.0.0.1:7100", "127.0.0.1:7100"},
		{"10.1.2.3", ":8080", "10.1.2.3:8080"},
		{"10.1.2.3:9000", ":8080", "10.1.2.3:9000"},
		{"fd00::7", ":8080", "[fd00::7]:8080"},
		{"[fd00::7]", ":8080", "[fd00::7]:8080"},
		{"[fd00::7]:9000", ":8080", "[fd00::7]:9000"},
		{"", ":8080", ""},
		{"", "0.0.0.0:8080", ""},
		{"", "localhost:7100", ""},
		{"edge-0.edge", ":8080", ""},
		{"0.0.0.0", ":8080", ""},
	} {
		got, err := sessionSelf(c.advertise, c.addr)
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("sessionSelf(%q, %q) = %q, %v; want %q", c.advertise, c.addr, got, err, c.want)
		}
	}
}

func TestServicesFromEnvironment(t *testing.T) {
	parse := func(env map[string]string, args ...string) (map[string]string, error) {
		s := cli.NewConfig("edge", func(k string) string { return env[k] }, io.Discard)
		c := Bind(s, func(k string) string { return env[k] })
		err := s.Parse(args)
		return c.services, err
	}
	env := map[string]string{cli.ServicesEnv: "tasks=http://tasks:8080, agents=http://agents:8080"}
	// A flag replaces one domain's URL and keeps the others.
	got, err := parse(env, "--service", "tasks=http://127.0.0.1:7101")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tasks": "http://127.0.0.1:7101", "agents": "http://agents:8080"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("services (-want +got):\n%s", diff)
	}
	// Neither: every domain on loopback.
	if got, err := parse(nil); err != nil || len(topology.OrLoopback(got)) != len(topology.Domains) {
		t.Errorf("no services given: %v, %v; want every domain", topology.OrLoopback(got), err)
	}
	if _, err := parse(map[string]string{cli.ServicesEnv: "tasks"}); err == nil || !strings.Contains(err.Error(), cli.ServicesEnv) {
		t.Errorf("malformed %s: err %v", cli.ServicesEnv, err)
	}
}
