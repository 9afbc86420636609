package conformancesvc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	conformancev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/conformance/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// eventGap is the time between the events of a streaming fixture.
const eventGap = 50 * time.Millisecond

// LogTexts are the messages the logging fixtures log, in order.
var LogTexts = []string{"Tool execution started", "Tool processing data", "Tool execution completed"}

// ProgressSteps are the progress the progress fixture reports, of 100.
var ProgressSteps = []float64{0, 50, 100}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
}

func progress(p float64) *toolv1.CallEvent {
	return &toolv1.CallEvent{Event: &toolv1.CallEvent_Progress{Progress: &toolv1.Progress{Progress: p, Total: 100,
		Message: fmt.Sprintf("%.0f%% done", p)}}}
}

func logged(text string) *toolv1.CallEvent {
	return &toolv1.CallEvent{Event: &toolv1.CallEvent_Log{Log: &toolv1.LogMessage{Level: toolv1.LogLevel_LOG_LEVEL_INFO,
		Logger: "conformance", Data: structpb.NewStringValue(text)}}}
}

// ToolWithProgress implements ConformanceService.ToolWithProgress.
func (s *Service) ToolWithProgress(ctx context.Context, _ *conformancev1.ToolWithProgressRequest, st *connect.ServerStream[conformancev1.ToolWithProgressResponse]) error {
	for i, p := range ProgressSteps {
		if i > 0 {
			if err := pause(ctx, eventGap); err != nil {
				return err
			}
		}
		if err := st.Send(&conformancev1.ToolWithProgressResponse{Event: progress(p)}); err != nil {
			return err
		}
	}
	return st.Send(&conformancev1.ToolWithProgressResponse{Content: blocks(Text("Progress reported."))})
}

// ToolWithLogging implements ConformanceService.ToolWithLogging.
func (s *Service) ToolWithLogging(ctx context.Context, _ *conformancev1.ToolWithLoggingRequest, st *connect.ServerStream[conformancev1.ToolWithLoggingResponse]) error {
	return logThree(ctx, func(ev *toolv1.CallEvent, c []*toolv1.Content) error {
		return st.Send(&conformancev1.ToolWithLoggingResponse{Event: ev, Content: c})
	})
}

// LoggingTool implements ConformanceService.LoggingTool.
func (s *Service) LoggingTool(ctx context.Context, _ *conformancev1.LoggingToolRequest, st *connect.ServerStream[conformancev1.LoggingToolResponse]) error {
	return logThree(ctx, func(ev *toolv1.CallEvent, c []*toolv1.Content) error {
		return st.Send(&conformancev1.LoggingToolResponse{Event: ev, Content: c})
	})
}

// logThree sends the three log messages, eventGap apart, then the result.
func logThree(ctx context.Context, send func(*toolv1.CallEvent, []*toolv1.Content) error) error {
	for i, text := range LogTexts {
		if i > 0 {
			if err := pause(ctx, eventGap); err != nil {
				return err
			}
		}
		if err := send(logged(text), nil); err != nil {
			return err
		}
	}
	return send(nil, blocks(Text("Logging done.")))
}

// Elicitation implements ConformanceService.Elicitation.
func (s *Service) Elicitation(_ context.Context, req *conformancev1.ElicitationRequest) (*conformancev1.ElicitationResponse, error) {
	return &conformancev1.ElicitationResponse{Content: blocks(Text(fmt.Sprintf("Hello, %s <%s>!", req.GetUsername(), req.GetEmail())))}, nil
}

// StreamingElicitation implements ConformanceService.StreamingElicitation.
func (s *Service) StreamingElicitation(_ context.Context, req *conformancev1.StreamingElicitationRequest) (*conformancev1.StreamingElicitationResponse, error) {
	return &conformancev1.StreamingElicitationResponse{Content: blocks(Text("You answered: " + req.GetAnswer()))}, nil
}

// InputRequiredResultRequestState implements
// ConformanceService.InputRequiredResultRequestState.
func (s *Service) InputRequiredResultRequestState(_ context.Context, req *conformancev1.InputRequiredResultRequestStateRequest) (*conformancev1.InputRequiredResultRequestStateResponse, error) {
	return &conformancev1.InputRequiredResultRequestStateResponse{Content: blocks(Text(fmt.Sprintf("state-ok: ok=%t", req.GetOk())))}, nil
}

// InputRequiredResultTamperedState implements
// ConformanceService.InputRequiredResultTamperedState.
func (s *Service) InputRequiredResultTamperedState(_ context.Context, req *conformancev1.InputRequiredResultTamperedStateRequest) (*conformancev1.InputRequiredResultTamperedStateResponse, error) {
	return &conformancev1.InputRequiredResultTamperedStateResponse{Content: blocks(Text(fmt.Sprintf("ok=%t", req.GetOk())))}, nil
}

// InputRequiredResultElicitation implements
// ConformanceService.InputRequiredResultElicitation.
func (s *Service) InputRequiredResultElicitation(_ context.Context, req *conformancev1.InputRequiredResultElicitationRequest) (*conformancev1.InputRequiredResultElicitationResponse, error) {
	return &conformancev1.InputRequiredResultElicitationResponse{Content: blocks(Text("Hello, " + req.GetName() + "!"))}, nil
}

// InputRequiredResultMultiRound implements
// ConformanceService.InputRequiredResultMultiRound.
func (s *Service) InputRequiredResultMultiRound(_ context.Context, req *conformancev1.InputRequiredResultMultiRoundRequest) (*conformancev1.InputRequiredResultMultiRoundResponse, error) {
	text := "Hello, " + req.GetName() + "! Your favourite colour is " + req.GetColor() + "."
	return &conformancev1.InputRequiredResultMultiRoundResponse{Content: blocks(Text(text))}, nil
}

// Greet implements ConformanceService.Greet.
func (s *Service) Greet(_ context.Context, req *conformancev1.GreetRequest) (*conformancev1.GreetResponse, error) {
	return &conformancev1.GreetResponse{Content: blocks(Text("Hello, " + req.GetName() + "!"))}, nil
}

// SlowCompute implements ConformanceService.SlowCompute.
func (s *Service) SlowCompute(ctx context.Context, req *conformancev1.SlowComputeRequest) (*conformancev1.SlowComputeResponse, error) {
	if err := pause(ctx, time.Duration(req.GetSeconds())*time.Second); err != nil {
		return nil, err
	}
	return &conformancev1.SlowComputeResponse{Content: blocks(Text(fmt.Sprintf("Computed %q in %d s.", req.GetLabel(), req.GetSeconds())))}, nil
}

// FailingJob implements ConformanceService.FailingJob: the job fails as
// work fails, with a result the caller reads.
func (s *Service) FailingJob(context.Context, *conformancev1.FailingJobRequest) (*conformancev1.FailingJobResponse, error) {
	return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the job failed, as it always does"))
}

// ProtocolErrorJob implements ConformanceService.ProtocolErrorJob: the job
// breaks, as a fault of the system rather than of the work.
func (s *Service) ProtocolErrorJob(context.Context, *conformancev1.ProtocolErrorJobRequest) (*conformancev1.ProtocolErrorJobResponse, error) {
	return nil, connect.NewError(connect.CodeInternal, errors.New("the job broke, as it always does"))
}

// ConfirmDelete implements ConformanceService.ConfirmDelete.
func (s *Service) ConfirmDelete(_ context.Context, req *conformancev1.ConfirmDeleteRequest) (*conformancev1.ConfirmDeleteResponse, error) {
	text := "Kept " + req.GetFilename() + "."
	if req.GetConfirm() {
		text = "Deleted " + req.GetFilename() + "."
	}
	return &conformancev1.ConfirmDeleteResponse{Content: blocks(Text(text))}, nil
}

// MultiInput implements ConformanceService.MultiInput.
func (s *Service) MultiInput(_ context.Context, req *conformancev1.MultiInputRequest) (*conformancev1.MultiInputResponse, error) {
	return &conformancev1.MultiInputResponse{Content: blocks(Text(fmt.Sprintf("Both inputs received: name %q, go ahead %t.", req.GetName(), req.GetConfirm())))}, nil
}

// ToolWithTask implements ConformanceService.ToolWithTask.
func (s *Service) ToolWithTask(_ context.Context, req *conformancev1.ToolWithTaskRequest) (*conformancev1.ToolWithTaskResponse, error) {
	return &conformancev1.ToolWithTaskResponse{Content: blocks(Text("Hello, " + req.GetName() + "!"))}, nil
}

// InputRequiredResultSampling implements
// ConformanceService.InputRequiredResultSampling.
func (s *Service) InputRequiredResultSampling(_ context.Context, req *conformancev1.InputRequiredResultSamplingRequest) (*conformancev1.InputRequiredResultSamplingResponse, error) {
	return &conformancev1.InputRequiredResultSamplingResponse{Content: blocks(Text("The model answered: " + req.GetAnswer()))}, nil
}

// InputRequiredResultListRoots implements
// ConformanceService.InputRequiredResultListRoots.
func (s *Service) InputRequiredResultListRoots(_ context.Context, req *conformancev1.InputRequiredResultListRootsRequest) (*conformancev1.InputRequiredResultListRootsResponse, error) {
	return &conformancev1.InputRequiredResultListRootsResponse{Content: blocks(Text("Roots: " + strings.Join(req.GetRoots(), ", ")))}, nil
}

// InputRequiredResultMultipleInputs implements
// ConformanceService.InputRequiredResultMultipleInputs.
func (s *Service) InputRequiredResultMultipleInputs(_ context.Context, req *conformancev1.InputRequiredResultMultipleInputsRequest) (*conformancev1.InputRequiredResultMultipleInputsResponse, error) {
	text := fmt.Sprintf("Name: %s. Greeting: %s. Roots: %s.", req.GetName(), req.GetGreeting(), strings.Join(req.GetRoots(), ", "))
	return &conformancev1.InputRequiredResultMultipleInputsResponse{Content: blocks(Text(text))}, nil
}

// InputRequiredResultCapabilities implements
// ConformanceService.InputRequiredResultCapabilities.
func (s *Service) InputRequiredResultCapabilities(_ context.Context, req *conformancev1.InputRequiredResultCapabilitiesRequest) (*conformancev1.InputRequiredResultCapabilitiesResponse, error) {
	text := fmt.Sprintf("Name: %q. Greeting: %s.", req.GetName(), req.GetGreeting())
	return &conformancev1.InputRequiredResultCapabilitiesResponse{Content: blocks(Text(text))}, nil
}

// Sampling implements ConformanceService.Sampling.
func (s *Service) Sampling(_ context.Context, req *conformancev1.SamplingRequest) (*conformancev1.SamplingResponse, error) {
	return &conformancev1.SamplingResponse{Content: blocks(Text("LLM response: " + req.GetResponse()))}, nil
}

// MissingCapability implements ConformanceService.MissingCapability.
func (s *Service) MissingCapability(_ context.Context, req *conformancev1.MissingCapabilityRequest) (*conformancev1.MissingCapabilityResponse, error) {
	return &conformancev1.MissingCapabilityResponse{Content: blocks(Text("The client's model answered: " + req.GetResponse()))}, nil
}

// ElicitationDefaults implements ConformanceService.ElicitationDefaults.
func (s *Service) ElicitationDefaults(_ context.Context, req *conformancev1.ElicitationDefaultsRequest) (*conformancev1.ElicitationDefaultsResponse, error) {
	text := fmt.Sprintf("Elicitation completed: action=accept, content={name: %q, age: %d, score: %g, status: %q, verified: %t}",
		req.GetName(), req.GetAge(), req.GetScore(), req.GetStatus(), req.GetVerified())
	return &conformancev1.ElicitationDefaultsResponse{Content: blocks(Text(text))}, nil
}

// ElicitationEnums implements ConformanceService.ElicitationEnums.
func (s *Service) ElicitationEnums(_ context.Context, req *conformancev1.ElicitationEnumsRequest) (*conformancev1.ElicitationEnumsResponse, error) {
	text := fmt.Sprintf("Elicitation completed: action=accept, content={untitledSingle: %q, titledSingle: %q, legacyEnum: %q, untitledMulti: %q, titledMulti: %q}",
		req.GetUntitledSingle(), req.GetTitledSingle(), req.GetLegacyEnum(), req.GetUntitledMulti(), req.GetTitledMulti())
	return &conformancev1.ElicitationEnumsResponse{Content: blocks(Text(text))}, nil
}
