package mcpdoor

import "encoding/json"

// decodeRequest decodes body as one JSON object of fastRequest's members
// and nothing else, or returns nil.
//
// It reads what encoding/json reads into a fastRequest with unknown fields
// refused, without reflection: body is checked to be JSON first, and then
// only walked. What encoding/json would read in a way this walk does not —
// a member named twice or in other letter case, a name, jsonrpc, method or
// tool name with an escape or a byte outside printable ASCII, a null or a
// non-string in their place — it declines (nil), and the request takes the
// SDK's path, which decodes anything. The raw members (id, arguments and
// the values in _meta) are slices of body, which must not change after.
// FuzzDecodeRequest holds it to encoding/json.
func decodeRequest(body []byte) *fastRequest {
	if !json.Valid(body) {
		return nil
	}
	w := walk{b: body}
	req := &fastRequest{}
	var seen [4]bool
	ok := w.members(func(name []byte) bool {
		switch string(name) {
		case "jsonrpc":
			req.JSONRPC = w.text("2.0")
			return first(&seen[0]) && req.JSONRPC != ""
		case "id":
			req.ID = w.value()
			return first(&seen[1])
		case "method":
			req.Method = w.text("tools/call")
			return first(&seen[2]) && req.Method != ""
		case "params":
			req.Params = w.params()
			return first(&seen[3]) && req.Params != nil
		}
		return false
	})
	if !ok {
		return nil
	}
	return req
}

// fastParams are the params of a fastRequest.
type fastParams struct {
	Name      string                     `json:"name"`
	Arguments json.RawMessage            `json:"arguments"`
	Meta      map[string]json.RawMessage `json:"_meta"`
}

// params reads a fastRequest's params object, or returns nil.
func (w *walk) params() *fastParams {
	p := &fastParams{}
	var seen [3]bool
	ok := w.members(func(name []byte) bool {
		switch string(name) {
		case "name":
			p.Name = w.text("")
			return first(&seen[0]) && p.Name != ""
		case "arguments":
			p.Arguments = w.value()
			return first(&seen[1])
		case "_meta":
			p.Meta = map[string]json.RawMessage{}
			ok := w.members(func(key []byte) bool {
				k := string(key)
				if _, twice := p.Meta[k]; twice {
					return false
				}
				p.Meta[k] = w.value()
				return true
			})
			return first(&seen[2]) && ok
		}
		return false
	})
	if !ok {
		return nil
	}
	return p
}

// walk reads JSON already known to be valid: it never checks what
// json.Valid has.
type walk struct {
	b []byte
	i int
}

func (w *walk) space() {
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// next reports whether the next byte after space is c, and consumes it
// when it is.
func (w *walk) next(c byte) bool {
	w.space()
	if w.i < len(w.b) && w.b[w.i] == c {
		w.i++
		return true
	}
	return false
}

// members calls member with the name of each member of the object that
// comes next, with w at the member's value, which member must read; it
// reports false when there is no object or member returns false.
func (w *walk) members(member func(name []byte) bool) bool {
	if !w.next('{') {
		return false
	}
	if w.next('}') {
		return true
	}
	for {
		w.space()
		name := w.plain()
		if name == nil || !w.next(':') {
			return false
		}
		w.space()
		if !member(name) {
			return false
		}
		if w.next('}') {
			return true
		}
		if !w.next(',') {
			return false
		}
	}
}

// plain reads the string that comes next when it holds only printable
// ASCII and no escape, and returns its contents (not nil, possibly
// empty); otherwise nil.
func (w *walk) plain() []byte {
	if w.i >= len(w.b) || w.b[w.i] != '"' {
		return nil
	}
	start := w.i + 1
	for j := start; j < len(w.b); j++ {
		switch c := w.b[j]; {
		case c == '"':
			w.i = j + 1
			return w.b[start:j:j]
		case c == '\\' || c < 0x20 || c > 0x7e:
			return nil
		}
	}
	return nil
}

// text reads a plain string as a Go string, "" when the value is not one;
// a value equal to common is returned without allocating.
func (w *walk) text(common string) string {
	b := w.plain()
	if b == nil {
		return ""
	}
	if string(b) == common {
		return common
	}
	return string(b)
}

// value reads the value that comes next, whatever it is, and returns its
// bytes, capped so that appending to them copies.
func (w *walk) value() json.RawMessage {
	start, depth := w.i, 0
	for w.i < len(w.b) {
		switch w.b[w.i] {
		case '"':
			w.i = stringEnd(w.b, w.i)
			if depth == 0 {
				return w.b[start:w.i:w.i]
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return w.b[start:w.i:w.i]
			}
			depth--
			if depth == 0 {
				w.i++
				return w.b[start:w.i:w.i]
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return w.b[start:w.i:w.i]
			}
		}
		w.i++
	}
	return w.b[start:w.i:w.i]
}

// stringEnd is the index just after the string that starts at b[i].
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// first marks a member seen and reports whether it was not before.
func first(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}
