// Package keyfile keeps Ed25519 key pairs in PEM files: the private key as a
// PKCS #8 "PRIVATE KEY" block (mode 0600), the public key as a PKIX "PUBLIC
// KEY" block. A public key file may hold several keys (during a rotation).
// The mesh key and the audit checkpoint key are both kept this way.
package keyfile

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Generate returns a new Ed25519 private key.
func Generate() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return priv, nil
}

// MarshalPrivate encodes key as a PKCS #8 "PRIVATE KEY" PEM block.
func MarshalPrivate(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// MarshalPublic encodes key as a PKIX "PUBLIC KEY" PEM block.
func MarshalPublic(key ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePrivate decodes a PKCS #8 PEM Ed25519 private key.
func ParsePrivate(data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, errors.New("no PRIVATE KEY PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("not a PKCS #8 private key")
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, errors.New("not an Ed25519 key")
	}
	return priv, nil
}

// ParsePublic decodes one or more PKIX PEM Ed25519 public keys.
func ParsePublic(data []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("unexpected PEM block %q", block.Type)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, errors.New("not a PKIX public key")
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, errors.New("not an Ed25519 key")
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PUBLIC KEY PEM block")
	}
	return keys, nil
}

// ReadPrivate reads the private key file at path.
func ReadPrivate(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivate(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ReadPublic reads the public key file at path.
func ReadPublic(path string) ([]ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := ParsePublic(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// Ensure creates a key pair at keyPath and pubPath unless keyPath exists;
// when only the public half is missing it is derived from the private key.
// The private key file is created with mode 0600 and never overwritten.
func Ensure(keyPath, pubPath string) (created bool, err error) {
	if _, err := os.Stat(keyPath); err == nil {
		if _, err := os.Stat(pubPath); err == nil {
			return false, nil
		}
		key, err := ReadPrivate(keyPath)
		if err != nil {
			return false, err
		}
		return false, WritePublic(pubPath, key.Public().(ed25519.PublicKey))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.MkdirAll(filepath.Dir(keyPath), 0o750); err != nil {
		return false, fmt.Errorf("create key directory: %w", err)
	}
	key, err := Generate()
	if err != nil {
		return false, err
	}
	pemKey, err := MarshalPrivate(key)
	if err != nil {
		return false, err
	}
	f, err := os.OpenFile(keyPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false, fmt.Errorf("write private key: %w", err)
	}
	if _, err := f.Write(pemKey); err != nil {
		f.Close()
		return false, fmt.Errorf("write private key: %w", err)
	}
	if err := f.Close(); err != nil {
		return false, fmt.Errorf("write private key: %w", err)
	}
	return true, WritePublic(pubPath, key.Public().(ed25519.PublicKey))
}

// WritePublic writes pub to path (mode 0644).
func WritePublic(path string, pub ed25519.PublicKey) error {
	b, err := MarshalPublic(pub)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write public key: %w", err)
	}
	return nil
}
