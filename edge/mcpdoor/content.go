package mcpdoor

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// What a tool shows besides its data, and what it reports while it runs,
// as MCP has them. A tool whose contract names a content field
// (toolmesh.tool.v1 Content) answers content blocks: text, images, audio,
// embedded resources. A tool call's result carries them before the
// envelope, a resource read is them, and a prompt can hand them to the
// model. A tool whose RPC streams reports events (toolmesh.tool.v1
// CallEvent) while it runs: its progress and log messages, passed on as
// notifications to a client that asked for them.

// mimeText is the MIME type of a text block read as a resource.
const mimeText = "text/plain"

// blocksOf splits a successful envelope of t into its content blocks and
// the envelope without them; env as it is, and no blocks, when t answers
// none.
func blocksOf(t *toolcatalog.Tool, env *toolcall.Envelope) ([]*toolv1.Content, *toolcall.Envelope) {
	if t.ContentField == nil || env.IsError() {
		return nil, env
	}
	var data map[string]json.RawMessage
	if json.Unmarshal(env.Data, &data) != nil {
		return nil, env
	}
	name := string(t.ContentField.Name())
	var raws []json.RawMessage
	if json.Unmarshal(orNull(data[name]), &raws) != nil {
		return nil, env
	}
	blocks := make([]*toolv1.Content, 0, len(raws))
	for _, raw := range raws {
		b := &toolv1.Content{}
		if protojson.Unmarshal(raw, b) != nil {
			return nil, env
		}
		blocks = append(blocks, b)
	}
	delete(data, name)
	rest, err := json.Marshal(data)
	if err != nil {
		return nil, env
	}
	out := *env
	out.Data = rest
	return blocks, &out
}

// toolResult renders an envelope of t as a tool result: t's content blocks,
// then the envelope as text and as structuredContent.
func toolResult(t *toolcatalog.Tool, env *toolcall.Envelope) *mcp.CallToolResult {
	blocks, env := blocksOf(t, env)
	res := result(env)
	if len(blocks) == 0 {
		return res
	}
	content := make([]mcp.Content, 0, len(blocks)+1)
	for _, b := range blocks {
		if c := mcpContent(b); c != nil {
			content = append(content, c)
		}
	}
	res.Content = append(content, res.Content...)
	return res
}

// mcpContent is a block as MCP content (nil for an empty block).
func mcpContent(b *toolv1.Content) mcp.Content {
	switch x := b.GetBlock().(type) {
	case *toolv1.Content_Text:
		return &mcp.TextContent{Text: x.Text}
	case *toolv1.Content_Image:
		return &mcp.ImageContent{Data: x.Image.GetData(), MIMEType: x.Image.GetMimeType()}
	case *toolv1.Content_Audio:
		return &mcp.AudioContent{Data: x.Audio.GetData(), MIMEType: x.Audio.GetMimeType()}
	case *toolv1.Content_Resource:
		return &mcp.EmbeddedResource{Resource: embeddedContents(x.Resource)}
	}
	return nil
}

func embeddedContents(r *toolv1.EmbeddedResource) *mcp.ResourceContents {
	c := &mcp.ResourceContents{URI: r.GetUri(), MIMEType: r.GetMimeType()}
	switch x := r.GetContents().(type) {
	case *toolv1.EmbeddedResource_Text:
		c.Text = x.Text
	case *toolv1.EmbeddedResource_Blob:
		c.Blob = x.Blob
	}
	return c
}

// readContents is a block as the contents of the resource uri: an embedded
// resource as itself, media as a blob, text as plain text (nil for an
// empty block).
func readContents(uri string, b *toolv1.Content) *mcp.ResourceContents {
	switch x := b.GetBlock().(type) {
	case *toolv1.Content_Text:
		return &mcp.ResourceContents{URI: uri, MIMEType: mimeText, Text: x.Text}
	case *toolv1.Content_Image:
		return &mcp.ResourceContents{URI: uri, MIMEType: x.Image.GetMimeType(), Blob: x.Image.GetData()}
	case *toolv1.Content_Audio:
		return &mcp.ResourceContents{URI: uri, MIMEType: x.Audio.GetMimeType(), Blob: x.Audio.GetData()}
	case *toolv1.Content_Resource:
		return embeddedContents(x.Resource)
	}
	return nil
}

// events passes what a streaming tool reports on to the client of req:
// progress as progress notifications when the call carries a progress
// token, log messages as log notifications, which the session sends when
// they reach the level its client set (for the session, or on the request
// at 2026-07-28).
type events struct {
	ctx   context.Context
	req   *mcp.CallToolRequest
	token any
}

// eventsOf is the events sink of req's call; nil when it has no session
// to notify.
func eventsOf(ctx context.Context, req *mcp.CallToolRequest) toolcall.Events {
	if req.Session == nil {
		return nil
	}
	e := &events{ctx: ctx, req: req, token: req.Params.GetProgressToken()}
	return e.event
}

func (e *events) event(ev *toolv1.CallEvent) {
	switch x := ev.GetEvent().(type) {
	case *toolv1.CallEvent_Progress:
		if e.token == nil {
			return
		}
		_ = e.req.Session.NotifyProgress(e.ctx, &mcp.ProgressNotificationParams{ProgressToken: e.token,
			Progress: x.Progress.GetProgress(), Total: x.Progress.GetTotal(), Message: x.Progress.GetMessage()})
	case *toolv1.CallEvent_Log:
		var data any = x.Log.GetData().AsInterface()
		if x.Log.GetData() == nil {
			data = structpb.NewNullValue().AsInterface()
		}
		//lint:ignore SA1019 MCP logging is deprecated from 2026-07-28 on; a client that sets a log level still gets the messages a tool logs
		_ = e.req.Session.Log(e.ctx, &mcp.LoggingMessageParams{Level: logLevels[x.Log.GetLevel()], Logger: x.Log.GetLogger(), Data: data})
	}
}

// logLevels are the MCP log levels of the contract's.
//
//lint:ignore SA1019 MCP logging is deprecated from 2026-07-28 on; clients that set a log level still get a tool's messages
var logLevels = map[toolv1.LogLevel]mcp.LoggingLevel{
	toolv1.LogLevel_LOG_LEVEL_UNSPECIFIED: "info",
	toolv1.LogLevel_LOG_LEVEL_DEBUG:       "debug",
	toolv1.LogLevel_LOG_LEVEL_INFO:        "info",
	toolv1.LogLevel_LOG_LEVEL_NOTICE:      "notice",
	toolv1.LogLevel_LOG_LEVEL_WARNING:     "warning",
	toolv1.LogLevel_LOG_LEVEL_ERROR:       "error",
	toolv1.LogLevel_LOG_LEVEL_CRITICAL:    "critical",
	toolv1.LogLevel_LOG_LEVEL_ALERT:       "alert",
	toolv1.LogLevel_LOG_LEVEL_EMERGENCY:   "emergency",
}
