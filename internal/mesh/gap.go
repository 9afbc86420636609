package mesh

import (
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// A capability gap is a service that exists and answers but lacks what a call
// needs (a channel that is not configured, a feature its store does not
// have). The service says so with NewCapabilityGapError; the edge turns it
// into a capability_gap envelope naming the gap, instead of a generic
// failure.
const (
	errorDomain         = "toolmesh"
	reasonCapabilityGap = "CAPABILITY_GAP"
	metadataGap         = "gap"
)

// NewCapabilityGapError returns a FailedPrecondition error that names the
// missing capability (a short identifier, e.g. "notify.webhook_channel") and
// says what to do about it in err.
func NewCapabilityGapError(gap string, err error) *connect.Error {
	cerr := connect.NewError(connect.CodeFailedPrecondition, err)
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{
		Reason:   reasonCapabilityGap,
		Domain:   errorDomain,
		Metadata: map[string]string{metadataGap: gap},
	}); derr == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

// CapabilityGap reports the gap a service named with NewCapabilityGapError.
func CapabilityGap(err error) (gap string, ok bool) {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return "", false
	}
	for _, d := range cerr.Details() {
		m, derr := d.Value()
		if derr != nil {
			continue
		}
		if info, isInfo := m.(*errdetails.ErrorInfo); isInfo && info.GetDomain() == errorDomain && info.GetReason() == reasonCapabilityGap {
			return info.GetMetadata()[metadataGap], true
		}
	}
	return "", false
}
