package archtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedBytes is the largest file the repository may track. Build
// output, downloaded tools and recorded data past it belong in .gitignore'd
// directories (bin/, .build/) or are produced by a make target.
const maxTrackedBytes = 1 << 20

// binaryMagic are the first bytes of executables: ELF, Mach-O (32 and 64
// bit, both byte orders, and universal), PE/COFF, and WebAssembly.
var binaryMagic = [][]byte{
	[]byte("\x7fELF"),
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{0xca, 0xfe, 0xba, 0xbe},
	[]byte("MZ"),
	[]byte("\x00asm"),
}

// TestNoLargeFileOrBinaryIsTracked keeps built binaries and large blobs out
// of git: a file over 1 MiB, or one that starts like an executable, fails.
func TestNoLargeFileOrBinaryIsTracked(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	checked := 0
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		path := filepath.Join(dir, name)
		info, err := os.Lstat(path)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink
		}
		checked++
		if info.Size() > maxTrackedBytes {
			t.Errorf("%s is tracked and has %d bytes, over %d: keep it out of git (build it, or ignore it)", name, info.Size(), maxTrackedBytes)
		}
		head := make([]byte, 4)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := f.Read(head)
		f.Close()
		for _, magic := range binaryMagic {
			if n >= len(magic) && bytes.Equal(head[:len(magic)], magic) {
				t.Errorf("%s is tracked and is an executable binary: remove it and ignore it", name)
				break
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d tracked files; git ls-files missed the tree", checked)
	}
}
