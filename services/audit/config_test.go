package audit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/services/audit"
)

func TestConfigValidateRefusesACheckpointIntervalBelowASecond(t *testing.T) {
	if err := (audit.Config{CheckpointInterval: audit.DefaultCheckpointInterval}).Validate(); err != nil {
		t.Fatalf("the default interval: %v", err)
	}
	err := (audit.Config{CheckpointInterval: 500 * time.Millisecond}).Validate()
	if err == nil || !strings.Contains(err.Error(), "checkpoint interval must be at least 1s") {
		t.Fatalf("500ms: got %v, want a refusal naming the range", err)
	}
}
