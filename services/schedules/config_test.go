package schedules_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/services/schedules"
)

func TestConfigValidateRefusesIntervalsBelowASecond(t *testing.T) {
	ok := schedules.Config{MinInterval: schedules.DefaultMinInterval, ApprovalTimeout: schedules.DefaultApprovalTimeout}
	if err := ok.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	short := ok
	short.MinInterval = time.Millisecond
	if err := short.Validate(); err == nil || !strings.Contains(err.Error(), "shortest time between two runs") {
		t.Errorf("a 1ms interval: got %v", err)
	}
	short = ok
	short.ApprovalTimeout = 0
	if err := short.Validate(); err == nil || !strings.Contains(err.Error(), "approval timeout") {
		t.Errorf("no approval timeout: got %v", err)
	}
}
