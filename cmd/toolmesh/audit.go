package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/keyfile"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
)

// exitNotIntact is the exit status of `toolmesh audit verify` when the
// trail is not intact (1 means the verify itself failed).
const exitNotIntact = 2

// exitError asks main for a particular exit status once err is printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// auditVerifyConfig is the configuration of `toolmesh audit verify`.
type auditVerifyConfig struct {
	dataDir, dsn, pubKey string
	logs                 []string
	json                 bool
}

func bindAuditVerify(s *config.Set) *auditVerifyConfig {
	c := &auditVerifyConfig{}
	cli.BindData(s, &c.dataDir, "directory of the mesh's local state")
	s.String(&c.dsn, "", config.Opt{Flag: "dsn", Env: "TOOLMESH_AUDIT_DSN", Usage: "the audit database: a postgres:// URL, or a SQLite path", Default: "<data>/" + cli.DBFile("audit")})
	bindAuditEvidence(s, &c.pubKey, &c.logs)
	s.Bool(&c.json, false, config.Opt{Flag: "json", Usage: "print the result as JSON (the audit_verify response)"})
	return c
}

func runAudit(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "verify" {
		return errors.New("audit needs a subcommand: verify (toolmesh audit verify -h)")
	}
	return runAuditVerify(ctx, args[1:], getenv, stdout, stderr)
}

// runAuditVerify checks an audit trail offline: the database of the audit
// service (a SQLite file or a PostgreSQL DSN) against signed checkpoint
// logs, with the audit public key. It never writes to the database.
func runAuditVerify(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	s := cli.NewConfig("audit verify", getenv, stderr)
	c := bindAuditVerify(s)
	if err := s.Parse(args); err != nil {
		return err
	}
	if s.FlagSet().NArg() > 0 {
		return fmt.Errorf("audit verify takes no arguments, got %q", s.FlagSet().Args())
	}
	dataDir, dsn, asJSON := &c.dataDir, &c.dsn, &c.json
	*dsn = cli.OrDataFile(*dsn, *dataDir, cli.DBFile("audit"))
	ev, err := readAuditEvidence(cli.OrDataFile(c.pubKey, *dataDir, cli.AuditPubKeyFile), c.logs, *dataDir)
	if err != nil {
		return err
	}
	db, err := sqldb.OpenReadOnly(ctx, *dsn)
	if err != nil {
		return fmt.Errorf("open the audit database: %w", err)
	}
	defer db.Close()
	res, err := audit.VerifyTrail(ctx, auditstore.Existing(db), ev)
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := protojson.MarshalOptions{Multiline: true, UseProtoNames: true}.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	} else {
		printVerify(stdout, logging.Scrub(*dsn), res)
	}
	if !res.GetIntact() {
		return &exitError{code: exitNotIntact, err: errors.New("the audit trail is not intact")}
	}
	return nil
}

// bindAuditEvidence binds what the audit trail is verified against: the
// audit public key and the checkpoint logs (`audit verify`, `check`).
func bindAuditEvidence(s *config.Set, pubKey *string, logs *[]string) {
	s.String(pubKey, "", config.Opt{Flag: "public-key", Env: "TOOLMESH_AUDIT_PUBLIC_KEY", Usage: "audit public key file(s), PEM, several keys allowed", Default: "<data>/" + cli.AuditPubKeyFile})
	s.List(logs, config.Opt{Flag: "checkpoints", Env: "TOOLMESH_AUDIT_CHECKPOINT_LOG",
		Usage: "a checkpoint log to check the trail against, e.g. the copy shipped elsewhere", Default: "<data>/" + cli.AuditCheckpointLogFile})
}

// readAuditEvidence reads the signed checkpoints of logs (the data
// directory's own log when none is given) with the audit public key.
func readAuditEvidence(pubKey string, logs []string, dataDir string) (audit.Evidence, error) {
	var ev audit.Evidence
	if len(logs) == 0 {
		logs = []string{cli.DataFile(dataDir, cli.AuditCheckpointLogFile)}
	}
	keys, err := keyfile.ReadPublic(pubKey)
	if err != nil {
		return ev, fmt.Errorf("read audit public key: %w", err)
	}
	v := auditcheckpoint.NewVerifier(keys...)
	for _, path := range logs {
		valid, rejected, err := v.ReadFile(path, path)
		if err != nil {
			return ev, fmt.Errorf("read checkpoint log: %w", err)
		}
		ev.Checkpoints, ev.Rejected = append(ev.Checkpoints, valid...), append(ev.Rejected, rejected...)
	}
	return ev, nil
}

// printVerify writes a verify result for a person.
func printVerify(w io.Writer, where string, res *auditv1.VerifyResponse) {
	verdict := "INTACT"
	if !res.GetIntact() {
		verdict = "NOT INTACT"
	}
	fmt.Fprintf(w, "audit trail %s: %s\n", where, verdict)
	if h := res.GetHead(); h != nil {
		fmt.Fprintf(w, "  head row     record %d, hash %s\n", h.GetSeq(), h.GetHash())
	} else {
		fmt.Fprintln(w, "  head row     missing")
	}
	fmt.Fprintf(w, "  verified     %d records\n", res.GetVerifiedRecords())
	if c := res.GetCheckpoint(); c != nil {
		fmt.Fprintf(w, "  checkpoints  %d checked; the latest names record %d, signed %s (%s)\n", res.GetCheckpointsChecked(),
			c.GetSeq(), c.GetTime().AsTime().UTC().Format("2006-01-02T15:04:05.000Z"), c.GetSource())
	} else {
		fmt.Fprintln(w, "  checkpoints  none: a tail cut together with the head row, or a rewritten trail, cannot show")
	}
	if f := res.GetFirstBad(); f != nil {
		fmt.Fprintf(w, "  first bad    record %d: %s\n               %s\n", f.GetSeq(), problemWord(f.GetProblem()), f.GetDetail())
		if c := f.GetCheckpoint(); c != nil {
			fmt.Fprintf(w, "  proof        the signed checkpoint at %s:\n", c.GetSource())
			for _, line := range strings.Split(strings.TrimSuffix(c.GetNote(), "\n"), "\n") {
				fmt.Fprintf(w, "               | %s\n", line)
			}
		}
	}
	if n := res.GetCheckpointsRejected(); n > 0 {
		fmt.Fprintf(w, "  rejected     %d checkpoints cannot be trusted:\n", n)
		for _, r := range res.GetRejectedCheckpoints() {
			fmt.Fprintf(w, "               %s: %s: %s\n", r.GetSource(), problemWord(r.GetProblem()), r.GetDetail())
		}
	}
}

// problemWord is a problem as words: "out of order".
func problemWord(p protoreflect.Enum) string {
	return strings.ReplaceAll(protoenum.Word(p), "_", " ")
}
