package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/cmd/internal/invariants"
	"github.com/toolmesh/toolmesh/internal/chaoslog"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/sqldb"
)

// checkedDomains are the domains whose databases `toolmesh check` reads.
var checkedDomains = []string{"audit", "credits", "eventlog", "memory", "messages", "owner", "remoteagents", "tasks", "workflows"}

// checkConfig is the configuration of `toolmesh check`.
type checkConfig struct {
	dataDir, pubKey string
	dsns            map[string]*string
	logs            []string
	acked, faults   string
	json            bool
}

func bindCheck(s *config.Set) *checkConfig {
	c := &checkConfig{dsns: map[string]*string{}}
	cli.BindData(s, &c.dataDir, "directory of the mesh's local state")
	for _, d := range checkedDomains {
		c.dsns[d] = new(string)
		s.String(c.dsns[d], "", config.Opt{Flag: d + "-dsn", Env: "TOOLMESH_" + strings.ToUpper(d) + "_DSN",
			Usage: "the " + d + " database: a postgres:// URL, or a SQLite path", Default: "<data>/" + cli.DBFile(d)})
	}
	bindAuditEvidence(s, &c.pubKey, &c.logs)
	s.String(&c.acked, "", config.Opt{Flag: "acked", Usage: "a workload's log of acknowledged writes (JSON lines: domain, id, key, agent, at)"})
	s.String(&c.faults, "", config.Opt{Flag: "faults", Usage: "a chaos run's fault log (JSON lines: kind, target, sent, landed, ended), shown around each violation"})
	s.Bool(&c.json, false, config.Opt{Flag: "json", Usage: "print the result as JSON"})
	return c
}

// runCheck checks the mesh's invariants on its databases, read-only, with
// the mesh up or down (cmd/internal/invariants): exit 2 when one is broken.
func runCheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s := cli.NewConfig("check", getenv, stderr)
	c := bindCheck(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	if s.FlagSet().NArg() > 0 {
		return fmt.Errorf("check takes no arguments, got %q", s.FlagSet().Args())
	}
	in := invariants.Input{Now: time.Now()}
	dbs := map[string]**sqldb.DB{"audit": &in.Audit, "credits": &in.Credits, "memory": &in.Memory, "messages": &in.Messages,
		"owner": &in.Owner, "remoteagents": &in.RemoteAgents, "tasks": &in.Tasks, "workflows": &in.Workflows, "eventlog": &in.EventLog}
	for _, d := range checkedDomains {
		dsn := cli.OrDataFile(*c.dsns[d], c.dataDir, cli.DBFile(d))
		db, err := openChecked(ctx, dsn)
		if err != nil {
			return fmt.Errorf("open the %s database %s: %w", d, logging.Scrub(dsn), err)
		}
		if db != nil {
			defer db.Close()
		}
		*dbs[d] = db
	}
	ev, err := readAuditEvidence(cli.OrDataFile(c.pubKey, c.dataDir, cli.AuditPubKeyFile), c.logs, c.dataDir)
	if err != nil {
		return err
	}
	in.AuditEvidence = ev
	if in.Acked, err = chaoslog.Read[chaoslog.Ack](c.acked); err != nil {
		return fmt.Errorf("read the acknowledged writes: %w", err)
	}
	faults, err := chaoslog.Read[chaoslog.Fault](c.faults)
	if err != nil {
		return fmt.Errorf("read the fault log: %w", err)
	}
	res, err := invariants.Check(ctx, in)
	if err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		invariants.Print(stdout, res, faults)
	}
	if !res.Held() {
		return &exitError{code: exitNotIntact, err: fmt.Errorf("%d invariant violations", len(res.Violations))}
	}
	return nil
}

// openChecked opens a database read-only; a SQLite file that is not there
// (a domain the mesh never started) is nil, and its invariants are skipped.
func openChecked(ctx context.Context, dsn string) (*sqldb.DB, error) {
	if !strings.Contains(dsn, "://") {
		if _, err := os.Stat(dsn); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	return sqldb.OpenReadOnly(ctx, dsn)
}
