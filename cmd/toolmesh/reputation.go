package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/cmd/internal/config"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	"github.com/toolmesh/toolmesh/services/reputation"
	"github.com/toolmesh/toolmesh/services/reputation/reputationstore"
)

// reputationPublicURLEnv is the reputation service's base URL as other
// meshes reach its public attestations.
const reputationPublicURLEnv = "TOOLMESH_REPUTATION_PUBLIC_URL"

// reputationOptions binds what the reputation service signs with and where
// it publishes. Attestations are signed with the mesh key and name the A2A
// endpoint (TOOLMESH_A2A_URL, the edge's setting) as their issuer, since
// that is where the key's public half is published; remote cards are
// reached as remoteagents reaches them (TOOLMESH_REMOTEAGENTS_EGRESS_ALLOW).
func reputationOptions(s *config.Set) buildFunc {
	var keyPath, publicURL string
	cli.BindMeshKey(s, &keyPath, "mesh private key file that signs attestations (the key the A2A endpoint publishes)")
	s.String(&publicURL, "", config.Opt{Flag: "public-url", Env: reputationPublicURLEnv,
		Usage: "this service's base URL as other meshes reach it: attestations are published below it at " + reputation.PublicPath + "<agent> (none when empty)"})
	return func(ctx context.Context, db *sqldb.DB, deps serveDeps) ([]server.Service, error) {
		policy, err := cli.EgressPolicy(deps.Getenv, cli.RemoteEgressAllowEnv, deps.Log)
		if err != nil {
			return nil, err
		}
		st, err := reputationstore.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		cfg := reputation.Config{
			// It reads the trail as its caller: no key of its own for that.
			Audit:     meshclient.New(meshclient.Config{}, auditv1connect.NewAuditServiceClient, deps.Services[auditv1connect.AuditServiceName]),
			PublicURL: publicURL,
			Egress:    policy,
			Log:       deps.Log,
		}
		issuer := deps.Getenv(cli.A2AURLEnv)
		keyPath = cli.OrDataFile(keyPath, deps.DataDir, cli.MeshKeyFile)
		switch key, err := cli.ReadMeshKey(keyPath); {
		case issuer == "":
			deps.Log.Warn("reputation.no_issuer", "message", "attestations are not issued: set "+cli.A2AURLEnv+" to the edge's A2A URL, where the mesh key is published")
		case errors.Is(err, fs.ErrNotExist):
			deps.Log.Warn("reputation.no_key", "message", "attestations are not issued: no mesh key at "+keyPath)
		case err != nil:
			return nil, err
		default:
			if cfg.Signer, err = reputation.NewSigner(key, issuer); err != nil {
				return nil, fmt.Errorf("%s: %w", cli.A2AURLEnv, err)
			}
		}
		return []server.Service{reputation.New(st, cfg).Registration()}, nil
	}
}
