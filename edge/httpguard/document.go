package httpguard

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// Public discovery documents (an MCP server card, the AI catalog) are
// read by any page and any crawler: CORS lets every origin read them with
// GET, an ETag lets a reader revalidate one it holds, and a client may
// cache one for an hour (the Server Card extension's recommendation).
const (
	documentCacheControl = "public, max-age=3600"
	documentAllowHeaders = "Content-Type, If-None-Match"
)

// Document is a public discovery document as served: its bytes, its media
// type, its ETag (a strong one: a digest of the bytes) and how long a
// reader may cache it.
type Document struct {
	MediaType    string
	Body         []byte
	ETag         string
	CacheControl string
}

// NewDocument is body served as mediaType, cacheable for an hour.
func NewDocument(mediaType string, body []byte) Document {
	sum := sha256.Sum256(body)
	return Document{MediaType: mediaType, Body: body, ETag: `"` + hex.EncodeToString(sum[:16]) + `"`, CacheControl: documentCacheControl}
}

// ServeDocument answers r with d: GET and HEAD get it (304 when the
// reader's If-None-Match names its ETag), OPTIONS the CORS preflight, and
// any other method 405.
func ServeDocument(w http.ResponseWriter, r *http.Request, d Document) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET")
	h.Set("Access-Control-Allow-Headers", documentAllowHeaders)
	h.Set("Access-Control-Expose-Headers", "ETag")
	switch r.Method {
	case http.MethodOptions:
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return
	case http.MethodGet, http.MethodHead:
	default:
		h.Set("Allow", "GET, HEAD, OPTIONS")
		WriteRPCError(w, http.StatusMethodNotAllowed, nil, CodeInvalidRequest, "Method Not Allowed: read this document with GET", nil)
		return
	}
	h.Set("Cache-Control", d.CacheControl)
	h.Set("ETag", d.ETag)
	h.Add("Vary", "Host")
	if etagListed(r.Header.Get("If-None-Match"), d.ETag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", d.MediaType)
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	_, _ = w.Write(d.Body)
}

// etagListed reports whether an If-None-Match header names etag (or is *);
// a weak form of it matches too (RFC 9110 §13.1.2 compares weakly).
func etagListed(header, etag string) bool {
	for _, v := range strings.Split(header, ",") {
		v = strings.TrimPrefix(strings.TrimSpace(v), "W/")
		if v == "*" || v == etag {
			return true
		}
	}
	return false
}
