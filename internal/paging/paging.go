// Package paging is the one way list RPCs page their results: offset and
// limit in the request, a toolmesh.page.v1.Page in the response.
package paging

import pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"

// DefaultLimit is the page size when a request gives none (limit 0).
const DefaultLimit = 50

// Limit returns the page size to apply for a requested limit.
func Limit(requested int32) int {
	if requested <= 0 {
		return DefaultLimit
	}
	return int(requested)
}

// New describes the page at offset/limit of a result set of total items.
func New(offset, limit, total int) *pagev1.Page {
	p := &pagev1.Page{Offset: int32(offset), Limit: int32(limit), Total: int32(total)}
	if next := offset + limit; next < total {
		n := int32(next)
		p.NextOffset = &n
	}
	return p
}
