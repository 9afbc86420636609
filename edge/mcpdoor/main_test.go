package mcpdoor_test

import (
	"os"
	"testing"

	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// The door's black-box tests build the edge through edge.New
// (edgetest.NewFixture) and speak MCP to it.
func TestMain(m *testing.M) { os.Exit(edgetest.RunTests(m, os.Getenv)) }
