package cli

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/requeststate"
)

func ReadMeshKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read mesh key (create one with `toolmesh keygen`): %w", err)
	}
	return mesh.ParsePrivateKey(b)
}

func ReadMeshVerifier(path string) (*mesh.Verifier, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read mesh public key (create one with `toolmesh keygen`): %w", err)
	}
	keys, err := mesh.ParsePublicKeys(b)
	if err != nil {
		return nil, err
	}
	return mesh.NewVerifier(keys...), nil
}

// ReadStateSealer reads the current request state key and, when the file
// exists, the previous one.
func ReadStateSealer(currentPath, previousPath string) (*requeststate.Sealer, error) {
	keys, err := ReadStateKeys(currentPath, previousPath)
	if err != nil {
		return nil, err
	}
	return requeststate.NewSealer(keys[0], keys[1:]...)
}

// ReadStateKeys reads the current request state key and, when the file
// exists, the previous one: the current first.
func ReadStateKeys(currentPath, previousPath string) ([]requeststate.Key, error) {
	b, err := os.ReadFile(currentPath)
	if err != nil {
		return nil, fmt.Errorf("read request state key (create one with `toolmesh keygen`): %w", err)
	}
	current, err := requeststate.ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", currentPath, err)
	}
	keys := []requeststate.Key{current}
	if previousPath != "" {
		b, err := os.ReadFile(previousPath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("read previous request state key: %w", err)
		default:
			k, err := requeststate.ParseKey(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", previousPath, err)
			}
			keys = append(keys, k)
		}
	}
	return keys, nil
}
