package mcpdoor_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/requeststate"
	"github.com/toolmesh/toolmesh/internal/testsupport/replicatest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// Two edge replicas behind a load balancer without affinity, laid out as in
// Kubernetes: one port, one IP address per replica (127.0.0.1, 127.0.0.2,
// ...), and a name that resolves to the replicas (a headless Service; here
// a resolver the test controls). A 2025-era session begun on one replica
// keeps working whichever replica each of its requests lands on.

// sessionVersions are the protocol versions of the session era.
func sessionVersions() []string {
	return slices.DeleteFunc(slices.Clone(edge.ProtocolVersions), func(v string) bool { return v >= edge.ModernProtocol })
}

// peersName is the name the replicas know each other by.
const peersName = "edge-peers.test"

// peerDNS resolves peersName to the addresses the test lists.
type peerDNS struct {
	mu    sync.Mutex
	addrs []netip.Addr
}

func (d *peerDNS) set(addrs ...netip.Addr) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addrs = addrs
}

func (d *peerDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if host != peersName {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return slices.Clone(d.addrs), nil
}

// replica is one edge on a real listener.
type replica struct {
	name string
	ip   netip.Addr
	base *url.URL // http://ip:port
	url  string   // its /mcp
	srv  *http.Server
	logs *logtest.Buffer
	// bySession counts the requests it got, from the load balancer or a
	// peer, by Mcp-Session-Id.
	mu        sync.Mutex
	bySession map[string]int
}

func (r *replica) lb() replicatest.Replica { return replicatest.Replica{Name: r.name, Base: r.base} }

// got is how many requests of session id the replica got.
func (r *replica) got(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bySession[id]
}

// kill stops the replica at once, as a crash would: its listener and every
// connection close.
func (r *replica) kill() { _ = r.srv.Close() }

// refusals are the reasons the replica logged for session ids it refused.
func (r *replica) refusals() []string {
	var out []string
	for _, e := range r.logs.Events("edge.session_refused") {
		out = append(out, fmt.Sprint(e["reason"]))
	}
	return out
}

// replicaSet starts one edge per name on 127.0.0.<i+1> at one shared port,
// each with elicitation in front of the mesh (when it has Temporal), listing each other through
// dns (which resolves to all of them unless the test changes it).
type replicaSet struct {
	port int
	dns  *peerDNS
	all  []*replica
}

func startReplicas(t *testing.T, m *edgetest.MrtrMesh, configure func(*edge.Config), names ...string) *replicaSet {
	t.Helper()
	listeners, port := listenersOnOnePort(t, len(names))
	s := &replicaSet{port: port, dns: &peerDNS{}}
	var ips []netip.Addr
	for i, name := range names {
		r := &replica{name: name, ip: netip.MustParseAddr(fmt.Sprintf("127.0.0.%d", i+1)), logs: &logtest.Buffer{}, bySession: map[string]int{}}
		r.base = &url.URL{Scheme: "http", Host: listeners[i].Addr().String()}
		r.url = r.base.String() + "/mcp"
		cfg := edge.Config{
			Contracts:   edgetest.TestingContracts(),
			Services:    map[string]string{testingv1connect.TestingServiceName: m.Svc.URL},
			HTTPClient:  m.Svc.Client(),
			Mesh:        servertest.MeshSigner(),
			CallTimeout: 5 * time.Second,
			MCP: edge.MCP{
				ProgressInterval: 40 * time.Millisecond,
				Sessions: &edge.Sessions{
					Self:     listeners[i].Addr().String(),
					Peers:    []string{net.JoinHostPort(peersName, strconv.Itoa(port))},
					Keys:     []requeststate.Key{m.Key},
					Resolver: s.dns,
				},
			},
		}
		if m.Tc != nil {
			cfg.Elicitation = &edge.Elicitation{Temporal: m.Tc, States: m.Sealer, TaskQueue: m.Queue}
		}
		if configure != nil {
			configure(&cfg)
		}
		e, err := edge.New(cfg, logging.New(r.logs, logging.ParseLevel("debug")))
		if err != nil {
			t.Fatal(err)
		}
		h := e.Handler()
		// HTTP/1 and h2c, as `toolmesh edge` serves.
		protocols := new(http.Protocols)
		protocols.SetHTTP1(true)
		protocols.SetUnencryptedHTTP2(true)
		r.srv = &http.Server{Protocols: protocols, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.mu.Lock()
			r.bySession[req.Header.Get("Mcp-Session-Id")]++
			r.mu.Unlock()
			h.ServeHTTP(w, req)
		})}
		go func() { _ = r.srv.Serve(listeners[i]) }()
		t.Cleanup(r.kill)
		s.all = append(s.all, r)
		ips = append(ips, r.ip)
	}
	s.dns.set(ips...)
	return s
}

// listenersOnOnePort listens on 127.0.0.1, 127.0.0.2, ... at one port.
func listenersOnOnePort(t *testing.T, n int) ([]net.Listener, int) {
	t.Helper()
	for range 20 {
		first, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		out := []net.Listener{first}
		for i := 2; i <= n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i, port))
			if err != nil {
				break
			}
			out = append(out, l)
		}
		if len(out) == n {
			return out, port
		}
		for _, l := range out {
			l.Close()
		}
	}
	t.Fatal("no port free on every loopback address")
	return nil, 0
}

// progressLog collects the progress a client hears, by token.
type progressLog struct {
	mu   sync.Mutex
	seen map[any][]float64
}

func (p *progressLog) handler(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[any][]float64{}
	}
	p.seen[r.Params.ProgressToken] = append(p.seen[r.Params.ProgressToken], r.Params.Progress)
}

func (p *progressLog) of(token string) []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen[token])
}

// connectAt opens a go-sdk client session at version through url.
func connectAt(t *testing.T, url, version string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "replica-test", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
}

// A session begun on replica a is used through the load balancer: every
// kind of request lands on b as well as on a, and works — tools/list,
// tools/call with progress, calls whose elicitations (from 2025-06-18 on)
// are asked on one replica and answered on the other, and the DELETE that
// ends it.
func TestSessionsWorkAcrossReplicas(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	for _, v := range sessionVersions() {
		t.Run(v, func(t *testing.T) {
			reps := startReplicas(t, m, nil, "a", "b")
			a, b := reps.all[0], reps.all[1]
			rr := replicatest.New(t, a.lb(), b.lb())
			user := edgetest.NewAnswerer(edgetest.PurgeSheet)
			var progress progressLog
			cs, err := connectAt(t, rr.URL+"/mcp", v, &mcp.ClientOptions{ElicitationHandler: user.Handler, ProgressNotificationHandler: progress.handler})
			if err != nil {
				t.Fatal(err)
			}
			if first := rr.Hops()[0]; first.RPC != "initialize" || first.Replica != "a" {
				t.Fatalf("first request %+v, want initialize on a", first)
			}
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Fatalf("negotiated %s, want %s", got, v)
			}

			for range 2 {
				if names := toolNames(t, cs); !slices.Contains(names, "testing_purge") {
					t.Errorf("tools/list = %v", names)
				}
			}
			for i := range 2 {
				token := fmt.Sprintf("wait-%d", i)
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_wait", Arguments: map[string]any{"millis": 300}, Meta: mcp.Meta{"progressToken": token}})
				if err != nil || res.IsError {
					t.Fatalf("testing_wait = %v, %v", res, err)
				}
				if got := progress.of(token); len(got) < 2 || !slices.IsSorted(got) {
					t.Errorf("progress of call %d = %v, want a start and heartbeats, increasing", i, got)
				}
			}
			// 2025-03-26 has no elicitation: its client gives everything.
			elicits := v >= "2025-06-18"
			args, questions := map[string]any{}, 4
			if !elicits {
				args, questions = edgetest.PurgeSheet, 0
			}
			for range 2 {
				m.Backend.SeedNotes("victim", 2)
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_purge", Arguments: args})
				if err != nil {
					t.Fatal(err)
				}
				if env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res)); env.Status != "ok" || string(env.Data) != `{"removed":2}` {
					t.Errorf("testing_purge = %s, want 2 notes removed", edgetest.Structured(t, res))
				}
			}
			if n := len(user.Questions()); n != questions {
				t.Errorf("asked %d questions, want %d: %+v", n, questions, user.Questions())
			}

			sid := cs.ID()
			rr.TurnTo(t, cs, "b")
			if err := cs.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			for _, r := range reps.all {
				h := http.Header{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {v}}
				if res, body := edgetest.Post(t, r.url, h, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`); res.StatusCode != http.StatusNotFound {
					t.Errorf("after DELETE, tools/list on %s = %d %s, want 404", r.name, res.StatusCode, body)
				}
			}

			hops := rr.Hops()
			wants := []replicatest.Hop{
				{Replica: "b", Method: "POST", RPC: "tools/list", Status: 200},
				{Replica: "b", Method: "POST", RPC: "tools/call", Tool: "testing_wait", Status: 200},
				{Replica: "b", Method: "POST", RPC: "tools/call", Tool: "testing_purge", Status: 200},
				{Replica: "b", Method: "DELETE", Status: 204},
			}
			if elicits {
				wants = append(wants, replicatest.Hop{Replica: "b", Method: "POST", RPC: "response", Status: 202})
				// Each purge call asked its questions on one replica and
				// heard an answer through the other.
				for _, asked := range []string{"a", "b"} {
					if !replicatest.AnsweredElsewhere(hops, "testing_purge", asked) {
						t.Errorf("no purge call on %s answered through the other replica: %+v", asked, hops)
					}
				}
			}
			for _, want := range wants {
				if !slices.Contains(hops, want) {
					t.Errorf("no %+v among the requests: %+v", want, hops)
				}
			}
			for _, r := range reps.all {
				if got := r.refusals(); len(got) > 0 {
					t.Errorf("%s refused session ids: %v", r.name, got)
				}
			}
		})
	}
}

// A subscription made through one replica is held by the session's owner,
// which tells the client of changes on the session's GET stream — here
// open through the other replica.
func TestSubscriptionsWorkAcrossReplicas(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	notes := servertest.Start(t, m.Backend.NotesServer())
	reps := startReplicas(t, m, func(c *edge.Config) {
		c.Contracts = append(c.Contracts, testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingNotesService"))
		c.Services[testingv1connect.TestingNotesServiceName] = notes.URL
		c.MCP.ResourcePollInterval = 20 * time.Millisecond
	}, "a", "b")
	a, b := reps.all[0], reps.all[1]
	m.Backend.SeedNotes("local", 2)
	for _, v := range sessionVersions() {
		t.Run(v, func(t *testing.T) {
			rr := replicatest.New(t, a.lb(), b.lb())
			updated := make(chan string, 10)
			cs, err := connectAt(t, rr.URL+"/mcp", v, &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
				updated <- r.Params.URI
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			rr.TurnTo(t, cs, "b")
			if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: noteStatsURI}); err != nil {
				t.Fatal(err)
			}
			polled := m.Backend.Calls("NoteStats")
			edgetest.WaitFor(t, func() bool { return m.Backend.Calls("NoteStats") > polled+2 }, "the owner to poll the subscribed resource")
			// The owner answers the stream once it is ready to deliver on it.
			edgetest.WaitFor(t, func() bool {
				return slices.ContainsFunc(rr.Hops(), func(h replicatest.Hop) bool { return h.Method == http.MethodGet && h.Status == http.StatusOK })
			}, "the client's stream")
			m.Backend.SeedNotes("local", 1)
			select {
			case uri := <-updated:
				if uri != noteStatsURI {
					t.Errorf("heard of %s, want %s", uri, noteStatsURI)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no notifications/resources/updated")
			}
			hops := rr.Hops()
			for _, want := range []replicatest.Hop{
				{Replica: "a", Method: "POST", RPC: "initialize", Status: 200},
				{Replica: "b", Method: "POST", RPC: "resources/subscribe", Status: 200},
				{Replica: "b", Method: "GET", Status: 200},
			} {
				if !slices.Contains(hops, want) {
					t.Errorf("no %+v among the requests: %+v", want, hops)
				}
			}
			if slices.ContainsFunc(hops, func(h replicatest.Hop) bool { return h.Method == http.MethodGet && h.Replica == "a" }) {
				t.Errorf("the stream went to the owner itself: %+v", hops)
			}
		})
	}
}

// When the replica holding a session is gone, the others answer 404 for
// it (to the client's next POST, or to its GET stream reconnecting, which
// ever comes first), the session no longer works, and a new session does.
func TestLosingTheOwnerMeansANewSession(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	for _, v := range sessionVersions() {
		t.Run(v, func(t *testing.T) {
			reps := startReplicas(t, m, nil, "a", "b")
			a, b := reps.all[0], reps.all[1]
			rr := replicatest.New(t, a.lb(), b.lb())
			cs, err := connectAt(t, rr.URL+"/mcp", v, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if _, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "before"}); env.Status != "ok" {
				t.Fatalf("echo = %+v", env)
			}
			// a goes; the load balancer stops sending to it, but the peers'
			// name still lists it (DNS lags).
			rr.Remove(a.name)
			a.kill()
			before := len(rr.Hops())
			if _, err := cs.ListTools(context.Background(), nil); err == nil {
				t.Fatal("tools/list worked after the owner died")
			}
			if !slices.ContainsFunc(rr.Hops()[before:], func(h replicatest.Hop) bool { return h.Status == http.StatusNotFound }) {
				t.Errorf("no 404 after the owner died: %+v", rr.Hops()[before:])
			}
			if got := b.refusals(); !slices.Contains(got, "owner_unreachable") {
				t.Errorf("b refused with %v, want owner_unreachable", got)
			}
			again, err := connectAt(t, rr.URL+"/mcp", v, nil)
			if err != nil {
				t.Fatalf("a new session after the owner died: %v", err)
			}
			defer again.Close()
			if _, env := edgetest.CallEnv(t, again, "testing_echo", map[string]any{"message": "after"}); env.Status != "ok" {
				t.Errorf("echo in the new session = %+v", env)
			}
		})
	}
}

// A session id that does not verify, or that names a replica the peers do
// not list, is refused with 404 by the replica it reaches, which forwards
// nothing: no open proxy, no request to an address a client made up.
func TestSessionIDsThatDoNotVerifyAreNotForwarded(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	reps := startReplicas(t, m, nil, "a", "b", "outsider")
	a, b, outsider := reps.all[0], reps.all[1], reps.all[2]
	// outsider holds the mesh's keys but is not an edge peer any more (its
	// address may belong to another pod now).
	reps.dns.set(a.ip, b.ip)
	const v = "2025-11-25"
	// Sessions begun by hand: no client sends anything else with their ids.
	owned := func(r *replica) string {
		res, body := edgetest.Post(t, r.url, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+v+`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		sid := res.Header.Get("Mcp-Session-Id")
		if res.StatusCode != http.StatusOK || sid == "" {
			t.Fatalf("initialize on %s = %d %s", r.name, res.StatusCode, body)
		}
		return sid
	}
	ofA, ofOutsider := owned(a), owned(outsider)
	parts := strings.Split(ofA, ".")
	if len(parts) != 3 {
		t.Fatalf("session id %q is not owner.nonce.mac", ofA)
	}
	outsiderAddr := base64.RawURLEncoding.EncodeToString([]byte(netip.AddrPortFrom(outsider.ip, uint16(reps.port)).String()))
	flip := func(s string) string { // another valid encoding
		if s[0] == 'A' {
			return "B" + s[1:]
		}
		return "A" + s[1:]
	}
	cases := []struct {
		name, id, reason string
	}{
		{"not an id of this mesh", "c29tZS1zZXNzaW9u", "malformed"},
		{"altered MAC", parts[0] + "." + parts[1] + "." + flip(parts[2]), "forged"},
		{"other owner, same MAC", outsiderAddr + "." + parts[1] + "." + parts[2], "forged"},
		{"valid, owner not a peer", ofOutsider, "owner_gone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			refused := len(b.refusals())
			h := http.Header{"Mcp-Session-Id": {c.id}, "Mcp-Protocol-Version": {v}}
			res, body := edgetest.Post(t, b.url, h, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
			var rpc struct {
				ID    int `json:"id"`
				Error *struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if res.StatusCode != http.StatusNotFound || json.Unmarshal(body, &rpc) != nil || rpc.ID != 7 || rpc.Error == nil {
				t.Errorf("tools/list = %d %s, want 404 with a JSON-RPC error", res.StatusCode, body)
			}
			for _, r := range []*replica{a, outsider} {
				if n := r.got(c.id); n != 0 {
					t.Errorf("%s got %d requests of the session, want none", r.name, n)
				}
			}
			if got := b.refusals()[refused:]; !slices.Equal(got, []string{c.reason}) {
				t.Errorf("b logged refusals %v, want [%s]", got, c.reason)
			}
		})
	}
}

// Forwarded requests keep their credentials and browser headers: the
// owner still refuses another caller on a session (403), and a browser gets
// one set of CORS headers.
func TestForwardedRequestsKeepTheirCaller(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	iss := identitytest.NewIssuer(t)
	const resource = "https://mcp.example.com/mcp"
	reps := startReplicas(t, m, func(c *edge.Config) {
		c.Auth = &identity.Config{Issuer: iss.URL, JWKS: iss.JWKS(t), Resource: resource}
	}, "a", "b")
	a, b := reps.all[0], reps.all[1]
	alice := iss.Sign(t, jose.RS256, iss.Valid(resource, "alice", "toolmesh:read"))
	mallory := iss.Sign(t, jose.RS256, iss.Valid(resource, "mallory", "toolmesh:read"))
	res, body := edgetest.Post(t, a.url, withBearer(http.Header{}, alice), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	sid := res.Header.Get("Mcp-Session-Id")
	if res.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize on a = %d %s", res.StatusCode, body)
	}
	h := http.Header{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {"2025-11-25"}}
	if res, body := edgetest.Post(t, b.url, withBearer(h, alice), `{"jsonrpc":"2.0","method":"notifications/initialized"}`); res.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized through b = %d %s", res.StatusCode, body)
	}
	fromA := a.got(sid)
	if res, body := edgetest.Post(t, b.url, withBearer(h, mallory), `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); res.StatusCode != http.StatusForbidden || !json.Valid(body) {
		t.Errorf("mallory on alice's session through b = %d %s, want 403 from the owner", res.StatusCode, body)
	}
	if a.got(sid) == fromA {
		t.Error("b refused mallory itself: the owner decides who the session belongs to")
	}
	if res, body := edgetest.Post(t, b.url, h, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token through b = %d %s, want 401", res.StatusCode, body)
	}
	browser := withBearer(h, alice)
	browser.Set("Origin", "http://localhost:5173")
	res, body = edgetest.Post(t, b.url, browser, `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "testing_echo") {
		t.Errorf("alice through b = %d %s", res.StatusCode, body)
	}
	if got := res.Header.Values("Access-Control-Allow-Origin"); !slices.Equal(got, []string{"http://localhost:5173"}) {
		t.Errorf("Access-Control-Allow-Origin = %q, want the page's origin once", got)
	}
}
