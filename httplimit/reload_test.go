package httplimit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/rules"
)

// version v of a rule file: two rules that both match /a, both with limit
// 1000+v, so a response reporting different quotas saw half a rule set.
func version(v int) string {
	return fmt.Sprintf(`rules:
  - name: all
    limit: %[1]d
    window: 60s
  - name: a
    endpoint: /a
    limit: %[1]d
    window: 60s
`, 1000+v)
}

func TestConcurrentRequestsDuringReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(content string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(version(0))
	w, err := rules.NewWatcher(path, rules.WatchConfig{})
	if err != nil {
		t.Fatal(err)
	}
	h := httplimit.New(local.New(local.Config{}), httplimit.WithRules(w))(new(counting))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp := get(h, "/a", from(fmt.Sprintf("192.0.2.%d:1", g*50+i%50)))
				var q1, q2 int
				policy := resp.Header().Get("RateLimit-Policy")
				if _, err := fmt.Sscanf(policy, `"all";q=%d;w=60, "a";q=%d;w=60`, &q1, &q2); err != nil || q1 != q2 || resp.Code != 200 {
					errs <- fmt.Errorf("status %d, RateLimit-Policy %q: want one version's quotas", resp.Code, policy)
					return
				}
			}
		}()
	}
	for v := 1; v <= 40; v++ {
		write(version(v))
		if _, err := w.Reload(); err != nil {
			t.Error(err)
		}
		if v%10 == 0 { // a broken version in between changes nothing
			write("rules:\n  - name: all\n    limit: -1\n    window: 60s\n")
			if _, err := w.Reload(); err == nil {
				t.Error("a broken file reloaded")
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if w.Reloads() != 40 || w.Errors() != 4 {
		t.Errorf("Reloads %d, Errors %d; want 40, 4", w.Reloads(), w.Errors())
	}
}
