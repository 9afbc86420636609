package console

import (
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// wallet is a wallet as credits_wallets lists it.
type wallet struct {
	Wallet     string      `json:"wallet"`
	Balance    json.Number `json:"balance"`
	Low        bool        `json:"low"`
	UpdateTime string      `json:"update_time"`
}

// ledgerEntry is one change to a wallet as credits_ledger lists it.
type ledgerEntry struct {
	ID           string      `json:"id"`
	Kind         string      `json:"kind"`
	Amount       json.Number `json:"amount"`
	BalanceAfter json.Number `json:"balance_after"`
	Reference    string      `json:"reference"`
	Note         string      `json:"note"`
	Actor        string      `json:"actor"`
	CreateTime   string      `json:"create_time"`
}

// grantForm is the grant form's fields, as typed.
type grantForm struct {
	Wallet, Amount, Reference, Note, Reason string
	Confirm                                 bool
}

type creditsView struct {
	Wallets []wallet
	pager
	// Wallet is the wallet whose ledger is shown ("" for none).
	Wallet     string
	Ledger     []ledgerEntry
	LedgerDown string
	// Form is the grant form: fresh, or as typed when it was refused.
	Form grantForm
	// Failed is why the grant was refused; Granted the entry of one made.
	Failed  string
	Granted *ledgerEntry
}

// credits is the operator's view of the wallets (credits_wallets), the
// ledger of one (credits_ledger) and the grant form.
func (c *Console) credits(w http.ResponseWriter, r *http.Request, s *session) {
	v, err := c.loadCredits(r, s, r.URL.Query().Get("wallet"))
	v.Form = grantForm{Wallet: v.Wallet, Reference: newReference()}
	if id := r.URL.Query().Get("granted"); id != "" {
		for i := range v.Ledger {
			if v.Ledger[i].ID == id {
				v.Granted = &v.Ledger[i]
			}
		}
	}
	c.renderPage(w, r, s, "credits", "Credits", v, err)
}

// loadCredits reads the wallets page and, when one is named, its ledger.
func (c *Console) loadCredits(r *http.Request, s *session, named string) (*creditsView, error) {
	ctx, cancel := callCtx(r)
	defer cancel()
	offset := pageOffset(r)
	v := &creditsView{pager: pageAt(offset), Wallet: named}
	env, err := c.edge.call(ctx, s.Person, "credits_wallets", map[string]any{"offset": offset, "limit": c.cfg.PageSize})
	if err == nil && env.Status != "ok" {
		err = toolError(env)
	}
	if err != nil {
		return v, err
	}
	var d struct {
		Wallets []wallet `json:"wallets"`
	}
	if err := json.Unmarshal(env.Data, &d); err != nil {
		return v, err
	}
	v.Wallets = d.Wallets
	v.place(len(d.Wallets), c.cfg.PageSize, env.Pagination)
	if named != "" {
		lenv, lerr := c.edge.call(ctx, s.Person, "credits_ledger", map[string]any{"wallet": named, "limit": c.cfg.PageSize})
		if lerr == nil && lenv.Status != "ok" {
			lerr = toolError(lenv)
		}
		var ld struct {
			Entries []ledgerEntry `json:"entries"`
		}
		if lerr == nil {
			lerr = json.Unmarshal(lenv.Data, &ld)
		}
		if lerr != nil {
			v.LedgerDown = "The ledger of " + named + " is not shown: " + describe(lerr)
		}
		v.Ledger = ld.Entries
	}
	return v, nil
}

// grant gives a wallet credits through credits_grant, an ADMIN tool: the
// pipeline wants the person's confirmation and reason, which the form
// carries as given. The reference, filled in fresh with the form, makes a
// form sent twice a grant made once.
func (c *Console) grant(w http.ResponseWriter, r *http.Request, s *session) {
	f := grantForm{Wallet: strings.TrimSpace(r.PostForm.Get("wallet")), Amount: strings.TrimSpace(r.PostForm.Get("amount")),
		Reference: strings.TrimSpace(r.PostForm.Get("reference")), Note: r.PostForm.Get("note"), Reason: r.PostForm.Get("reason"),
		Confirm: r.PostForm.Get("confirm") == "true"}
	args := map[string]any{"wallet": f.Wallet, "reference": f.Reference, "note": f.Note, "reason": f.Reason, "confirm": f.Confirm}
	if n, err := strconv.ParseInt(f.Amount, 10, 64); err == nil {
		args["amount"] = n
	} else {
		args["amount"] = f.Amount // the pipeline says what is wrong with it
	}
	ctx, cancel := callCtx(r)
	env, err := c.edge.call(ctx, s.Person, "credits_grant", args)
	cancel()
	if err == nil && env.Status == "ok" {
		var d struct {
			Entry ledgerEntry `json:"entry"`
		}
		_ = json.Unmarshal(env.Data, &d)
		c.log.InfoContext(r.Context(), "console.credits_granted", "wallet", f.Wallet, "entry", d.Entry.ID, "subject", s.Person.Subject)
		http.Redirect(w, r, "/credits?"+url.Values{"wallet": {f.Wallet}, "granted": {d.Entry.ID}}.Encode(), http.StatusSeeOther)
		return
	}
	v, lerr := c.loadCredits(r, s, r.URL.Query().Get("wallet"))
	v.Form = f
	status := http.StatusServiceUnavailable
	if err != nil {
		v.Failed = "Nothing was granted: " + describe(err)
	} else {
		status = httpStatus(env.DomainCode)
		v.Failed = "Nothing was granted: " + formRefusal(env, "I confirm this grant", f.Reason)
	}
	c.renderStatus(w, r, s, status, "credits", "Credits", v, lerr)
}

// newReference names a grant made from the console.
func newReference() string {
	return "console-" + strings.ToLower(rand.Text()[:16])
}
