package workflows_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/services/workflows"
)

func TestConfigValidateKeepsTheLimitsInRange(t *testing.T) {
	valid := func() workflows.Config {
		return workflows.Config{MaxNodes: workflows.DefaultMaxNodes, MaxParallel: workflows.DefaultMaxParallel,
			RunTimeout: workflows.DefaultRunTimeout, MaxRunDuration: workflows.DefaultMaxRunDuration}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for name, tc := range map[string]struct {
		change func(*workflows.Config)
		want   string
	}{
		"one node":         {func(c *workflows.Config) { c.MaxNodes = 1 }, "2 to 200"},
		"too many nodes":   {func(c *workflows.Config) { c.MaxNodes = workflows.MaxNodesLimit + 1 }, "2 to 200"},
		"one branch":       {func(c *workflows.Config) { c.MaxParallel = 1 }, "at least 2"},
		"short run":        {func(c *workflows.Config) { c.RunTimeout = 5 * time.Second }, "at least 10s"},
		"run past longest": {func(c *workflows.Config) { c.RunTimeout = c.MaxRunDuration + time.Hour }, "longer than the longest run"},
	} {
		c := valid()
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a refusal naming %q", name, err, tc.want)
		}
	}
}

func TestNewRefusesLimitsOutOfRange(t *testing.T) {
	_, err := workflows.New(nil, nil, workflows.Config{MaxNodes: workflows.MaxNodesLimit + 1})
	if err == nil || !strings.Contains(err.Error(), "2 to 200") {
		t.Fatalf("got %v, want the node limit refused", err)
	}
}
