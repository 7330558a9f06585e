package netchaos

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlimit/ringlimit/test/internal/chaoskit"
)

// Upgrades: a rolling upgrade across releases, under load. Five nodes of
// the release before (upgradeFrom) are replaced one by one with nodes of
// the tree under test, each stopped gracefully (SIGTERM: it hands its keys
// off and leaves) and a node of the new release started at its address;
// then one node is rolled back to the old release the same way. Between
// steps the cluster serves, mixed, for a third of the fault's hold. So old
// and new nodes forward to each other, push, pull, confirm and say Done
// for each other's views, over peer links whose handshake picks the highest
// version both speak (3 between new nodes, 2 with an old one; the link's
// design, not measured here). What the chaos rule's keys do not exercise:
// leases (a limit of 10 leases nothing) and waits (chaosnode only allows).
//
// The note gives each node's ring changes that every member's Done has not
// resolved at the end (Stats.Sources). It is not asserted: measured, a
// rolling restart of either release alone, under this load, leaves as
// many (1 to 10 a node, each step's still open 3 s after the cluster
// converged), so Done across releases cannot be told apart by it.
//
// Every leave is planned and hands its keys off, so every key's bound is
// its limit (as test/chaos's rolling restart), loosened only by what the
// suite's finish loosens for: a ring that dropped an owner more often than
// the scenario stopped it, store decisions, fail-open admissions. And no
// caller sees an error.

// upgradeFrom is the release the upgrade starts from and the rollback goes
// back to: commit 8ee53e9 ("README: the node runs on the ownership core"),
// the first of this round whose node runs on the ownership core
// (internal/hold).
const upgradeFrom = "8ee53e932255f9254432777d405157e4d8a5d9a9"

// oldImage builds chaosnode from upgradeFrom's tree, extracted from the
// clone this test runs in (git archive), static into an image FROM scratch
// as buildImages builds the current one, and removes it when the test
// ends. It skips the test, saying why, when there is no git, no clone, or
// no such commit in it (a shallow clone).
func oldImage(t *testing.T) string {
	t.Helper()
	short := upgradeFrom[:7]
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("netchaos: upgrade skipped: no git on PATH (the scenario builds the old node from commit %s's tree)", short)
	}
	out, err := exec.Command(git, "rev-parse", "--show-toplevel").CombinedOutput()
	if err != nil {
		t.Skipf("netchaos: upgrade skipped: the source is not a git clone, so commit %s's tree cannot be extracted (git rev-parse: %v: %s)",
			short, err, strings.TrimSpace(string(out)))
	}
	root := strings.TrimSpace(string(out))
	if out, err := exec.Command(git, "-C", root, "cat-file", "-e", upgradeFrom+"^{commit}").CombinedOutput(); err != nil {
		shallow, _ := exec.Command(git, "-C", root, "rev-parse", "--is-shallow-repository").Output()
		t.Skipf("netchaos: upgrade skipped: commit %s is not in the clone at %s (shallow: %s; git fetch --unshallow brings it): %v %s",
			short, root, strings.TrimSpace(string(shallow)), err, strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	if err := extract(git, root, upgradeFrom, dir); err != nil {
		t.Fatalf("extracting commit %s's tree: %v", short, err)
	}
	tag := "ringlimit-netchaos-node-" + short + ":p" + strconv.Itoa(os.Getpid())
	buildNodeImage(t, "./test/chaos/chaosnode", dir, tag)
	return tag
}

// extract writes commit's tree, from the clone at root, into dir.
func extract(git, root, commit, dir string) error {
	cmd := exec.Command(git, "-C", root, "archive", "--format=tar", commit)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	r, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	err = untar(r, dir)
	_, _ = io.Copy(io.Discard, r) // (on an error: let git finish)
	if werr := cmd.Wait(); werr != nil {
		return fmt.Errorf("git archive: %w: %s", werr, stderr.String())
	}
	return err
}

// untar writes the directories, files and links of a tar stream into dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("tar: %q is outside the tree", h.Name)
		}
		dst := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeReg:
			err = writeFrom(dst, tr, h.FileInfo().Mode().Perm())
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
				err = os.Symlink(h.Linkname, dst)
			}
		}
		// (git archive's pax global header, which names the commit, is skipped)
		if err != nil {
			return err
		}
	}
}

func writeFrom(dst string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode|0o200)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

func upgrade(t *testing.T, im images, hold time.Duration) row {
	old := im
	old.node = oldImage(t)
	ru := begin(t, old, five(), chaosRule)
	c := ru.c
	ru.planned = map[string]int{}
	version := map[string]string{im.node: "new", old.node: upgradeFrom[:7]}
	var logs []string // the logs of the containers replaced
	// The last figures of each container (a node's incarnation): taken
	// before it stops, and at the end.
	var last []incarnation
	sample := func(i int) chaoskit.Stats {
		p := c.cnodes[i]
		s, err := p.Stats()
		if err != nil {
			t.Fatalf("stats %s: %v", p.Name(), err)
		}
		last = append(last, incarnation{p.Name(), version[p.image], s})
		return s
	}
	var received []string // what each node that came received, for the note
	// replace stops node i gracefully and starts image at its address, and
	// lets the cluster serve for a while before the next step; the node's
	// baseline for leaks is then taken again (its figures are another
	// release's). It returns the states the new node installed from its
	// peers by then.
	replace := func(i int, image string) uint64 {
		p := c.cnodes[i]
		sample(i)
		stop := time.Now()
		c.term(i)
		c.WaitView(c.Others(i), c.Without(i), 15*time.Second)
		ru.r.Detect = max(ru.r.Detect, time.Since(stop))
		ru.planned[p.Name()]++
		logs = append(logs, c.retire(i))
		p.image = image
		ru.r.Recover = max(ru.r.Recover, c.restartAt(i, p.addr))
		time.Sleep(hold / 3) // the cluster serves, mixed, for a while
		s, err := p.Stats()
		if err != nil {
			t.Fatalf("stats %s: %v", p.Name(), err)
		}
		ru.base[i] = s
		received = append(received, fmt.Sprintf("%s %s %d (%d loaded from the store)", p.Name(), version[image], s.Node.Received, s.Node.Loads))
		return s.Node.Received
	}
	// The first new node comes among old ones only, and the node rolled
	// back among new ones only: what each installed from its peers (the
	// states of the keys it owns again) came across releases.
	for i := range c.cnodes {
		if got := replace(i, im.node); i == 0 && got == 0 {
			t.Errorf("%s (new) installed no state from its peers (all %s): the hand-off from the old release to the new failed",
				c.cnodes[i].Name(), upgradeFrom[:7])
		}
	}
	back := pick(len(c.cnodes))
	if got := replace(back, old.node); got == 0 {
		t.Errorf("%s (%s) installed no state from its peers (all new): the hand-off from the new release to the old failed",
			c.cnodes[back].Name(), upgradeFrom[:7])
	}
	ru.recovered()

	var runs, sources []string
	for i, p := range c.cnodes {
		s := sample(i)
		runs = append(runs, p.Name()+" "+version[p.image])
		sources = append(sources, fmt.Sprintf("%s %d", p.Name(), s.Node.Sources))
		out, err := docker("logs", p.ctr.Load().name)
		if err != nil {
			t.Errorf("logs of %s: %v", p.Name(), err)
		}
		logs = append(logs, out)
	}
	warns := warnings(logs)
	for msg, n := range warns {
		t.Logf("warning in the nodes' logs, %d times: %s", n, msg)
	}
	// Nothing one release sent did the other fail to read: no forwarded
	// call a peer could not parse, and no hand-off message a new node
	// could not (an old node refuses a new one's Drop as malformed, by
	// design: counted in the note).
	var bad []string
	for _, inc := range last {
		st := inc.s.Node
		if st.Peer.BadCalls > 0 {
			t.Errorf("%s (%s) answered %d forwarded calls it could not read", inc.name, inc.version, st.Peer.BadCalls)
		}
		if st.BadHandoffs > 0 && inc.version == "new" {
			t.Errorf("%s (new) refused %d hand-off messages it could not read", inc.name, st.BadHandoffs)
		}
		if st.BadHandoffs > 0 || st.Peer.RejectedFrames > 0 || st.HandoffFailures > 0 {
			bad = append(bad, fmt.Sprintf("%s %s: %d bad hand-offs, %d rejected frames, %d hand-off failures",
				inc.name, inc.version, st.BadHandoffs, st.Peer.RejectedFrames, st.HandoffFailures))
		}
	}
	if len(bad) == 0 {
		bad = []string{"none"}
	}
	var stops []string
	for _, name := range slices.Sorted(maps.Keys(ru.planned)) {
		stops = append(stops, fmt.Sprintf("%s×%d", name, ru.planned[name]))
	}
	ru.r.Note = fmt.Sprintf("every node of %s replaced in turn by one of the tree under test (SIGTERM, then a new container at its address; %s of mixed service after each), then %s rolled back to %s; at the end %s; ring changes not resolved by every member's Done at the end: %s; states each node installed from its peers by the end of its step: %s; bad hand-offs, rejected frames, hand-off failures: %s; warnings logged: %s; graceful stops (planned leaves, not faults) %s",
		upgradeFrom[:7], hold/3, c.cnodes[back].Name(), upgradeFrom[:7], strings.Join(runs, ", "), strings.Join(sources, ", "),
		strings.Join(received, ", "), strings.Join(bad, "; "), warnNote(warns), strings.Join(stops, " "))
	all := c.Others()
	// Every leave handed its keys off: nothing extra.
	return ru.finish(all, all, func(string) int { return chaosRule.Limit })
}

// incarnation is one node container's last figures.
type incarnation struct {
	name, version string
	s             chaoskit.Stats
}

// warnings counts the warnings in logs by their message.
func warnings(logs []string) map[string]int {
	n := map[string]int{}
	for _, log := range logs {
		for _, l := range lines(log) {
			if !strings.Contains(l, "level=WARN") {
				continue
			}
			_, msg, ok := strings.Cut(l, "msg=")
			if !ok {
				continue
			}
			if strings.HasPrefix(msg, `"`) {
				if u, err := strconv.QuotedPrefix(msg); err == nil {
					msg, _ = strconv.Unquote(u)
				}
			} else {
				msg, _, _ = strings.Cut(msg, " ")
			}
			msg, _, _ = strings.Cut(msg, " (from: ") // memberlist names the sender: one line for all
			n[msg]++
		}
	}
	return n
}

// warnNote lists warnings and their counts, for the note.
func warnNote(warns map[string]int) string {
	if len(warns) == 0 {
		return "none"
	}
	var s []string
	for _, msg := range slices.Sorted(maps.Keys(warns)) {
		s = append(s, fmt.Sprintf("%q ×%d", msg, warns[msg]))
	}
	return strings.Join(s, ", ")
}
