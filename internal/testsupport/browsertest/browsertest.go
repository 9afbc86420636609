// Package browsertest drives a real headless Chromium (Debian's chromium
// package) from Go tests with chromedp: pages are loaded, clicked and
// screenshotted as a person's browser would, and what the page itself
// reports — script errors, refused resources, Content-Security-Policy
// violations — is collected so that a test can assert there was none.
//
//	b := browsertest.Start(t)
//	tab := b.Tab(t)
//	if err := chromedp.Run(tab, chromedp.Navigate(url), chromedp.WaitVisible("#main")); err != nil {
//		t.Fatal(err)
//	}
//	if p := tab.Problems(); len(p) > 0 {
//		t.Errorf("the page reported %q", p)
//	}
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// Candidates are the names Chromium is found under on PATH, in order.
var Candidates = []string{"chromium", "chromium-browser", "google-chrome"}

// Width and Height are the window's size: screenshots are this size.
const (
	Width  = 1100
	Height = 720
)

// Browser is one headless Chromium with a fresh profile.
type Browser struct {
	alloc context.Context
	root  context.Context
}

// Find returns the path of Chromium, or an error naming what to install.
func Find() (string, error) {
	for _, n := range Candidates {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium on PATH (looked for %s): apt-get install -y chromium", strings.Join(Candidates, ", "))
}

// Start launches Chromium headless, with the flags that keep it from
// reaching anywhere but the pages a test loads, and stops it when the test
// ends. It fails the test when Chromium is missing.
func Start(tb testing.TB) *Browser {
	tb.Helper()
	path, err := Find()
	if err != nil {
		tb.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(Width, Height),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	root, cancelRoot := chromedp.NewContext(alloc)
	// The first run starts the browser.
	if err := chromedp.Do(root); err != nil {
		cancelRoot()
		cancelAlloc()
		tb.Fatalf("start %s: %v", path, err)
	}
	tb.Cleanup(func() {
		cancelRoot()
		cancelAlloc()
	})
	return &Browser{alloc: alloc, root: root}
}

// Tab is one browser tab: its context runs chromedp actions in it.
type Tab struct {
	context.Context

	mu       sync.Mutex
	problems []string
}

// Tab opens a new tab, sharing the browser's cookies with its other
// tabs; it is closed when the test ends.
func (b *Browser) Tab(tb testing.TB) *Tab {
	tb.Helper()
	return open(tb, b.root)
}

// Frame is the frame of the tab's page that Chromium runs out of process —
// an iframe from another site, or a sandboxed one — whose target match
// picks (its type is "iframe"), waiting up to timeout for exactly one to
// match. Its actions run in the frame and it reports its own problems; it
// is detached (not closed: the page owns it) when the test ends.
func (t *Tab) Frame(tb testing.TB, timeout time.Duration, match func(*target.Info) bool) *Tab {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		infos, err := chromedp.Targets(t.Context)
		if err != nil {
			tb.Fatal(err)
		}
		var found []*target.Info
		for _, i := range infos {
			if i.Type == "iframe" && match(i) {
				found = append(found, i)
			}
		}
		if len(found) == 1 {
			return open(tb, t.Context, chromedp.WithTargetID(found[0].TargetID), chromedp.WithDetachOnCancel())
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d frames match, want 1", len(found))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// open opens a tab, or attaches to a target, in parent.
func open(tb testing.TB, parent context.Context, opts ...chromedp.ContextOption) *Tab {
	tb.Helper()
	t := &Tab{}
	ctx, cancel := chromedp.NewContext(parent, append(opts, chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			t.report(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, msg))
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				t.report(fmt.Sprintf("%s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				t.report("console.error: " + strings.Join(args, " "))
			}
		}
	}))...)
	t.Context = ctx
	if err := chromedp.Do(ctx, enable(cdplog.Enable), enable(runtime.Enable)); err != nil {
		cancel()
		tb.Fatalf("open a tab: %v", err)
	}
	tb.Cleanup(cancel)
	return t
}

// enable runs a domain's enable command, so that its events reach the
// tab's listener.
func enable(cmd cdp.Command[cdp.Empty, cdp.Empty]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, cmd, cdp.Empty{})
		return chromedp.Void{}, err
	}
}

func (t *Tab) report(p string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.problems = append(t.problems, p)
}

// Problems are what the tab's pages reported so far: uncaught script
// exceptions, console errors, and errors the browser logged for them (a
// resource or an inline script refused by the Content-Security-Policy, a
// failed load).
func (t *Tab) Problems() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.problems...)
}

// Do runs steps in the tab, in order, within timeout.
func (t *Tab) Do(timeout time.Duration, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(t.Context, timeout)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// Run runs one action in the tab within timeout and returns its value.
func Run[T any](t *Tab, timeout time.Duration, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(t.Context, timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// Screenshot writes a PNG of the tab's viewport to path.
func (t *Tab) Screenshot(path string) error {
	png, err := chromedp.Run(t.Context, chromedp.CaptureScreenshot())
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	return os.WriteFile(path, png, 0o644)
}
