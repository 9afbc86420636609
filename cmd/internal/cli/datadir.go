package cli

import "path/filepath"

// The data directory (--data, default .toolmesh) holds the mesh's local
// state: the SQLite file of each domain, the keys, the audit checkpoint log,
// the Temporal dev server's database and log. Every file in it is named here
// and found by DataFile, the one place a path in it is made.

// Mesh key files under the data directory. The private key signs mesh
// tokens (edge, workers, `toolmesh token`); services only ever read the
// public key.
const (
	MeshKeyFile    = "mesh.key"
	MeshPubKeyFile = "mesh.pub"
)

// Audit key files under the data directory. The private key is the audit
// service's own: it signs the audit trail's checkpoints. The public key is
// what `toolmesh audit verify` and anyone checking a shipped checkpoint log
// are given.
const (
	AuditKeyFile    = "audit.key"
	AuditPubKeyFile = "audit.pub"
	// AuditCheckpointLogFile is where `serve audit` appends the checkpoints
	// it signs, and where `toolmesh audit verify` reads them by default.
	AuditCheckpointLogFile = "audit-checkpoints.log"
)

// Request state key files under the data directory (multi-round
// elicitation): the current key seals and verifies, the previous one only
// verifies, so a rotation does not refuse the calls in flight.
const (
	StateKeyFile         = "state.key"
	StatePreviousKeyFile = "state.previous.key"
)

// ConnectionsKeyringFile holds the key-encryption keys that seal the
// connections' upstream tokens (`serve connections`); toolmesh keygen
// creates it with one key.
const ConnectionsKeyringFile = "connections.keyring"

// DBFile is the SQLite file of domain, the default DSN of `serve <domain>`.
func DBFile(domain string) string { return domain + ".db" }

// DataFile is the path of the file name in the data directory dir.
func DataFile(dir, name string) string { return filepath.Join(dir, name) }

// OrDataFile is path, or, when it is empty (its flag left to the default),
// the file name in the data directory dir.
func OrDataFile(path, dir, name string) string {
	if path != "" {
		return path
	}
	return DataFile(dir, name)
}
