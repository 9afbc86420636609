package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
)

// TestToolsetsDoc: the toolset table of docs/toolsets.md has a row for
// each toolset the edge serves, saying whether the contracts put it in the
// default selection and how many tools it holds, and no other row. A new
// domain fails here until its row says what was decided about default.
func TestToolsetsDoc(t *testing.T) {
	e, err := edge.New(edge.Config{Mesh: servertest.MeshSigner()}, logging.Discard())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/toolsets.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "\n| toolset | default | tools | for |\n|---|---|---|---|\n")
	if !ok {
		t.Fatal("docs/toolsets.md has no toolset table (| toolset | default | tools | for |)")
	}
	rows := map[string][]string{}
	var order []string
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		name := strings.Trim(cells[0], "`")
		rows[name] = cells
		order = append(order, name)
	}
	var served []string
	for _, ts := range e.Registry().Toolsets() {
		served = append(served, ts.Name)
		row, ok := rows[ts.Name]
		if !ok {
			t.Errorf("toolset %s has no row in docs/toolsets.md; add one, saying whether it is default", ts.Name)
			continue
		}
		if want := map[bool]string{true: "yes", false: "no"}[ts.Default]; row[1] != want {
			t.Errorf("docs/toolsets.md says toolset %s is default %q; its contracts say %q", ts.Name, row[1], want)
		}
		if row[2] != strconv.Itoa(len(ts.Tools)) {
			t.Errorf("docs/toolsets.md says toolset %s has %s tools; it has %d", ts.Name, row[2], len(ts.Tools))
		}
	}
	if strings.Join(order, ",") != strings.Join(served, ",") {
		t.Errorf("docs/toolsets.md lists the toolsets %v; the edge serves %v, in that order", order, served)
	}
	// The totals the pages state: every tool is in exactly one toolset.
	total := 0
	for _, ts := range e.Registry().Toolsets() {
		total += len(ts.Tools)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for page, phrase := range map[string]string{
		"docs/toolsets.md": string(doc), "README.md": string(readme),
	} {
		for _, want := range totalPhrases(page, total) {
			if !strings.Contains(phrase, want) {
				t.Errorf("%s should say %q: the edge serves %d tools", page, want, total)
			}
		}
	}
}

// totalPhrases are the sentences of each page that state the number of
// tools.
func totalPhrases(page string, total int) []string {
	n := strconv.Itoa(total)
	switch page {
	case "README.md":
		return []string{"than all " + n + " "}
	default:
		return []string{"The edge serves " + n + " tools.", "whole catalog (" + n + " tools)", "| `all` | " + n + " |"}
	}
}
