package workflowtest

import (
	"time"

	"github.com/stretchr/testify/mock"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
)

// NewEnv is a test workflow environment (time skipping, mocked
// activities) that converts data as the workers do
// (temporalclient.DataConverter) and keeps the SDK's debug log quiet.
func NewEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(sdklog.NewStructuredLogger(logging.Discard()))
	env := s.NewTestWorkflowEnvironment()
	env.SetDataConverter(temporalclient.DataConverter())
	// The SDK fails a workflow task that runs for over a second without
	// yielding (a "potential deadlock"). Under the race detector on a
	// loaded machine a task that yields at once can take that long, so the
	// tests would fail on the machine's load; a workflow that really never
	// yields still fails, after this longer bound.
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: deadlockDetectionTimeout})
	return env
}

// OnStatus calls record with every ToolmeshStatus search attribute the
// workflows under env upsert, in order (the status operators find runs by
// in the Temporal UI).
func OnStatus(env *testsuite.TestWorkflowEnvironment, record func(status string)) {
	key := temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus)
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa, _ := args.Get(0).(temporal.SearchAttributes)
		if v, ok := sa.GetKeyword(key); ok {
			record(v)
		}
	}).Return(nil)
}

// deadlockDetectionTimeout is how long a workflow task may run without
// yielding in the tests before the SDK calls it a deadlock.
const deadlockDetectionTimeout = 30 * time.Second
