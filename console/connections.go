package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"

	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
)

// ownerFormsPath is where the edge serves the owner's forms (edge.PathOwnerForms).
const ownerFormsPath = "/owner"

// connection is a connection as connections_list shows it: metadata only.
type connection struct {
	ID         string   `json:"id"`
	Agent      string   `json:"agent"`
	Provider   string   `json:"provider"`
	Account    string   `json:"account"`
	Scopes     []string `json:"scopes"`
	Status     string   `json:"status"`
	CreateTime string   `json:"create_time"`
	UseTime    string   `json:"use_time"`
	ExpireTime string   `json:"expire_time"`
}

// linkForm is the link form's fields as typed, never its token: a refused
// form comes back with the token field empty.
type linkForm struct {
	Agent, Provider, Account string
}

// provider is a choice of the link form.
type provider struct {
	Value, Title, Hint string
}

// providers are those a token is linked for by pasting it.
var providers = []provider{
	{Value: "PROVIDER_GITHUB", Title: "GitHub (personal access token)", Hint: "GitHub names the account: the token is checked with GitHub before it is stored."},
	{Value: "PROVIDER_SEARCH", Title: "Search API (API key)", Hint: "The search API cannot say whose a key is: name the account, or it is called “api key”."},
}

type connectionsView struct {
	Connections []connection
	pager
	Agents    []agent
	Providers []provider
	Form      linkForm
	// Failed is why a link or an unlink was refused; Linked and Unlinked
	// say what was done.
	Failed           string
	Linked, Unlinked string
}

// connections shows the agents' upstream connections (connections_list,
// metadata only), the form that links a token for an agent and each
// connection's Unlink.
func (c *Console) connections(w http.ResponseWriter, r *http.Request, s *session) {
	v, err := c.loadConnections(r, s)
	// A link a call asked for names the agent and the provider.
	v.Form.Provider = providers[0].Value
	for _, p := range providers {
		if p.Value == r.URL.Query().Get("provider") {
			v.Form.Provider = p.Value
		}
	}
	if a := r.URL.Query().Get("agent"); a != "" {
		v.Form.Agent = a
	}
	v.Linked, v.Unlinked = r.URL.Query().Get("linked"), r.URL.Query().Get("unlinked")
	c.renderPage(w, r, s, "connections", "Connections", v, err)
}

func (c *Console) loadConnections(r *http.Request, s *session) (*connectionsView, error) {
	ctx, cancel := callCtx(r)
	defer cancel()
	offset := pageOffset(r)
	v := &connectionsView{pager: pageAt(offset), Providers: providers}
	env, err := c.edge.call(ctx, s.Person, "connections_list", map[string]any{"offset": offset, "limit": c.cfg.PageSize})
	if err == nil && env.Status != "ok" {
		err = toolError(env)
	}
	if err != nil {
		return v, err
	}
	var d struct {
		Connections []connection `json:"connections"`
	}
	if err := json.Unmarshal(env.Data, &d); err != nil {
		return v, err
	}
	v.Connections = d.Connections
	v.place(len(d.Connections), c.cfg.PageSize, env.Pagination)
	// The form's choices of agent; the form still takes any id.
	if aenv, aerr := c.edge.call(ctx, s.Person, "agents_list", map[string]any{"limit": 200}); aerr == nil && aenv.Status == "ok" {
		var ad struct {
			Agents []agent `json:"agents"`
		}
		if json.Unmarshal(aenv.Data, &ad) == nil {
			v.Agents = ad.Agents
		}
	}
	return v, nil
}

// linkToken links the token the owner pasted for an agent at a provider:
// the console's one write that is not a tool call. The token goes to the
// connections service's LinkToken through the edge's owner's forms, with
// the person's own credentials, never as a tool argument; nothing here
// logs it or shows it again.
func (c *Console) linkToken(w http.ResponseWriter, r *http.Request, s *session) {
	f := linkForm{Agent: strings.TrimSpace(r.PostForm.Get("agent")), Provider: r.PostForm.Get("provider"), Account: strings.TrimSpace(r.PostForm.Get("account"))}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	prov := connectionsv1.Provider(connectionsv1.Provider_value[f.Provider])
	ctx, cancel := callCtx(r)
	res, err := c.ownerForms(s.Person).LinkToken(ctx, &connectionsv1.LinkTokenRequest{Agent: f.Agent, Provider: prov, Token: token, Account: f.Account})
	cancel()
	if err == nil {
		conn := res.GetConnection()
		c.log.InfoContext(r.Context(), "console.connection_linked", "connection", conn.GetId(), "agent", conn.GetAgent(), "subject", s.Person.Subject)
		http.Redirect(w, r, "/connections?"+url.Values{"linked": {conn.GetAgent() + " acts as " + conn.GetAccount()}}.Encode(), http.StatusSeeOther)
		return
	}
	v, lerr := c.loadConnections(r, s)
	v.Form = f
	status := http.StatusServiceUnavailable
	var cerr *connect.Error
	switch {
	case errors.As(err, &cerr) && connect.IsWireError(cerr):
		// The service answered: its message says why (GitHub refused the
		// token, or could not be asked whose it is).
		status = httpStatus(cerr.Code().String())
		v.Failed = "Nothing was linked: " + cerr.Message()
	default:
		v.Failed = "Nothing was linked: the edge or the connections service does not answer; send the form again."
	}
	c.log.WarnContext(r.Context(), "console.connection_refused", "agent", f.Agent, "provider", f.Provider, "status", status)
	c.renderStatus(w, r, s, status, "connections", "Connections", v, lerr)
}

// unlink unlinks a connection through connections_delete, an ADMIN tool:
// the form carries the person's confirmation and reason.
func (c *Console) unlink(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	ctx, cancel := callCtx(r)
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		reason = "unlinked in the console"
	}
	env, err := c.edge.call(ctx, s.Person, "connections_delete", map[string]any{"id": id, "confirm": true, "reason": reason})
	cancel()
	if err == nil && env.Status == "ok" {
		var d struct {
			Connection connection `json:"connection"`
		}
		_ = json.Unmarshal(env.Data, &d)
		c.log.InfoContext(r.Context(), "console.connection_unlinked", "connection", id, "subject", s.Person.Subject)
		http.Redirect(w, r, "/connections?"+url.Values{"unlinked": {d.Connection.Agent + " no longer acts as " + d.Connection.Account}}.Encode(), http.StatusSeeOther)
		return
	}
	v, lerr := c.loadConnections(r, s)
	status := http.StatusServiceUnavailable
	if err != nil {
		v.Failed = "Nothing was unlinked: " + describe(err)
	} else {
		status = httpStatus(env.DomainCode)
		v.Failed = "Nothing was unlinked: " + env.Message
	}
	c.renderStatus(w, r, s, status, "connections", "Connections", v, lerr)
}

// ownerForms is a client of the edge's owner's forms as p.
func (c *Console) ownerForms(p person) connectionsv1connect.ConnectionsServiceClient {
	hc := c.cfg.HTTPClient
	if p.token != "" {
		cp := *hc
		cp.Transport = bearer{token: p.token, next: transport(hc)}
		hc = &cp
	}
	return connectionsv1connect.NewConnectionsServiceClient(hc, c.formsURL, connect.WithProtoJSON())
}

// providerWord names a provider value for the page ("github").
func providerWord(v string) string { return statusWord(v, "PROVIDER_") }
