package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// findChromium returns the path of a Chromium or Chrome on PATH, or "".
// test.sh installs Debian's chromium where it is missing.
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// startDemo starts the built demo with args and returns its dashboard's URL.
// Cleanup quits it (q on stdin, SIGKILL if it has not ended after 10 s) and
// fails the test if any process it started is left.
func startDemo(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	var out strings.Builder
	var outMu sync.Mutex
	read := make(chan struct{})
	go func() { // ends when the demo exits and its stdout closes
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			outMu.Lock()
			out.WriteString(line + "\n")
			outMu.Unlock()
			if rest, ok := strings.CutPrefix(line, "dashboard: "); ok {
				urls <- strings.Fields(rest)[0]
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		io.WriteString(stdin, "q\n")
		stdin.Close()
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("the demo did not quit within 10 s of q")
		}
		<-read
		deadline := time.Now().Add(3 * time.Second)
		for left := leftovers(bin); len(left) > 0; left = leftovers(bin) {
			if time.Now().After(deadline) {
				t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if t.Failed() {
			outMu.Lock()
			t.Logf("demo output:\n%s", out.String())
			outMu.Unlock()
		}
	})
	select {
	case u := <-urls:
		return u
	case <-read:
		t.Fatalf("the demo ended without printing its dashboard's address")
	case <-time.After(30 * time.Second):
		t.Fatalf("no dashboard address after 30 s")
	}
	return ""
}

// TestDashboardInBrowser opens the dashboard in a real headless Chromium,
// waits for three nodes, kills one with its button, and checks that the
// page shows it within 2 s while the traffic sees no error.
// DASHBOARD_SCREENSHOT=path keeps the screenshot (docs/dashboard.png), taken
// at the demo's default rate (the test otherwise sends 100 requests a
// second); DASHBOARD_HOVER_SCREENSHOT=path one taken while the mouse points
// at n1.
func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster and a browser")
	}
	browser := findChromium()
	if browser == "" {
		t.Skip("no chromium on PATH (./test.sh installs Debian's chromium): the dashboard is not tested in a browser")
	}
	args := []string{"-plain"}
	if os.Getenv("DASHBOARD_SCREENSHOT") == "" {
		args = append(args, "-rate", "100")
	}
	url := startDemo(t, demoBinary(t), args...)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	profile := filepath.Join(t.TempDir(), "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.UserDataDir(profile), chromedp.WindowSize(1280, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer func() {
		cancelBrowser()
		cancelAlloc()
		deadline := time.Now().Add(5 * time.Second)
		for left := leftovers(profile); len(left) > 0; left = leftovers(profile) {
			if time.Now().After(deadline) {
				t.Errorf("browser processes left behind:\n%s", strings.Join(left, "\n"))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	threeUp := `document.querySelectorAll('.node[data-state="up"]').length === 3 &&
		document.querySelector('#ring').dataset.members === "n1,n2,n3"`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](threeUp, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("three nodes up and in the ring: %v", err)
	}
	if errs := text(t, bctx, "#errors"); errs != "0" {
		t.Fatalf("error counter %q before the kill, want 0", errs)
	}
	checkRingReadable(t, bctx)
	// The header's totals are of one window: they add up.
	addsUp := `(() => { const m = document.querySelector('#traffic').textContent.match(/^(\d+) req\/s · (\d+) allowed · (\d+) denied(?: · (\d+) failed)?$/);
		return !!m && +m[1] > 0 && +m[1] === +m[2] + +m[3] + +(m[4] || 0); })()`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](addsUp, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
		t.Errorf("header totals %q do not add up: %v", text(t, bctx, "#traffic"), err)
	}

	// No node wears a source's colour; the rules table lists the API's
	// rules; each busiest key names its rule.
	named := `(() => {
		const css = getComputedStyle(document.documentElement);
		const src = ["--local", "--peer", "--store", "--fallback"].map(v => css.getPropertyValue(v).trim().toLowerCase());
		const cards = [...document.querySelectorAll('.node')].map(c => c.style.getPropertyValue('--c').trim().toLowerCase());
		const legend = [...document.querySelectorAll('#legend span')].map(s => s.style.getPropertyValue('--c').trim().toLowerCase());
		const rules = [...document.querySelectorAll('#rules tr[data-rule]')].map(r => r.dataset.rule).join(",");
		const wins = [...document.querySelectorAll('#windows .win')];
		return cards.length === 3 && cards.concat(legend).every(c => c !== "" && !src.includes(c)) &&
			rules === "items,login,posts,search" && wins.length > 0 &&
			wins.every(w => (w.querySelector('.rule') || {}).textContent === "rule ` + checkRule + `");
	})()`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](named, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		rules := text(t, bctx, "#rules")
		wins := text(t, bctx, "#windows")
		t.Errorf("node colours, rules table or the busiest keys' rules wrong: %v\nrules: %s\nbusiest: %s", err, rules, wins)
	}

	if os.Getenv("DASHBOARD_SCREENSHOT") != "" { // a fuller chart for the README
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`last.nodes[0].history.length >= 40`, chromedp.WithPollingTimeout(50*time.Second))); err != nil {
			t.Fatalf("40 s of history: %v", err)
		}
	}
	start := time.Now()
	if err := chromedp.Do(bctx, chromedp.Click(`button[data-action="kill"][data-node="2"]`)); err != nil {
		t.Fatalf("click kill: %v", err)
	}
	// n2 down on its card, and the ring no longer shows n2 as live: its
	// arcs grey, or gone to the others.
	killed := `document.querySelector('.node[data-node="n2"]').dataset.state === "down" &&
		(document.querySelector('#ring').dataset.dead.split(",").includes("n2") ||
		 !document.querySelector('#ring').dataset.members.split(",").includes("n2"))`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](killed, chromedp.WithPollingTimeout(2*time.Second))); err != nil {
		t.Fatalf("2 s after the click, n2 is not shown down and out of the live ring: %v", err)
	}
	t.Logf("the page showed n2 killed %v after the click", time.Since(start).Round(time.Millisecond))
	if ev := text(t, bctx, "#events"); !strings.Contains(ev, "dashboard: kill -9 n2") || !strings.Contains(ev, "killed n2") {
		t.Errorf("event log does not show the kill:\n%s", ev)
	}
	// The screenshot shows n2's arcs grey, before the others take them.
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := os.Getenv("DASHBOARD_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "dashboard.png")
	}
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))

	// Let the survivors drop n2 from the ring, then check the errors again.
	gone := `!document.querySelector('#ring').dataset.members.split(",").includes("n2")`
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](gone, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Errorf("n2 still in the ring 15 s after the kill: %v", err)
	}
	if errs := text(t, bctx, "#errors"); errs != "0" {
		t.Errorf("error counter %q after the kill, want 0", errs)
	}

}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.TextContent(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// checkRingReadable checks the ring on a live page: a few arcs per member
// (not one per run of virtual nodes), and a member's arcs highlighted while
// the real mouse points at one of them, and no longer once it leaves.
func checkRingReadable(t *testing.T, ctx context.Context) {
	t.Helper()
	arcs, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#ring .arc')].map(a => a.dataset.owner)`))
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, o := range arcs {
		per[o]++
	}
	if len(arcs) > 3*8-8+1 || len(per) != 3 {
		t.Errorf("the ring draws %d arcs (%v), want at most 17 for 3 members", len(arcs), per)
	}
	// The middle of n1's longest arc, in the viewport's pixels.
	at, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
		const ps = [...document.querySelectorAll('#ring .arc[data-owner="n1"]')];
		ps.sort((a, b) => b.getTotalLength() - a.getTotalLength());
		const p = ps[0], q = p.getPointAtLength(p.getTotalLength() / 2);
		const v = new DOMPoint(q.x, q.y).matrixTransform(p.getScreenCTM());
		return [v.x, v.y];
	})()`))
	if err != nil || len(at) != 2 {
		t.Fatalf("n1's arc: %v %v", at, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.MouseEvent(chromedp.MouseMoved, at[0], at[1])); err != nil {
		t.Fatal(err)
	}
	lit := `(() => { const r = document.querySelector('#ring'), arcs = [...r.querySelectorAll('.arc')];
		return r.classList.contains('hl') && arcs.every(a => a.classList.contains('on') === (a.dataset.owner === 'n1')) &&
			document.querySelector('#ringtitle').textContent.startsWith('n1: ') &&
			document.querySelector('#legend [data-owner="n1"]').classList.contains('on'); })()`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](lit, chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Errorf("pointing at n1's arc at %v does not highlight n1's arcs alone: %v", at, err)
	}
	if path := os.Getenv("DASHBOARD_HOVER_SCREENSHOT"); path != "" { // to look at it
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err == nil {
			err = os.WriteFile(path, shot, 0o644)
		}
		if err != nil {
			t.Errorf("hover screenshot: %v", err)
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.MouseEvent(chromedp.MouseMoved, 1200, 880)); err != nil {
		t.Fatal(err)
	}
	off := `!document.querySelector('#ring').classList.contains('hl') && document.querySelectorAll('#ring .arc.on').length === 0`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](off, chromedp.WithPollingTimeout(3*time.Second))); err != nil {
		t.Errorf("the highlight stays after the mouse left the ring: %v", err)
	}
}
