package projects_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/services/projects"
)

func TestConfigValidateNamesTheLimitOutOfRange(t *testing.T) {
	valid := func() projects.Config {
		return projects.Config{
			HealthInterval: projects.DefaultHealthInterval,
			Limits: projects.Limits{MaxFiles: projects.DefaultMaxFiles, MaxFileBytes: projects.DefaultMaxFileBytes,
				Timeout: projects.DefaultIndexTimeout},
			Git: &projects.Git{Timeout: projects.DefaultCloneTimeout, MaxBytes: projects.DefaultCloneMaxBytes},
		}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for name, tc := range map[string]struct {
		change func(*projects.Config)
		want   string
	}{
		"health interval": {func(c *projects.Config) { c.HealthInterval = time.Millisecond }, "health interval"},
		"index timeout":   {func(c *projects.Config) { c.Limits.Timeout = 0 }, "index timeout"},
		"max files":       {func(c *projects.Config) { c.Limits.MaxFiles = 0 }, "most files indexed"},
		"max file bytes":  {func(c *projects.Config) { c.Limits.MaxFileBytes = -1 }, "largest file indexed"},
		"clone timeout":   {func(c *projects.Config) { c.Git.Timeout = time.Millisecond }, "clone timeout"},
		"clone bytes":     {func(c *projects.Config) { c.Git.MaxBytes = 0 }, "largest clone"},
	} {
		c := valid()
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a refusal naming %q", name, err, tc.want)
		}
	}
}
