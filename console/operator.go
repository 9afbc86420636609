package console

import (
	"encoding/json"
	"net/http"
)

// agent is an agent as agents_list shows it, with its reputation.
type agent struct {
	ID           string `json:"id"`
	DisplayName  string `json:"display_name"`
	Description  string `json:"description"`
	Status       string `json:"status"`
	StatusReason string `json:"status_reason"`
	CreateTime   string `json:"create_time"`

	Score *score `json:"-"`
}

// score is an agent's reputation as reputation_check computes it.
type score struct {
	Score      int    `json:"score"`
	Formula    string `json:"formula"`
	Components struct {
		AdminCalls  json.Number `json:"admin_calls"`
		Replays     json.Number `json:"replays"`
		ActiveDays  int         `json:"active_days"`
		Tools       int         `json:"tools"`
		RecordsRead json.Number `json:"records_read"`
		Truncated   bool        `json:"truncated"`
	} `json:"components"`
}

type agentsView struct {
	Agents                         []agent
	Active, Paused, Retired, Total int
	Offset, Prev, Next             int
	// ReputationDown says why the scores could not be read.
	ReputationDown string
}

// agents is the operator's directory of agents, with each one's status
// and reputation (its score and the components it is computed from).
func (c *Console) agents(w http.ResponseWriter, r *http.Request, s *session) {
	offset := pageOffset(r)
	v := &agentsView{Offset: offset, Prev: -1, Next: -1}
	ctx, cancel := callCtx(r)
	defer cancel()
	env, err := c.edge.call(ctx, s.Person, "agents_list", map[string]any{"offset": offset, "limit": c.cfg.PageSize})
	if err == nil && env.Status != "ok" {
		err = toolError(env)
	}
	if err == nil {
		var d struct {
			Agents  []agent `json:"agents"`
			Summary struct {
				Active, Paused, Retired, Total int
			} `json:"summary"`
		}
		if err = json.Unmarshal(env.Data, &d); err == nil {
			v.Agents = d.Agents
			v.Active, v.Paused, v.Retired, v.Total = d.Summary.Active, d.Summary.Paused, d.Summary.Retired, d.Summary.Total
			if pg := env.Pagination; pg != nil && pg.NextOffset != nil {
				v.Next = *pg.NextOffset
			}
			if offset > 0 {
				v.Prev = max(0, offset-c.cfg.PageSize)
			}
		}
	}
	for i := range v.Agents {
		renv, rerr := c.edge.call(ctx, s.Person, "reputation_check", map[string]any{"agent_id": v.Agents[i].ID})
		if rerr == nil && renv.Status != "ok" {
			rerr = toolError(renv)
		}
		if rerr != nil {
			v.ReputationDown = "Reputation is not shown: " + describe(rerr)
			break
		}
		var d struct {
			Score score `json:"score"`
		}
		if json.Unmarshal(renv.Data, &d) == nil {
			v.Agents[i].Score = &d.Score
		}
	}
	c.renderPage(w, r, s, "agents", "Agents", v, err)
}

// auditRecord is one record of the audit trail.
type auditRecord struct {
	Seq      json.Number `json:"seq"`
	Time     string      `json:"time"`
	Actor    string      `json:"actor"`
	Tool     string      `json:"tool"`
	Reason   string      `json:"reason"`
	Outcome  string      `json:"outcome"`
	CallID   string      `json:"call_id"`
	Hash     string      `json:"hash"`
	ReplayOf string      `json:"replay_of"`
}

type auditView struct {
	Records            []auditRecord
	Actor, Tool        string
	Offset, Prev, Next int
	Total              int
	// Verify is audit_verify's answer, VerifyDown why there is none.
	Verify     *json.RawMessage
	Intact     bool
	Verified   json.Number
	FirstBad   map[string]any
	Checked    json.Number
	Rejected   json.Number
	VerifyDown string
	// Checkpoints are the newest of the checkpoint log (CheckpointTotal in
	// all), RejectedLines its lines that cannot be trusted; CheckpointsDown
	// says why the log could not be read.
	Checkpoints     []signedCheckpoint
	CheckpointTotal int
	RejectedLines   []rejectedCheckpoint
	CheckpointsDown string
}

// signedCheckpoint is one line of the audit checkpoint log.
type signedCheckpoint struct {
	Origin string      `json:"origin"`
	Seq    json.Number `json:"seq"`
	Hash   string      `json:"hash"`
	Time   string      `json:"time"`
	Source string      `json:"source"`
	Note   string      `json:"note"`
}

// rejectedCheckpoint is a line of the log that cannot be trusted.
type rejectedCheckpoint struct {
	Source  string `json:"source"`
	Problem string `json:"problem"`
	Detail  string `json:"detail"`
}

// checkpointsShown is how many of the newest checkpoints the audit page
// lists.
const checkpointsShown = 10

// audit is the audit trail, filtered by actor and tool, newest first, and
// whether it verifies against the signed checkpoints.
func (c *Console) audit(w http.ResponseWriter, r *http.Request, s *session) {
	offset := pageOffset(r)
	v := &auditView{Offset: offset, Prev: -1, Next: -1, Actor: r.FormValue("actor"), Tool: r.FormValue("tool")}
	ctx, cancel := callCtx(r)
	defer cancel()
	args := map[string]any{"offset": offset, "limit": c.cfg.PageSize}
	if v.Actor != "" {
		args["actor"] = v.Actor
	}
	if v.Tool != "" {
		args["tool"] = v.Tool
	}
	env, err := c.edge.call(ctx, s.Person, "audit_list", args)
	if err == nil && env.Status != "ok" {
		err = toolError(env)
	}
	if err == nil {
		var d struct {
			Records []auditRecord `json:"records"`
		}
		if err = json.Unmarshal(env.Data, &d); err == nil {
			v.Records, v.Total = d.Records, len(d.Records)
			if pg := env.Pagination; pg != nil {
				v.Total = pg.Total
				if pg.NextOffset != nil {
					v.Next = *pg.NextOffset
				}
			}
			if offset > 0 {
				v.Prev = max(0, offset-c.cfg.PageSize)
			}
		}
	}
	venv, verr := c.edge.call(ctx, s.Person, "audit_verify", map[string]any{})
	if verr == nil && venv.Status != "ok" {
		verr = toolError(venv)
	}
	if verr != nil {
		v.VerifyDown = "The trail could not be verified: " + describe(verr)
	} else {
		var d struct {
			Intact              bool           `json:"intact"`
			VerifiedRecords     json.Number    `json:"verified_records"`
			FirstBad            map[string]any `json:"first_bad"`
			CheckpointsChecked  json.Number    `json:"checkpoints_checked"`
			CheckpointsRejected json.Number    `json:"checkpoints_rejected"`
		}
		if json.Unmarshal(venv.Data, &d) == nil {
			v.Verify = &venv.Data
			v.Intact, v.Verified, v.FirstBad, v.Checked, v.Rejected = d.Intact, d.VerifiedRecords, d.FirstBad, d.CheckpointsChecked, d.CheckpointsRejected
		}
	}
	cenv, cerr := c.edge.call(ctx, s.Person, "audit_list_checkpoints", map[string]any{"limit": checkpointsShown})
	if cerr == nil && cenv.Status != "ok" {
		cerr = toolError(cenv)
	}
	if cerr == nil {
		var d struct {
			Checkpoints []signedCheckpoint   `json:"checkpoints"`
			Rejected    []rejectedCheckpoint `json:"rejected"`
		}
		if cerr = json.Unmarshal(cenv.Data, &d); cerr == nil {
			v.Checkpoints, v.RejectedLines, v.CheckpointTotal = d.Checkpoints, d.Rejected, len(d.Checkpoints)
			if pg := cenv.Pagination; pg != nil {
				v.CheckpointTotal = pg.Total
			}
		}
	}
	if cerr != nil {
		v.CheckpointsDown = "The checkpoint log could not be read: " + describe(cerr)
	}
	c.renderPage(w, r, s, "audit", "Audit", v, err)
}
