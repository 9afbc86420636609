package topology

import (
	"strings"
	"testing"
)

// Every domain is reachable by the edge: each has a contract (or serves a
// shared one), so ServiceURLs maps it, and no two domains share a port.
func TestEveryDomainHasAContractAndAPortOfItsOwn(t *testing.T) {
	urls, err := ServiceURLs(OrLoopback(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name := range Domains {
		found := false
		for service, url := range urls {
			if strings.HasPrefix(service, "toolmesh."+name+".v1.") && url == OrLoopback(nil)[name] {
				found = true
			}
		}
		if !found && len(Domains[name].Serves) == 0 {
			t.Errorf("domain %s has no service in ServiceURLs", name)
		}
	}
	ports := map[int]string{}
	for name, d := range Domains {
		if other, ok := ports[d.Port]; ok {
			t.Errorf("domains %s and %s share port %d", name, other, d.Port)
		}
		ports[d.Port] = name
	}
	if got := OrLoopback(map[string]string{"tasks": "http://tasks"}); len(got) != 1 {
		t.Errorf("OrLoopback with a service given = %v, want it alone", got)
	}
}
