// Package temporalclient dials Temporal the one way every toolmesh process
// does: the given frontend address and namespace, slog logging, payloads
// encoded as protobuf JSON (readable in the Temporal UI), no gRPC
// compression.
package temporalclient

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	tlog "go.temporal.io/sdk/log"
)

// Config names the Temporal frontend to dial.
type Config struct {
	// HostPort is the frontend address, e.g. "127.0.0.1:7233".
	HostPort string
	// Namespace defaults to "default".
	Namespace string
	// Identity names this client in the Temporal UI (e.g. "toolmesh-worker-owner").
	Identity string
}

func (cfg Config) options(log *slog.Logger) client.Options {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	return client.Options{
		HostPort:      cfg.HostPort,
		Namespace:     cfg.Namespace,
		Identity:      cfg.Identity,
		Logger:        tlog.NewStructuredLogger(log.With("component", "temporal")),
		DataConverter: DataConverter(),
		// Payloads are small protobuf JSON on a local or cluster network:
		// gzip (the SDK's default) costs more CPU per round trip than it
		// saves, as inside the mesh.
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}},
	}
}

// NewLazy returns a client that connects on first use, for a process that
// must start (and serve what needs no Temporal) while Temporal is down; a
// call made while it is unreachable fails.
func NewLazy(cfg Config, log *slog.Logger) (client.Client, error) {
	c, err := client.NewLazyClient(cfg.options(log))
	if err != nil {
		return nil, fmt.Errorf("temporal client for %s: %w", cfg.HostPort, err)
	}
	return c, nil
}

// Dial connects to Temporal and checks the connection.
func Dial(ctx context.Context, cfg Config, log *slog.Logger) (client.Client, error) {
	c, err := client.DialContext(ctx, cfg.options(log))
	if err != nil {
		return nil, fmt.Errorf("dial temporal at %s: %w", cfg.HostPort, err)
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(hctx, &client.CheckHealthRequest{}); err != nil {
		c.Close()
		return nil, fmt.Errorf("temporal at %s is not healthy: %w", cfg.HostPort, err)
	}
	return c, nil
}

// DataConverter encodes protobuf messages as protobuf JSON (so the Temporal UI
// shows them readably) and everything else as JSON.
func DataConverter() converter.DataConverter {
	return converter.NewCompositeDataConverter(
		converter.NewNilPayloadConverter(),
		converter.NewByteSlicePayloadConverter(),
		converter.NewProtoJSONPayloadConverterWithOptions(converter.ProtoJSONPayloadConverterOptions{}),
		converter.NewProtoPayloadConverter(),
		converter.NewJSONPayloadConverter(),
	)
}
