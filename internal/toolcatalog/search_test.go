package toolcatalog_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// TestSearchFindsToolsByWhatTheyDo: a model's words about what it wants to
// do find the tool that does it among the product's tools, near the top.
func TestSearchFindsToolsByWhatTheyDo(t *testing.T) {
	x := toolcatalog.NewIndex(build(t, toolcatalog.Contracts()...).Tools())
	for query, want := range map[string]string{
		"give credits to an agent":        "credits_grant",
		"send a message to another agent": "messages_send",
		"open a pull request on github":   "github_create_pull",
		"ask the human a question":        "owner_ask",
		"find where a function is used":   "projects_find_references",
		"cancel my work task":             "tasks_cancel",
		"verify the audit trail":          "audit_verify",
	} {
		hits := x.Search(query, nil, 3)
		var names []string
		for _, h := range hits {
			names = append(names, h.Tool.Name)
		}
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("Search(%q) = %v, want %s in the top 3", query, names, want)
		}
	}
}

// TestSearchRanksAndFilters: hits come best first and only among the tools
// allowed; words that match nothing find nothing.
func TestSearchRanksAndFilters(t *testing.T) {
	x := toolcatalog.NewIndex(build(t, toolcatalog.Contracts()...).Tools())
	hits := x.Search("credits", nil, 10)
	if len(hits) != 6 {
		t.Fatalf("Search(credits) found %d tools, want the 6 credits tools", len(hits))
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Errorf("hit %d (%s %.2f) scores above hit %d (%s %.2f)", i, hits[i].Tool.Name, hits[i].Score, i-1, hits[i-1].Tool.Name, hits[i-1].Score)
		}
	}
	reads := x.Search("give credits to an agent", func(tool *toolcatalog.Tool) bool { return !tool.Privileged }, 10)
	for _, h := range reads {
		if h.Tool.Privileged {
			t.Errorf("a filtered search found %s, which the filter refuses", h.Tool.Name)
		}
	}
	if got := x.Search("zzyzx the of", nil, 5); len(got) != 0 {
		t.Errorf("Search of unknown words and stop words = %v, want nothing", got)
	}
}

// TestTerms: words are lower-cased, split at anything but letters and
// digits, stemmed, and stop words dropped, so that the forms of one word
// meet.
func TestTerms(t *testing.T) {
	got := toolcatalog.Terms("Creating the agents' memories: created_at, messages_send, TASKS")
	want := []string{"creat", "agent", "memory", "creat", "messag", "send", "task"}
	if !cmp.Equal(got, want) {
		t.Errorf("Terms = %v, want %v", got, want)
	}
}
