package toolcatalog

import (
	"fmt"
	"regexp"
	"strings"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// View is the MCP Apps view (the io.modelcontextprotocol/ui extension) that
// shows a tool's result: a self-contained HTML file its contract keeps in
// its assets (the tool option's view).
type View struct {
	// Name is the view's name, e.g. "ask-card".
	Name string
	// URI is the resource the edge serves it as,
	// "ui://toolmesh/<domain>/<name>".
	URI string
	// Asset is the file's path in the contracts' assets (proto/gen/assets),
	// "toolmesh/<domain>/v1/views/<name>.html".
	Asset string
}

// ViewPrefix begins the URI of every view.
const ViewPrefix = "ui://toolmesh/"

// viewName is the form of a view's name: lower-case words joined by single
// hyphens, at most 64 characters.
var viewName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

// bindView reads t's view option: the file of that name in the assets of
// t's contract ("toolmesh.owner.v1" keeps its views in
// toolmesh/owner/v1/views/).
func bindView(t *Tool, opt *toolv1.Tool) error {
	name := opt.GetView()
	if name == "" {
		return nil
	}
	if len(name) > 64 || !viewName.MatchString(name) {
		return fmt.Errorf("tool %q: view %q must be lower-case words joined by hyphens, at most 64 characters", t.Name, name)
	}
	pkg := strings.Split(string(t.Method.ParentFile().Package()), ".") // toolmesh <domain> v1
	if len(pkg) != 3 {
		return fmt.Errorf("tool %q: view %q: the contract's package %q is not toolmesh.<domain>.<version>", t.Name, name, t.Method.ParentFile().Package())
	}
	t.View = &View{Name: name, URI: ViewPrefix + pkg[1] + "/" + name, Asset: strings.Join(pkg, "/") + "/views/" + name + ".html"}
	return nil
}
