package benchmesh

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dropFromPageCache writes the file at path to disk and drops its pages
// from the page cache, so that a process started from it maps the binary
// as one read from disk does (an installed or deployed binary), not as the
// linker left it. On kernels whose page cache keeps a file's written pages
// in large folios (ext4 since Linux 6.16), a process maps a whole folio
// around each page it touches: an edge started from a binary linked a
// moment ago has 72.6 MB of it resident, against 46 MB once the pages
// come from disk, for the same code run (docs/performance.md).
func dropFromPageCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("drop %s from the page cache: %w", path, err)
	}
	return nil
}
