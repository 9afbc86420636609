package mcpdoor

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/port"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// The session fast path serves the most common request of a 2025-era
// session — one tools/call of a short tool that asks the person nothing,
// without a progress token — the way the fast path (fastpath.go) serves
// it without a session: decoded once, handed to the same tool handler,
// answered as the SDK answers it. The SDK's session machinery decodes such
// a request six times, each time with a decoder that allocates 32 KiB.
//
// A session keeps state the SDK holds privately; the fast path serves a
// request only when none of it is in play, and sends every other to the
// SDK:
//
//   - the session is this process's, of the Streamable HTTP transport,
//     initialized, and the request carries its token's user (as the SDK
//     binds a session to it);
//   - the SDK closes a session idle for SessionTimeout, and only the
//     requests it serves keep it alive: a session whose last request the
//     SDK served is older than half of that goes to the SDK, which resets
//     its clock;
//   - the client set no log level (a failed call logs over the session);
//   - the tool cannot ask the person anything over the session (an
//     administrative tool's confirmation, a field or question to fill, a
//     page to visit for a client that offers URL elicitation), since a
//     question is sent on the request's own stream, which only the SDK has;
//   - the call does not stream events, is not long-running and is not a
//     task.
//
// A notifications/cancelled for a call the fast path serves cancels it, as
// the SDK cancels its own. A request reusing the id of a call in flight is
// refused by the SDK only when the SDK serves both.

// directSession is what the session fast path keeps of a session.
type directSession struct {
	ss *mcp.ServerSession
	// userID is the user of the token that opened the session ("" for
	// none): the SDK serves the session's requests only with it.
	userID string
	now    func() time.Time

	// ready is set once the client has sent notifications/initialized;
	// offers and version are read then.
	ready   atomic.Bool
	offers  clientOffers
	version string
	// logging is set once the client has set a log level.
	logging atomic.Bool
	// ended is set when its client ends the session (DELETE), before the
	// SDK closes it.
	ended atomic.Bool
	// touched is when the SDK last finished a request of the session, in
	// Unix nanoseconds.
	touched atomic.Int64

	mu sync.Mutex
	// calls cancel the calls the fast path serves, by their JSON-RPC id
	// as it came.
	calls map[string]context.CancelFunc
}

func newDirectSession(ss *mcp.ServerSession, x *mcp.RequestExtra, now func() time.Time) *directSession {
	ds := &directSession{ss: ss, now: now}
	if x != nil && x.TokenInfo != nil {
		ds.userID = x.TokenInfo.UserID
	}
	ds.touch()
	return ds
}

// touch notes that the SDK has just served a request of the session.
func (ds *directSession) touch() { ds.touched.Store(ds.now().UnixNano()) }

// initialized reads what the client of an initialized session offers.
func (ds *directSession) initialized() {
	p := ds.ss.InitializeParams()
	if p == nil {
		return
	}
	ds.version = p.ProtocolVersion
	ds.offers = capsOffers(p.Capabilities, ds.version)
	ds.ready.Store(true)
}

// servable reports whether the fast path may serve a request of the
// session now: it is initialized and not ended, its client set no log
// level, and the SDK served one of its requests within half of SessionTimeout.
func (ds *directSession) servable() bool {
	return ds.ready.Load() && !ds.logging.Load() && !ds.ended.Load() &&
		ds.now().UnixNano()-ds.touched.Load() < int64(SessionTimeout/2)
}

// user is the token of a request of the session, when the SDK would
// serve the session to it (ok).
func (ds *directSession) user(info any) (ti *auth.TokenInfo, ok bool) {
	ti, _ = info.(*auth.TokenInfo)
	return ti, ds.userID == "" || ti != nil && ti.UserID == ds.userID
}

// ending notes that the client of r, a DELETE of a session, ends it.
func (d *Door) ending(r *http.Request, info any) {
	st := d.states.byIDOf(r.Header.Get("Mcp-Session-Id"))
	if st == nil || st.direct == nil {
		return
	}
	if _, ok := st.direct.user(info); ok {
		st.direct.ended.Store(true)
	}
}

// track registers a call's cancel under its id; false when a call with
// that id is in flight already (the SDK answers the duplicate).
func (ds *directSession) track(id string, cancel context.CancelFunc) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if _, dup := ds.calls[id]; dup {
		return false
	}
	if ds.calls == nil {
		ds.calls = map[string]context.CancelFunc{}
	}
	ds.calls[id] = cancel
	return true
}

func (ds *directSession) untrack(id string) {
	ds.mu.Lock()
	delete(ds.calls, id)
	ds.mu.Unlock()
}

// cancel cancels the call the fast path serves under id, if any.
func (ds *directSession) cancel(id string) {
	ds.mu.Lock()
	c := ds.calls[id]
	ds.mu.Unlock()
	if c != nil {
		c()
	}
}

// streamableSessionKey marks a request sent to the SDK's Streamable HTTP
// handler of the session era: a session it opens may be served directly.
type streamableSessionKey struct{}

// sessionEvent tells the session fast path what a session's client did:
// initialized it, set a log level, cancelled a call.
func (d *Door) sessionEvent(method string, req mcp.Request) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	st := d.states.get(ss)
	if st == nil || st.direct == nil {
		return
	}
	switch method {
	case "notifications/initialized":
		st.direct.initialized()
	case "logging/setLevel":
		st.direct.logging.Store(true)
	case "notifications/cancelled":
		if p, ok := req.GetParams().(*mcp.CancelledParams); ok && p != nil {
			if id, err := json.Marshal(p.RequestID); err == nil {
				st.direct.cancel(string(id))
			}
		}
	}
}

// sessionMetaKeys are the _meta members a request of the session fast path
// may carry.
var sessionMetaKeys = map[string]bool{
	port.MetaIdempotencyKey: true,
	"traceparent":           true,
	"tracestate":            true,
}

// sessionCall serves r, a POST of a 2025-era session whose body is one
// tools/call, when the session fast path may (see above), and reports
// whether it did; when it returns false nothing has been written. rc is
// what the request reaches but for its session's selection.
func (d *Door) sessionCall(w http.ResponseWriter, r *http.Request, body []byte, info any, rc *reach) bool {
	if d.cfg.DisableFastPath {
		return false
	}
	st := d.states.byIDOf(r.Header.Get("Mcp-Session-Id"))
	if st == nil || st.direct == nil || !st.direct.servable() || len(r.Header.Values("Last-Event-ID")) > 0 {
		return false
	}
	ds := st.direct
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" && v != ds.version {
		return false
	}
	ti, ok := ds.user(info)
	if !ok {
		return false
	}
	if !postsJSONForSSE(r) {
		return false
	}
	req := decodeRequest(body)
	if req == nil {
		return false
	}
	p := req.Params
	if req.JSONRPC != "2.0" || req.Method != "tools/call" || p == nil || p.Name == "" || !httpguard.PlainID(req.ID) {
		return false
	}
	t, ok := d.tools[p.Name]
	if !ok || !directTool(t) || ds.offers.url {
		return false
	}
	// The session keeps the selection it was opened with; a request that
	// selects another is the SDK's to refuse.
	if h := r.Header.Get(HeaderToolsets); h != "" && h != st.sel.key {
		return false
	}
	sr := &reach{sel: st.sel, claim: rc.claim}
	if sr.dynamic() || !sr.has(p.Name) {
		return false
	}
	meta, ok := decodeMeta(p.Meta, sessionMetaKeys)
	if !ok {
		return false
	}
	ctx, cancel := context.WithCancel(context.WithValue(r.Context(), offersKey{}, ds.offers))
	defer cancel()
	id := string(req.ID)
	if !ds.track(id, cancel) {
		return false
	}
	defer ds.untrack(id)
	call := &mcp.CallToolRequest{
		Session: ds.ss,
		Params:  &mcp.CallToolParamsRaw{Meta: meta, Name: p.Name, Arguments: p.Arguments},
		Extra:   &mcp.RequestExtra{TokenInfo: ti, Header: r.Header},
	}
	res, _ := t.handler(ctx, call)
	if res == nil {
		// A protocol error: the SDK answers it (see fastCall).
		return false
	}
	d.log.DebugContext(ctx, "mcp.session_call_served", "tool", p.Name)
	d.writeFastAnswer(ctx, w, req.ID, p.Name, res, false)
	return true
}

// directTool reports whether a call of t can be served without the SDK's
// session: it never asks the person over the session, streams no events,
// and is neither long-running nor a task.
func directTool(t *tool) bool {
	c := t.catalog
	return !c.LongRunning && c.TaskSupport != toolv1.TaskSupport_TASK_SUPPORT_REQUIRED &&
		c.Kind != toolv1.Kind_KIND_ADMIN && len(c.Elicitable) == 0 && len(c.Questions) == 0 &&
		c.EventField == nil
}
