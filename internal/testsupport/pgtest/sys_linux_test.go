package pgtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCanReachNeedsSearchableParents(t *testing.T) {
	other := &account{uid: os.Getuid() + 1000, gid: os.Getgid() + 1000}
	private := filepath.Join(t.TempDir(), "private")
	dir := filepath.Join(private, "tmp")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := other.canReach(dir); err == nil || !strings.Contains(err.Error(), private) {
		t.Errorf("canReach(%s) = %v, want an error naming %s", dir, err, private)
	}
	// t.TempDir's own directories are private too.
	for d := private; d != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.canReach(dir); err != nil {
		t.Errorf("canReach(%s) with searchable parents: %v", dir, err)
	}
}
