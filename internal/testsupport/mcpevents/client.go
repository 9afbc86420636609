// Package mcpevents is a small client of MCP events
// (io.modelcontextprotocol/events) over the stateless 2026-07-28 wire: it
// lists event types and polls one type from a cursor. The tests and the
// chaos workload poll the edge with it; no published MCP client polls yet.
//
//	c := &mcpevents.Client{URL: "http://127.0.0.1:7100/mcp"}
//	res, err := c.Poll(ctx, mcpevents.PollParams{Name: "ask.answered"}) // from now
//	res, err = c.Poll(ctx, mcpevents.PollParams{Name: "ask.answered", Cursor: &res.Cursor})
package mcpevents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Version is the protocol version the client speaks.
const Version = "2026-07-28"

// Client sends event requests to one MCP endpoint.
type Client struct {
	// URL is the MCP endpoint.
	URL string
	// HTTP sends the requests; http.DefaultClient when nil.
	HTTP *http.Client
	// Header is added to every request (Authorization, a toolset
	// selection).
	Header http.Header
}

// Error is a JSON-RPC error the server answered.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("MCP error %d: %s", e.Code, e.Message) }

// Type is an event type as events/list shows it.
type Type struct {
	Name          string          `json:"name"`
	Description   string          `json:"description"`
	Delivery      []string        `json:"delivery"`
	InputSchema   json.RawMessage `json:"inputSchema"`
	PayloadSchema json.RawMessage `json:"payloadSchema"`
}

// List returns every event type the caller may see, page after page.
func (c *Client) List(ctx context.Context) ([]Type, error) {
	var all []Type
	var cursor *string
	for {
		var page struct {
			Events     []Type `json:"events"`
			NextCursor string `json:"nextCursor"`
		}
		params := map[string]any{}
		if cursor != nil {
			params["cursor"] = *cursor
		}
		if err := c.Call(ctx, "events/list", params, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Events...)
		if page.NextCursor == "" {
			return all, nil
		}
		cursor = &page.NextCursor
	}
}

// PollParams are one poll's.
type PollParams struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
	// Cursor is where the last poll ended; nil starts from now.
	Cursor    *string `json:"cursor"`
	MaxAgeMs  int64   `json:"maxAgeMs,omitempty"`
	MaxEvents int     `json:"maxEvents,omitempty"`
}

// Occurrence is one event.
type Occurrence struct {
	EventID   string          `json:"eventId"`
	Name      string          `json:"name"`
	Timestamp string          `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
	Cursor    *string         `json:"cursor"`
}

// PollResult is what a poll answers.
type PollResult struct {
	Events     []Occurrence `json:"events"`
	Cursor     string       `json:"cursor"`
	Truncated  bool         `json:"truncated"`
	HasMore    bool         `json:"hasMore"`
	NextPollMs int64        `json:"nextPollMs"`
}

// Poll polls once.
func (c *Client) Poll(ctx context.Context, p PollParams) (*PollResult, error) {
	if p.Arguments == nil {
		p.Arguments = map[string]any{}
	}
	var out PollResult
	if err := c.Call(ctx, "events/poll", p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Call sends one stateless request and decodes its result into out; a
// JSON-RPC error is an *Error.
func (c *Client) Call(ctx context.Context, method string, params, out any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		return err
	}
	p["_meta"] = map[string]any{
		"io.modelcontextprotocol/protocolVersion":    Version,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"extensions": map[string]any{"io.modelcontextprotocol/events": map[string]any{}}},
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": p})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", Version)
	req.Header.Set("Mcp-Method", method)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	// The answer is JSON, or the last data line of an SSE stream.
	var last []byte
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			last = append(last[:0], data...)
		} else if bytes.HasPrefix(bytes.TrimSpace(line), []byte("{")) {
			last = append(last[:0], line...)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: read the answer: %w", method, err)
	}
	var reply struct {
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if err := json.Unmarshal(last, &reply); err != nil {
		return fmt.Errorf("%s: answer %q (%s): %w", method, last, res.Status, err)
	}
	if reply.Error != nil {
		return reply.Error
	}
	return json.Unmarshal(reply.Result, out)
}

// Delivery is where a subscription delivers.
type Delivery struct {
	Mode   string `json:"mode,omitempty"`
	URL    string `json:"url"`
	Secret string `json:"secret,omitempty"`
}

// SubscribeParams are a webhook subscription's.
type SubscribeParams struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
	Delivery  Delivery       `json:"delivery"`
	// Cursor is where deliveries start; nil starts from now.
	Cursor *string `json:"cursor"`
	// TTLMs is the TTL asked for; nil is the server's default.
	TTLMs *int64 `json:"ttlMs,omitempty"`
}

// SubscribeResult is what events/subscribe answers.
type SubscribeResult struct {
	ID             string  `json:"id"`
	RefreshBefore  *string `json:"refreshBefore"`
	Cursor         string  `json:"cursor"`
	Truncated      bool    `json:"truncated"`
	DeliveryStatus *struct {
		Active    bool    `json:"active"`
		LastError *string `json:"lastError"`
	} `json:"deliveryStatus"`
}

// Subscribe subscribes (or refreshes a subscription) by webhook.
func (c *Client) Subscribe(ctx context.Context, p SubscribeParams) (*SubscribeResult, error) {
	if p.Arguments == nil {
		p.Arguments = map[string]any{}
	}
	if p.Delivery.Mode == "" {
		p.Delivery.Mode = "webhook"
	}
	var out SubscribeResult
	if err := c.Call(ctx, "events/subscribe", p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Unsubscribe ends the subscription of (name, arguments, url).
func (c *Client) Unsubscribe(ctx context.Context, name string, arguments map[string]any, url string) error {
	if arguments == nil {
		arguments = map[string]any{}
	}
	var out struct{}
	return c.Call(ctx, "events/unsubscribe", map[string]any{"name": name, "arguments": arguments, "delivery": map[string]any{"url": url}}, &out)
}
