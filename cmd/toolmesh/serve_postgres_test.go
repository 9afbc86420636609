package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	memoryv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1/memoryv1connect"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1/projectsv1connect"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1/reputationv1connect"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1/workflowsv1connect"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestServeOnPostgres runs every domain as `toolmesh serve <domain>` on its
// own PostgreSQL database, given by --dsn or by TOOLMESH_<DOMAIN>_DSN, and
// calls it: the schema is migrated at start, what the services store is in
// PostgreSQL (nothing is written under --data), and it is still there after
// a restart.
func TestServeOnPostgres(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	agentsDSN, messagesDSN, tasksDSN, auditDSN := pg.NewDatabase(t), pg.NewDatabase(t), pg.NewDatabase(t), pg.NewDatabase(t)
	memoryDSN, creditsDSN, projectsDSN, workflowsDSN := pg.NewDatabase(t), pg.NewDatabase(t), pg.NewDatabase(t), pg.NewDatabase(t)
	reputationDSN, connectionsDSN := pg.NewDatabase(t), pg.NewDatabase(t)
	agentsAddr, messagesAddr, tasksAddr, auditAddr := porttest.Addr(t), porttest.Addr(t), porttest.Addr(t), porttest.Addr(t)
	memoryAddr, creditsAddr, projectsAddr, workflowsAddr := porttest.Addr(t), porttest.Addr(t), porttest.Addr(t), porttest.Addr(t)
	reputationAddr, connectionsAddr := porttest.Addr(t), porttest.Addr(t)

	pub := testPublicKey(t)
	stopAgents := serve(t, map[string]string{agentsSeedEnv: "local"}, "agents", "--addr", agentsAddr, "--data", data, "--mesh-public-key", pub,
		"--dsn", agentsDSN)
	serve(t, map[string]string{"TOOLMESH_MESSAGES_DSN": messagesDSN}, "messages", "--addr", messagesAddr, "--data", data, "--mesh-public-key", pub,
		"--agents-url", "http://"+agentsAddr)
	serve(t, nil, "tasks", "--addr", tasksAddr, "--data", data, "--mesh-public-key", pub, "--dsn", tasksDSN, "--agents-url", "http://"+agentsAddr)
	// The audit service's signing key and checkpoint log live elsewhere.
	keys := t.TempDir()
	auditKey, auditPub, _, err := ensureAuditKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	checkpoints := filepath.Join(keys, "checkpoints.log")
	stopAudit := serve(t, map[string]string{"TOOLMESH_AUDIT_DSN": auditDSN, "TOOLMESH_AUDIT_KEY": auditKey}, "audit", "--addr", auditAddr, "--data", data,
		"--mesh-public-key", pub, "--checkpoint-log", checkpoints)
	memoryKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	serve(t, map[string]string{"TOOLMESH_MEMORY_DSN": memoryDSN, "TOOLMESH_MEMORY_KEY": memoryKey}, "memory", "--addr", memoryAddr, "--data", data,
		"--mesh-public-key", pub)
	serve(t, nil, "credits", "--addr", creditsAddr, "--data", data, "--mesh-public-key", pub, "--dsn", creditsDSN)
	// projects reads code under its base; its Temporal is down (nothing
	// listens at the address).
	code := t.TempDir()
	if err := os.WriteFile(filepath.Join(code, "app.go"), []byte("package app\n\n// Serve serves.\nfunc Serve() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	serve(t, map[string]string{"TOOLMESH_PROJECTS_DSN": projectsDSN, projectsBaseEnv: code}, "projects", "--addr", projectsAddr, "--data", data,
		"--mesh-public-key", pub, "--temporal", porttest.Addr(t))
	// Workflows are stored without Temporal; only runs need it.
	serve(t, map[string]string{"TOOLMESH_WORKFLOWS_DSN": workflowsDSN}, "workflows", "--addr", workflowsAddr, "--data", data, "--mesh-public-key", pub)

	// reputation signs with a mesh key kept elsewhere, for an A2A endpoint
	// that need not run here, and reads the trail through audit.
	meshKey, _, _, err := ensureMeshKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, map[string]string{"TOOLMESH_REPUTATION_DSN": reputationDSN, cli.A2AURLEnv: "https://a2a.example.com"}, "reputation", "--addr", reputationAddr,
		"--data", data, "--mesh-public-key", pub, "--mesh-key", meshKey, "--service", "audit=http://"+auditAddr)

	// connections keeps its keyring elsewhere too.
	keyring, _, err := ensureConnectionsKeyring(keys)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, map[string]string{"TOOLMESH_CONNECTIONS_DSN": connectionsDSN, "TOOLMESH_CONNECTIONS_KEYRING_FILE": keyring}, "connections",
		"--addr", connectionsAddr, "--data", data, "--mesh-public-key", pub)

	client := servertest.HTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	opts := servertest.ClientOptions(nil)
	dir := agentsv1connect.NewAgentsServiceClient(client, "http://"+agentsAddr, opts...)
	msgs := messagesv1connect.NewMessagesServiceClient(client, "http://"+messagesAddr, opts...)
	tsks := tasksv1connect.NewTasksServiceClient(client, "http://"+tasksAddr, opts...)
	trail := auditv1connect.NewAuditServiceClient(client, "http://"+auditAddr, opts...)
	mem := memoryv1connect.NewMemoryServiceClient(client, "http://"+memoryAddr, opts...)
	wallets := creditsv1connect.NewCreditsServiceClient(client, "http://"+creditsAddr, opts...)
	prj := projectsv1connect.NewProjectsServiceClient(client, "http://"+projectsAddr, opts...)
	flows := workflowsv1connect.NewWorkflowsServiceClient(client, "http://"+workflowsAddr, opts...)
	rep := reputationv1connect.NewReputationServiceClient(client, "http://"+reputationAddr, opts...)
	local := servertest.As(ctx, "local")
	links := connectionsv1connect.NewConnectionsServiceClient(client, "http://"+connectionsAddr, opts...)

	// connections: a link stored by the service role, its token sealed.
	linker := mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: "toolmesh-link", Agent: "toolmesh-link", Roles: []string{mesh.RoleService}}})
	if _, err := links.StoreConnection(linker, &connectionsv1.StoreConnectionRequest{Agent: "local", Provider: connectionsv1.Provider_PROVIDER_GITHUB,
		Account: "octo-local", AccessToken: "gho_onPostgres"}); err != nil {
		t.Fatalf("connections StoreConnection: %v", err)
	}
	if tok, err := links.GetToken(linker, &connectionsv1.GetTokenRequest{Agent: "local", Provider: connectionsv1.Provider_PROVIDER_GITHUB}); err != nil ||
		tok.GetToken().GetAccessToken() != "gho_onPostgres" {
		t.Errorf("connections GetToken = %v, %v", tok.GetToken().GetConnection(), err)
	}

	// agents: the seeded agent is there, a registration is stored.
	if _, err := dir.Register(local, &agentsv1.RegisterRequest{AgentId: "bob", DisplayName: "Bob"}); err != nil {
		t.Fatalf("agents Register: %v", err)
	}
	// messages and tasks check their callers against the agents service.
	sent, err := msgs.Send(local, &messagesv1.SendRequest{ToAgent: "bob", Message: "hello over PostgreSQL"})
	if err != nil {
		t.Fatalf("messages Send: %v", err)
	}
	if again, err := msgs.Send(local, &messagesv1.SendRequest{ToAgent: "bob", Message: "hello over PostgreSQL"}); err != nil || !again.GetDuplicateSuppressed() {
		t.Errorf("messages Send of the same text again = %v, %v; want it suppressed", again, err)
	}
	inbox, err := msgs.List(servertest.As(ctx, "bob"), &messagesv1.ListRequest{})
	if err != nil || len(inbox.GetMessages()) != 1 || inbox.GetMessages()[0].GetId() != sent.GetMessage().GetId() {
		t.Errorf("bob's inbox = %v, %v; want the one message sent", inbox.GetMessages(), err)
	}
	task, err := tsks.Create(local, &tasksv1.CreateRequest{Description: "index the wiki"})
	if err != nil {
		t.Fatalf("tasks Create: %v", err)
	}
	if got, err := tsks.Get(local, &tasksv1.GetRequest{TaskId: task.GetTask().GetId()}); err != nil || got.GetTask().GetDescription() != "index the wiki" {
		t.Errorf("tasks Get = %v, %v; want the created task", got, err)
	}
	// audit: an append by the edge, and an intact chain.
	if _, err := trail.Append(servertest.As(ctx, audittrail.EdgeSubject), &auditv1.AppendRequest{
		CallId: "mcp-call-1", Actor: "owner", Tool: "agents_register", Reason: "onboarding bob",
		ArgsDigest: "sha256:" + auditGenesis, Outcome: auditv1.Outcome_OUTCOME_SUCCEEDED,
	}); err != nil {
		t.Fatalf("audit Append: %v", err)
	}
	if res, err := trail.Verify(local, &auditv1.VerifyRequest{}); err != nil || !res.GetIntact() || res.GetHead().GetSeq() != 1 {
		t.Errorf("audit Verify = %v, %v; want one intact record", res, err)
	}
	// reputation: an attestation of the intact trail, bound to its latest
	// signed checkpoint (the one signed at start, at least).
	if pub, err := rep.PublishAttestation(local, &reputationv1.PublishAttestationRequest{}); err != nil || pub.GetAttestation().GetJws() == "" ||
		pub.GetAttestation().GetIssuer() != "https://a2a.example.com" || pub.GetAttestation().GetCheckpoint().GetNote() == "" {
		t.Errorf("reputation PublishAttestation = %v, %v; want a signed attestation with a checkpoint", pub, err)
	}
	// Stopping the service signs the append's checkpoint (if the loop had
	// not yet), into the log given.
	stopAudit()
	if log, err := os.ReadFile(checkpoints); err != nil || !strings.Contains(string(log), "\n1\n") {
		t.Errorf("checkpoint log after one append and a stop = %q, %v; want a checkpoint of record 1", log, err)
	}
	// Offline, against the PostgreSQL database: intact (and, at the end,
	// cut).
	verifyOffline := func() (string, error) {
		var out bytes.Buffer
		err := run(ctx, []string{"audit", "verify", "--dsn", auditDSN, "--public-key", auditPub, "--checkpoints", checkpoints}, func(string) string { return "" }, nil, &out, discard{})
		return out.String(), err
	}
	if out, err := verifyOffline(); err != nil || !strings.Contains(out, ": INTACT") {
		t.Errorf("audit verify on PostgreSQL = %v:\n%s\nwant intact", err, out)
	}

	// memory: encrypted at rest, recalled by full-text search, best first.
	for key, content := range map[string]string{
		"deploy":  "Deploy checklist: staging first, then deploy to prod.",
		"lunch":   "Lunch is at noon.",
		"staging": "The staging cluster is blue.",
	} {
		if _, err := mem.Save(local, &memoryv1.SaveRequest{Key: key, Content: content}); err != nil {
			t.Fatalf("memory Save(%s): %v", key, err)
		}
	}
	recall, err := mem.Recall(local, &memoryv1.RecallRequest{Query: "deploy staging"})
	var recalled []string
	for _, m := range recall.GetMatches() {
		recalled = append(recalled, m.GetMemory().GetKey())
	}
	if err != nil || len(recalled) != 2 || recalled[0] != "deploy" || recall.GetMatches()[0].GetMemory().GetContent() != "Deploy checklist: staging first, then deploy to prod." {
		t.Errorf("memory Recall(deploy staging) = %v, %v; want deploy (with its content), then staging", recalled, err)
	}
	// credits: a grant, a retry of it, a spend.
	grant := &creditsv1.GrantRequest{Wallet: "local", Amount: 100, Reference: "invoice-1"}
	for range 2 {
		if _, err := wallets.Grant(local, grant); err != nil {
			t.Fatalf("credits Grant: %v", err)
		}
	}
	if _, err := wallets.Spend(local, &creditsv1.SpendRequest{Amount: 30, Reference: "job-1"}); err != nil {
		t.Fatalf("credits Spend: %v", err)
	}
	if b, err := wallets.GetBalance(local, &creditsv1.GetBalanceRequest{}); err != nil || b.GetBalance() != 70 {
		t.Errorf("credits GetBalance = %v, %v; want 70", b, err)
	}

	// projects: with Temporal down, a create stores the project and says its
	// health snapshots wait for a retry; its code is indexed all the same.
	if _, err := prj.Create(local, &projectsv1.CreateRequest{Name: "app", Path: "."}); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("projects Create with Temporal down = %v, want unavailable", err)
	}
	listed, err := prj.List(local, &projectsv1.ListRequest{})
	if err != nil || len(listed.GetProjects()) != 1 {
		t.Fatalf("projects List = %v, %v; want the stored project", listed, err)
	}
	syms, err := prj.CodeSymbols(local, &projectsv1.CodeSymbolsRequest{ProjectId: listed.GetProjects()[0].GetId(), Query: "serve"})
	if err != nil || len(syms.GetSymbols()) != 1 || syms.GetSymbols()[0].GetName() != "Serve" {
		t.Errorf("projects CodeSymbols(serve) = %v, %v; want Serve", syms.GetSymbols(), err)
	}

	// workflows: a definition, then a second version of it.
	def := &workflowsv1.Definition{Nodes: []*workflowsv1.Node{
		{Id: "start", Kind: &workflowsv1.Node_Start{Start: &workflowsv1.StartNode{Next: "done"}}},
		{Id: "done", Kind: &workflowsv1.Node_End{End: &workflowsv1.EndNode{}}},
	}}
	wf, err := flows.Create(local, &workflowsv1.CreateRequest{Name: "noop", Definition: def})
	if err != nil {
		t.Fatalf("workflows Create: %v", err)
	}
	if up, err := flows.Update(local, &workflowsv1.UpdateRequest{WorkflowId: wf.GetWorkflow().GetWorkflowId(), Definition: def}); err != nil || up.GetWorkflow().GetVersion() != 2 {
		t.Errorf("workflows Update = %v, %v; want version 2", up, err)
	}

	// Everything went to PostgreSQL: the rows are in each service's own
	// database, and no SQLite file was made.
	for _, c := range []struct{ dsn, query string }{
		{agentsDSN, `SELECT COUNT(*) FROM agents WHERE id IN ('local', 'bob')`},
		{messagesDSN, `SELECT COUNT(*) FROM messages`},
		{tasksDSN, `SELECT COUNT(*) FROM tasks`},
		{auditDSN, `SELECT COUNT(*) FROM audit_records`},
		{memoryDSN, `SELECT COUNT(*) FROM memories WHERE key_id <> ''`},
		{creditsDSN, `SELECT COUNT(*) FROM credit_ledger`},
		{projectsDSN, `SELECT COUNT(*) FROM project_symbols`},
		{workflowsDSN, `SELECT COUNT(*) FROM workflow_versions`},
		{reputationDSN, `SELECT COUNT(*) FROM attestations`},
		{connectionsDSN, `SELECT COUNT(*) FROM connections WHERE access_sealed IS NOT NULL AND kek_id <> '' AND position('gho_onPostgres' in encode(access_sealed, 'escape')) = 0`},
	} {
		if n := count(t, c.dsn, c.query); n == 0 {
			t.Errorf("%s on PostgreSQL = 0, want the stored rows", c.query)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(data, "*")); len(files) > 0 {
		t.Errorf("services given a PostgreSQL DSN wrote %v under --data", files)
	}

	// A restart migrates again (a no-op) and finds what was stored.
	stopAgents()
	serve(t, nil, "agents", "--addr", agentsAddr, "--data", data, "--mesh-public-key", pub, "--dsn", agentsDSN)
	got, err := dir.Get(local, &agentsv1.GetRequest{AgentId: "bob"})
	if err != nil || got.GetAgent().GetDisplayName() != "Bob" {
		t.Errorf("agents Get(bob) after a restart = %v, %v; want the registered agent", got, err)
	}

	// The audit record deleted and the head row reset: offline verify
	// reports the cut, proved by the checkpoint of record 1.
	auditDB, err := sqldb.Open(ctx, auditDSN)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP TRIGGER audit_records_no_delete ON audit_records`,
		`DELETE FROM audit_records`,
		`UPDATE audit_head SET seq = 0, hash = '` + auditGenesis + `'`,
	} {
		if _, err := auditDB.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	auditDB.Close()
	var exit *exitError
	if out, err := verifyOffline(); !errors.As(err, &exit) || exit.code != exitNotIntact || !strings.Contains(out, "record 1: truncated") {
		t.Errorf("audit verify on PostgreSQL after the cut = %v:\n%s\nwant exit %d, record 1 truncated", err, out, exitNotIntact)
	}
}

// auditGenesis is 64 zeros, a well-formed digest.
const auditGenesis = "0000000000000000000000000000000000000000000000000000000000000000"

// count runs a COUNT query on the database at dsn.
func count(t *testing.T, dsn, query string) int {
	t.Helper()
	db, err := sqldb.Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(t.Context(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
