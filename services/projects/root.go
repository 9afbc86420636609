package projects

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Base is the directory every path project's code root must be inside.
// What a path says is never trusted: it is resolved (symbolic links
// followed, .. removed) and the result must still be inside the base, when
// the project is created and again at every read, since a link inside the
// base may be changed to point elsewhere later. Reads then go through an
// os.Root opened on the base, which refuses any link that leads out of it
// while a file is being opened.
type Base struct {
	// dir is absolute, with its own symbolic links resolved.
	dir string
}

// ErrOutsideBase marks a code root that resolves outside the base.
var ErrOutsideBase = errors.New("outside the project base")

// NewBase returns the base at dir, which must be an existing directory
// other than the file system's root.
func NewBase(dir string) (Base, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Base{}, fmt.Errorf("project base %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return Base{}, fmt.Errorf("project base %s: %w", dir, err)
	}
	if info, err := os.Stat(real); err != nil || !info.IsDir() {
		return Base{}, fmt.Errorf("project base %s is not a directory", dir)
	}
	if filepath.Dir(real) == real {
		return Base{}, fmt.Errorf("project base %s is the file system's root: name the directory the mesh may read", dir)
	}
	return Base{dir: real}, nil
}

// Dir is the base's absolute path.
func (b Base) Dir() string { return b.dir }

// Resolve checks a code root named at create: a path relative to the base,
// an absolute one, or a file:// URI (a client's root) of this machine. It
// returns the root relative to the base, with / separators ("." for the
// base itself), once it has resolved every link and found the result
// inside the base and a directory.
func (b Base) Resolve(given string) (string, error) {
	p := given
	if strings.HasPrefix(p, "file:") {
		u, err := url.Parse(p)
		if err != nil || (u.Host != "" && u.Host != "localhost") || u.Path == "" || !filepath.IsAbs(u.Path) {
			return "", fmt.Errorf("path %q is not a file:// URI of a directory on the mesh's machine", given)
		}
		p = u.Path
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(b.dir, p)
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(p))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("path %q does not exist", given)
	}
	if err != nil {
		return "", fmt.Errorf("path %q: %w", given, err)
	}
	rel, err := b.inside(real)
	if err != nil {
		return "", fmt.Errorf("path %q leads %w %s (through .., an absolute path or a symbolic link)", given, ErrOutsideBase, b.dir)
	}
	if info, err := os.Stat(real); err != nil || !info.IsDir() {
		return "", fmt.Errorf("path %q is not a directory", given)
	}
	return rel, nil
}

// inside returns real (resolved, absolute) relative to the base, with /
// separators, or ErrOutsideBase.
func (b Base) inside(real string) (string, error) {
	rel, err := filepath.Rel(b.dir, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", ErrOutsideBase
	}
	return filepath.ToSlash(rel), nil
}

// Open opens the code root rel (as Resolve returned it) for reading,
// after checking again that it resolves inside the base. The caller closes
// the root.
func (b Base) Open(rel string) (*os.Root, error) {
	real, err := filepath.EvalSymlinks(filepath.Join(b.dir, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("code root %s: %w", rel, err)
	}
	inside, err := b.inside(real)
	if err != nil {
		return nil, fmt.Errorf("code root %s now leads %w (a symbolic link changed)", rel, ErrOutsideBase)
	}
	base, err := os.OpenRoot(b.dir)
	if err != nil {
		return nil, fmt.Errorf("open the project base: %w", err)
	}
	defer base.Close()
	root, err := base.OpenRoot(filepath.FromSlash(inside))
	if err != nil {
		return nil, fmt.Errorf("code root %s: %w", rel, err)
	}
	return root, nil
}
