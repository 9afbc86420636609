package tasks_test

import (
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/services/tasks"
)

func TestConfigValidateRefusesADailyLimitBelowOne(t *testing.T) {
	if err := (tasks.Config{MaxPerDay: tasks.DefaultMaxPerDay}).Validate(); err != nil {
		t.Fatalf("the default limit: %v", err)
	}
	for _, n := range []int{0, -3} {
		err := (tasks.Config{MaxPerDay: n}).Validate()
		if err == nil || !strings.Contains(err.Error(), "at least 1") {
			t.Errorf("MaxPerDay %d: got %v, want a refusal naming the range", n, err)
		}
	}
}
