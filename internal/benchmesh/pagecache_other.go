//go:build !linux

package benchmesh

// dropFromPageCache does nothing where the bench cannot ask for it (the
// bench reads its figures from Linux's /proc anyway).
func dropFromPageCache(string) error { return nil }
