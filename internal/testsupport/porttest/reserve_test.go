package porttest

import "testing"

// A reservation excludes every other holder, in this process too, until it
// is released.
func TestReserveExcludesUntilReleased(t *testing.T) {
	dir := t.TempDir()
	release, ok := reserve(dir, "12300")
	if !ok {
		t.Fatal("reserve a fresh offset: refused")
	}
	if r, ok := reserve(dir, "12300"); ok {
		r()
		t.Fatal("reserve offset 12300 again while it is held: granted")
	}
	release()
	again, ok := reserve(dir, "12300")
	if !ok {
		t.Fatal("reserve offset 12300 after its release: refused")
	}
	again()
}
