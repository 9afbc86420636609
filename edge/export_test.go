package edge

import "github.com/toolmesh/toolmesh/edge/port"

// PanicAfter makes e's pipeline panic after it has run a call that when
// reports true for: the side effect is done, the answer not yet given. Set
// it before the first call.
func PanicAfter(e *Edge, when func(*port.Call) bool) { e.pipeline.panicAfter = when }
