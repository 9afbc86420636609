package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/toolmesh/toolmesh/internal/supervise"
)

type meshView struct {
	Processes []supervise.Status
	// Source is the status page read; Down why it could not be.
	Source, Down string
}

// mesh shows the processes `toolmesh up` supervises — state, restarts,
// last failure — as its status page (Config.MeshStatusURL) reports them.
func (c *Console) mesh(w http.ResponseWriter, r *http.Request, s *session) {
	v := &meshView{Source: c.cfg.MeshStatusURL}
	if v.Source == "" {
		v.Down = "This console was not given a status page of the mesh (--mesh-status-url): under `toolmesh up` it is up's own; under Kubernetes each service's health is its own /healthz."
		c.renderPage(w, r, s, "mesh", "Mesh", v, nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	procs, err := c.readMeshStatus(ctx)
	if err != nil {
		v.Down = "The status page at " + v.Source + " does not answer (" + err.Error() + "): `toolmesh up status` in a terminal says the same when up runs."
	}
	v.Processes = procs
	c.renderPage(w, r, s, "mesh", "Mesh", v, nil)
}

func (c *Console) readMeshStatus(ctx context.Context) ([]supervise.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.cfg.MeshStatusURL, nil)
	if err != nil {
		return nil, err
	}
	res, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("unreachable")
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", res.StatusCode)
	}
	var st struct {
		Processes []supervise.Status `json:"processes"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, res.Body, 1<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("unreadable answer")
	}
	return st.Processes, nil
}
