package browsertest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolmesh/toolmesh/internal/testsupport/browsertest"
)

// TestTheHarnessSeesWhatIsWrong: a page whose inline script the
// Content-Security-Policy refuses, and whose field has no label, is
// reported as such — the checks the console's tests rely on can fail.
func TestTheHarnessSeesWhatIsWrong(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Chromium")
	}
	page := `<!doctype html><html lang="en"><head><title>t</title></head><body><main>
<h1>A page</h1><input type="text" id="x"><script>document.title = "ran"</script></main></body></html>`
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	}))
	defer hs.Close()

	tab := browsertest.Start(t).Tab(t)
	if err := tab.Do(30*time.Second, chromedp.Navigate(hs.URL), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
		t.Fatal(err)
	}
	if title, err := browsertest.Run(tab, 10*time.Second, chromedp.Title()); err != nil || title != "t" {
		t.Errorf("title %q (%v): the refused inline script ran", title, err)
	}
	if p := tab.Problems(); len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), "Content Security Policy") {
		t.Errorf("problems %q, want the refused inline script", p)
	}
	res := tab.Axe(t)
	found := false
	for _, v := range res.Serious() {
		found = found || v.ID == "label"
	}
	if !found || res.Passes == 0 {
		t.Errorf("axe found %v (passes %d), want the unlabelled field", res.Violations, res.Passes)
	}
}
