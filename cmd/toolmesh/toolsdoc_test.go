package main

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
)

// originalTools is the agent tool set toolmesh is modelled on (each
// "corvid_<name>" there): docs/tools.md has a row for each, naming the
// tool here that does its job or saying why none does.
var originalTools = []string{
	"send_message", "save_memory", "recall_memory", "read_on_chain_memories", "sync_on_chain_memories",
	"delete_memory", "promote_memory", "library_write", "library_read", "library_list", "library_delete",
	"list_agents", "discover_agent", "invoke_remote_agent", "lookup_contact", "launch_council",
	"flock_directory", "create_work_task", "check_work_status", "list_work_tasks", "list_projects",
	"current_project", "extend_timeout", "restart_server", "manage_schedule", "manage_workflow",
	"check_credits", "grant_credits", "credit_config", "web_search", "deep_research",
	"github_star_repo", "github_unstar_repo", "github_fork_repo", "github_list_prs", "github_list_issues",
	"github_create_pr", "github_create_issue", "github_review_pr", "github_comment_on_pr",
	"github_get_pr_diff", "github_repo_info", "github_follow_user", "notify_owner", "ask_owner",
	"configure_notifications", "check_reputation", "check_health_trends", "publish_attestation",
	"verify_agent_reputation", "code_symbols", "find_references", "repo_blocklist",
	"discord_send_message", "discord_send_image", "browser", "record_observation",
	"list_observations", "boost_observation", "dismiss_observation", "observation_stats",
}

// beingBuilt marks a row of the original tool set whose tool here is
// planned and not served yet.
const beingBuilt = "(being built)"

var backticked = regexp.MustCompile("`([a-z0-9_*]+)`")

// toolsDoc returns the table rows of docs/tools.md under the heading
// "## "+section, each split into its cells.
func toolsDoc(t *testing.T, section string) [][]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/tools.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "\n## "+section+"\n")
	if !ok {
		t.Fatalf("docs/tools.md has no section %q", section)
	}
	rest, _, _ = strings.Cut(rest, "\n## ")
	var rows [][]string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("docs/tools.md, section %q: no table", section)
	}
	return rows[1:] // the header is not a row
}

// names are the backticked names in a table cell.
func names(cell string) []string {
	var out []string
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestToolsDocListsEveryTool: every tool the edge serves has a row in the
// tool table of docs/tools.md, and every tool a row names is served.
func TestToolsDocListsEveryTool(t *testing.T) {
	e, err := edge.New(edge.Config{Mesh: servertest.MeshSigner()}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, tool := range e.Registry().Tools() {
		served[tool.Name] = true
	}
	documented := map[string]bool{}
	for _, row := range toolsDoc(t, "The tools") {
		for _, n := range names(row[0]) {
			documented[n] = true
			if !served[n] {
				t.Errorf("docs/tools.md lists %s, which the edge does not serve", n)
			}
		}
	}
	for _, n := range slices.Sorted(maps.Keys(served)) {
		if !documented[n] {
			t.Errorf("the edge serves %s, which has no row in docs/tools.md (## The tools)", n)
		}
	}
}

// TestToolsDocCoversTheOriginalToolSet: each tool of the original set has
// one row in docs/tools.md (## The original tool set). The row names the
// tools here that do its job — served by the edge, or marked as being
// built — or says "none" and why.
func TestToolsDocCoversTheOriginalToolSet(t *testing.T) {
	e, err := edge.New(edge.Config{Mesh: servertest.MeshSigner()}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int{}
	for _, row := range toolsDoc(t, "The original tool set") {
		if len(row) != 3 {
			t.Errorf("row %q: want three cells (original, here, how)", row)
			continue
		}
		originals, here := names(row[0]), names(row[1])
		for _, o := range originals {
			rows[o]++
			if !slices.Contains(originalTools, o) {
				t.Errorf("docs/tools.md has a row for %s, which is not a tool of the original set", o)
			}
		}
		planned := strings.Contains(row[1], beingBuilt)
		for _, n := range here {
			if _, ok := e.Registry().Lookup(n); !ok && !planned {
				t.Errorf("row %s names %s, which the edge does not serve (mark it %s if it is planned)", originals, n, beingBuilt)
			}
		}
		if len(here) == 0 && (!strings.HasPrefix(row[1], "none") || len(strings.TrimSpace(row[2])) < 40) {
			t.Errorf("row %s names no tool here and gives no reason (want \"none\" and why)", originals)
		}
	}
	for _, o := range originalTools {
		if rows[o] != 1 {
			t.Errorf("%s has %d rows in docs/tools.md (## The original tool set), want 1", o, rows[o])
		}
	}
}
