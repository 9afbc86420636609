package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioAnswerTimeout bounds writing the answers of calls cut short when a
// stdio edge stops.
const stdioAnswerTimeout = 5 * time.Second

// serveStdio runs the MCP session over in and out. When ctx ends it stops
// as the edge's shutdown does (stop): the calls in flight are answered,
// then the session is closed. Closing a session refuses the writes still pending, so the edge
// first waits until every call it read has its answer written, counting
// the JSON-RPC messages that pass through in and out.
func (d *Door) serveStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser, shutdown func(context.Context) error, grace time.Duration) error {
	answers := d.cfg.Answers
	in = &lineCounter{ReadCloser: in, count: func(calls, _ int) { answers.Add(int64(calls)) }}
	out = &lineCounter{WriteCloser: out, count: func(_, responses int) { answers.Add(-int64(responses)) }}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-runCtx.Done(): // the client went away
			return
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), grace+stdioAnswerTimeout)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			d.log.Warn("edge.shutdown_incomplete", "error", err)
		}
		stop()
	}()
	err := d.server.Run(runCtx, &mcp.IOTransport{Reader: in, Writer: out})
	stop()
	<-stopped
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		// Stopped, or the client went away: how the session ended does not
		// matter.
		return nil
	}
	return err
}

// lineCounter passes newline-delimited JSON-RPC through (as a reader or a
// writer) and reports, per complete line, the calls (requests with an id)
// and the responses it carried.
type lineCounter struct {
	io.ReadCloser
	io.WriteCloser
	count   func(calls, responses int)
	partial []byte
}

// maxCountedLine bounds the part of a line kept to count it.
const maxCountedLine = 4 << 20

func (l *lineCounter) Read(p []byte) (int, error) {
	n, err := l.ReadCloser.Read(p)
	l.feed(p[:n])
	return n, err
}

func (l *lineCounter) Write(p []byte) (int, error) {
	n, err := l.WriteCloser.Write(p)
	l.feed(p[:n])
	return n, err
}

func (l *lineCounter) Close() error {
	if l.ReadCloser != nil {
		return l.ReadCloser.Close()
	}
	return l.WriteCloser.Close()
}

func (l *lineCounter) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(l.partial)+len(p) <= maxCountedLine {
				l.partial = append(l.partial, p...)
			}
			return
		}
		line := p[:i]
		if len(l.partial) > 0 {
			line = append(l.partial, line...)
		}
		l.count(countMessages(line))
		l.partial = l.partial[:0]
		p = p[i+1:]
	}
}

// countMessages counts the calls and the responses in one line: a message
// or a batch of them.
func countMessages(line []byte) (calls, responses int) {
	line = bytes.TrimSpace(line)
	msgs := []json.RawMessage{line}
	if len(line) > 0 && line[0] == '[' && json.Unmarshal(line, &msgs) != nil {
		return 0, 0
	}
	for _, m := range msgs {
		var h struct {
			ID     json.RawMessage `json:"id"`
			Method *string         `json:"method"`
		}
		if json.Unmarshal(m, &h) != nil || len(h.ID) == 0 || string(h.ID) == "null" {
			continue
		}
		if h.Method != nil {
			calls++
		} else {
			responses++
		}
	}
	return calls, responses
}
