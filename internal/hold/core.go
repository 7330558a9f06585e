package hold

import (
	"github.com/ringlimit/ringlimit"
)

// View is one snapshot of the ring, as the core needs it. *ring.Ring
// implements it.
type View interface {
	OwnerOfHash(h uint64) string // "" for an empty ring
	Contains(name string) bool
	Members() []string // sorted
}

// Incarnations is implemented by a View that knows each member's
// incarnation (a number that changes when a member restarts under the same
// name). A pull then names the incarnation it expects, and a restarted
// member, which holds nothing its predecessor held, answers as a gone one.
type Incarnations interface {
	Incarnation(name string) uint64
}

func incOf(v View, name string) uint64 {
	if i, ok := v.(Incarnations); ok {
		return i.Incarnation(name)
	}
	return 0
}

// Kind is what the shell does next for a call.
type Kind uint8

const (
	Decide  Kind = iota // decide here, from the local store
	Forward             // send the call to To (a call made on this node)
	Moved               // answer a forwarded call: the key is with To
	Pull                // ask To for the key's state (OpTake), then give the core its answer
	Wait                // a pull for the key is on its way: call again once it ends
	Load                // no source could be reached: load the key from the store, then decide
)

var kindNames = [...]string{"decide", "forward", "moved", "pull", "wait", "load"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind?"
}

// Action is the core's answer to an event.
type Action struct {
	Kind Kind
	To   string
	Inc  uint64 // Pull: the incarnation of To expected (0: any)
	// Install: first install the state the pull's answer carried (with
	// the answer's version), or St if set (with Ver), then do Kind.
	Install bool
	St      *ringlimit.State
	Ver     Version
	// Pull: Gone (in its incarnation GoneInc) was found gone: the member
	// asked named it, and may hold a copy it pushed there (Ask.Gone).
	Gone    string
	GoneInc uint64
	// PushTo: after installing, push the state to this member (it holds
	// the key now).
	PushTo string
	// Drop: the member this pull gave up on (it did not answer): the
	// shell tells it (Dropped), so that a state it gave away in an answer
	// that never arrived comes back to it instead of staying given.
	Drop string
	// Load: the members this pull found holding nothing or gave up on.
	// The shell's load claims the key in the store (compare-and-set, in
	// the same script as the read): a claim by another member stands
	// unless that member is one of these, and Loaded is told who holds
	// it, so that two members that take one key from the store apart do
	// not both start it.
	Cleared []string
}

// Call is a call for one key, as the core sees it.
type Call struct {
	Key  string
	Hash uint64
	// Has says the key's state is in the local store now (the shell asks it
	// under the key's lock).
	Has bool
	// Forwarded: the call came from a peer. It is answered (Moved), never
	// forwarded again: one hop.
	Forwarded bool
	// Via is the member that answered "moved to this node" for the call, if
	// any: it may still hold a copy of the state, or know who does.
	Via string
	Now int64 // ms, the node's clock
}

// mark says that this node gave a key's state to another member.
type mark struct {
	to     string
	inc    uint64           // to's incarnation when marked (0: unknown)
	ver    Version          // the version given
	copy   *ringlimit.State // the state pushed to to, until to confirms it (a pull may take it)
	served bool             // the copy went out in a pull's answer too: it may be installed there
	pushed bool             // a push of the copy is on its way (its answer resolves it)
	until  int64            // ms: after it the state no longer matters, nor the mark
}

// source is what a ring change left behind: for every key this node owns
// now and another member owned in prev, that member may hold the state.
type source struct {
	id   uint64
	view uint64 // the id of the view it came with
	at   int64  // ms, when the change was seen: after at+MaxUntil no state it stands for matters
	prev View
	done map[string]bool // members that resolved it (Done)
}

// flight is one pull in progress for a key: the members asked so far.
type flight struct {
	asked    []string
	namedBy  map[string]string // a member asked -> the member whose MovedTo named it
	hinted   bool              // a Gone has been reported back once
	promised bool              // this node answered a pull of the key with Mine
	cleared  []string          // members that held nothing, or were given up on (Action.Cleared)
	tries    int               // unanswered pulls of the last member asked
	inc      uint64            // the incarnation of the last member asked
	ceded    string            // this node answered a pull of the key meanwhile and gave way to this member
	maybe    bool              // the member asked was asked only in case (maybeHolder): nothing from it, and the key starts here
	sourced  bool              // (with maybe) the pull asked its sources first, and they held nothing: ends as nothingFound
}

// Core is the ownership state of one node. It is not safe for simultaneous
// use: the shell serialises its events (one lock around the core and the
// local store's hand-over steps).
type Core struct {
	self string
	// Inc is this node's incarnation (see Incarnations); 0 if unknown.
	Inc uint64
	// Seeded says the node expects peers (it was given members to join):
	// until its view holds another member it decides nothing, since any
	// key may be held elsewhere. The shell ends the wait with Alone when it
	// gives up on joining.
	Seeded bool
	// Stored says a central store holds what holders wrote behind: a key
	// that no source holds is loaded from it before it starts afresh here
	// (its last holder may have crashed, even under this node's own name).
	Stored  bool
	view    View
	viewID  uint64
	leaving View
	joined  bool

	stopped bool // Stop: the shell closes, and runs no more pulls

	srcs    []*source
	nextSrc uint64
	marks   map[string]*mark
	pulls   map[string]*flight

	maxMarks int
	// MaxUntil bounds how long a mark lasts when the state it stands for
	// has no known expiry (a "nothing here" answer): the longest a state
	// can matter (the longest window a rule may hold).
	MaxUntil int64

	// Forgotten counts the unresolved ring changes dropped past the bound.
	Forgotten uint64
	// Resolved counts the ring changes resolved by the members' Done.
	Resolved uint64
	// Settles counts the ring changes resolved by Settle.
	Settles uint64
	// arrivals counts the events that may have brought a state here (see
	// Arrivals).
	arrivals uint64
	// MarksDropped counts the marks dropped past maxMarks (see dropMark):
	// a key of one may be started by a member that asks this node about
	// it (the bound is stated where the shell sets it).
	MarksDropped uint64

	bugs bug // planted bugs, for the simulator's mutation check
}

// bug plants one known bug in the core, so that the simulator's mutation
// test can show it finds each.
type bug uint16

const (
	bugTwoHolders          bug = 1 << iota // a node that gave a key away decides it afresh
	bugPullTwice                           // a pull is answered with the state, and the state stays
	bugSkipLoad                            // an unreachable source is given up without the store load
	bugSkipWindow                          // a ring change leaves no source: new owners decide at once
	bugLeaseTwice                          // (the simulator's shell) a lease's unused hits come back twice
	bugDoneLost                            // a Done of the current view whose own source is resolved speaks for none before it
	bugGiveUpLive                          // an unanswered pull gives up a holder the view still has alive
	bugNoMaybeAfterSources                 // a pull whose sources held nothing asks no member of the change that has not said Done
	bugEqualVersions                       // (the simulator's shell) a hand-over within the ms its epoch stands for keeps the epoch: a state handed back compares equal to the one passed on, and is taken for a copy of it
	bugPushAcrossInc                       // a push meant for an earlier incarnation of this node is accepted
	bugConfirmAnyone                       // a confirm is accepted from a member the mark no longer names
	bugStrayFirst                          // (the simulator's shell) a pull that ends with a stray pushes it on before deciding the calls that waited
	bugSkipRecall                          // (the simulator's shell) a holder that denies a call recalls none of the key's leases
)

// New returns the core of the node named self, alone in its ring.
func New(self string) *Core {
	return &Core{self: self, marks: map[string]*mark{}, pulls: map[string]*flight{},
		maxMarks: 1 << 20, MaxUntil: 25 * 3600 * 1000}
}

// setBugs plants bugs (tests only).
func (c *Core) setBugs(b bug) { c.bugs = b }

// Self is the node's name.
func (c *Core) Self() string { return c.self }

// Quiet reports whether no key changes hands here: no mark, no source, no
// pull, not leaving. An owned key may then be decided by the local store
// alone, without asking the core.
func (c *Core) Quiet() bool {
	return len(c.marks) == 0 && len(c.srcs) == 0 && len(c.pulls) == 0 && c.leaving == nil
}

// Sources is the number of unresolved ring changes.
func (c *Core) Sources() int { return len(c.srcs) }

// Marks is the number of keys this node gave away whose marks are kept.
func (c *Core) Marks() int { return len(c.marks) }

// ViewID is the id of the current view.
func (c *Core) ViewID() uint64 { return c.viewID }

// SetView installs the node's new view of the ring, with its id (equal
// views have equal ids on every node) and the view without this node (the
// owners a newly joined node takes its keys from). The shell then pushes
// every state it holds whose key another member owns (Owner), and sends
// Done to every member once that push is confirmed, if Clean.
func (c *Core) SetView(v, withoutSelf View, id uint64, now int64) {
	prev := c.view
	if !c.joined {
		// A new node: the keys it owns were owned by the others before it.
		prev = withoutSelf
	}
	if v != nil && withoutSelf != nil && v.Contains(c.self) && c.otherIn(v, withoutSelf) {
		c.joined = true
	}
	c.view, c.viewID = v, id
	if c.leaving != nil && withoutSelf != nil {
		c.leaving = withoutSelf // a leaver hands its keys to the owners of its latest view
	}
	if prev != nil && c.othersIn(prev) && c.bugs&bugSkipWindow == 0 {
		c.nextSrc++
		c.srcs = append(c.srcs, &source{id: c.nextSrc, view: id, at: now, prev: prev, done: map[string]bool{}})
		if len(c.srcs) > maxSources {
			// Past the bound the oldest change is forgotten (counted): a
			// key of it that no newer change covers may start afresh.
			c.srcs[0] = nil
			c.srcs = c.srcs[1:]
			c.Forgotten++
		}
	}
	c.expire(now)
}

// othersIn reports whether v holds a member other than this node: only then
// may another member hold a state of a key this node owns.
func (c *Core) othersIn(v View) bool {
	for _, m := range v.Members() {
		if m != c.self {
			return true
		}
	}
	return false
}

// maxSources bounds the unresolved ring changes kept.
const maxSources = 64

// expire drops the sources no state can still matter for.
func (c *Core) expire(now int64) {
	for len(c.srcs) > 0 && c.srcs[0].at+c.MaxUntil <= now {
		c.srcs[0] = nil
		c.srcs = c.srcs[1:]
	}
}

// otherIn reports whether the ring v holds a member besides this node:
// withoutSelf owns something.
func (c *Core) otherIn(v, withoutSelf View) bool { return withoutSelf.OwnerOfHash(0) != "" }

// Owner is where a key is decided by this node's view: its owner in the
// ring, or in the ring without this node while it leaves.
func (c *Core) Owner(h uint64) string {
	if c.leaving != nil {
		if o := c.leaving.OwnerOfHash(h); o != "" {
			return o
		}
		return c.self // the last member of its view
	}
	if c.view == nil {
		return c.self
	}
	o := c.view.OwnerOfHash(h)
	if o == "" {
		return c.self
	}
	return o
}

// Joined reports whether the node has seen another member (or was told
// it is alone).
func (c *Core) Joined() bool { return c.joined || !c.Seeded }

// Alone ends the wait of a seeded node that found no peer: it decides
// alone from now on.
func (c *Core) Alone() { c.joined = true }

// Leave starts the graceful leave: from now on every key goes to its owner
// in without (the ring without this node). The shell pushes every state.
func (c *Core) Leave(without View) { c.leaving = without }

// Stop says the shell closes: the pulls on their way end with the next
// unanswered step, whoever the view still has alive (nothing is asked any
// more; the calls that wait are answered from the store or not at all).
func (c *Core) Stop() { c.stopped = true }

// Leaving reports whether Leave was called.
func (c *Core) Leaving() bool { return c.leaving != nil }

// Call says where a call is decided.
func (c *Core) Call(k Call) Action {
	if k.Has {
		return Action{Kind: Decide} // the holder decides, whatever the ring says
	}
	if c.Seeded && !c.joined {
		return Action{Kind: Wait} // called again once joined (Joined)
	}
	if m := c.liveMark(k.Key, k.Now); m != nil && c.bugs&bugTwoHolders == 0 {
		// (A leaving node takes no state back: it sends the call on to the
		// member its mark names, which holds it or gets it back.)
		if c.leaving == nil && (m.to == k.Via || !c.inView(m.to)) {
			// The member it went to sent the call back here, or it left
			// this node's ring (gone, or only thought dead): the state is
			// with it or nowhere. Take it back from it before deciding.
			a := c.pull(k, m.to)
			a.Inc = m.inc
			c.setInc(k.Key, a)
			return a
		}
		return c.away(k, m.to)
	}
	if c.leaving != nil {
		if to := c.leaving.OwnerOfHash(k.Hash); to != "" && to != c.self {
			return c.away(k, to)
		}
		// The last member of its view: it decides the key, but only once
		// it has asked where the state may be, as any member does. (It
		// once decided at once: a leaver whose view had lost the others,
		// leavers too or thought dead, started a key a member it thought
		// dead still held, classic seeds 6188 and 6839.)
	}
	if f := c.pulls[k.Key]; f != nil {
		return Action{Kind: Wait}
	}
	if k.Via != "" && k.Via != c.self {
		// Sent here by a member that says the key is here: it may hold a
		// copy on its way, or know who does.
		return c.pull(k, k.Via)
	}
	if o := c.Owner(k.Hash); o != c.self {
		return c.away(k, o)
	}
	if to, inc := c.nextSource(k.Key, k.Hash, nil); to != "" {
		a := c.pull(k, to)
		a.Inc = inc
		c.setInc(k.Key, a)
		return a
	}
	if to, inc := c.maybeHolder(k.Hash, nil); to != "" {
		a := c.pull(k, to)
		a.Inc = inc
		c.setInc(k.Key, a)
		if f := c.pulls[k.Key]; f != nil && a.Kind == Pull {
			f.maybe = true
		}
		return a
	}
	return Action{Kind: Decide}
}

// Peek is what Call says for a call on key with no state here and no Via,
// when it can say so without changing anything: ok false if only Call can
// (a mark, a pull on its way, the node leaving or not joined yet, a source
// that may hold the key). to is the member the call goes to ("" : decide
// here; a forwarded call is answered Moved to it). A shell may run Peek
// concurrently with other Peeks (under a read lock), and act on it while
// no event runs.
func (c *Core) Peek(key string, h uint64) (to string, ok bool) {
	if c.Seeded && !c.joined || c.leaving != nil {
		return "", false
	}
	if _, marked := c.marks[key]; marked {
		return "", false
	}
	if _, pulling := c.pulls[key]; pulling {
		return "", false
	}
	if o := c.Owner(h); o != c.self {
		return o, true
	}
	if to, _ := c.nextSource(key, h, nil); to != "" {
		return "", false
	}
	if to, _ := c.maybeHolder(h, nil); to != "" {
		return "", false
	}
	return "", true
}

// away sends a call on to the member to: Forward for a call made here,
// Moved for a forwarded one.
func (c *Core) away(k Call, to string) Action {
	if k.Forwarded {
		return Action{Kind: Moved, To: to}
	}
	return Action{Kind: Forward, To: to}
}

// pull starts a pull of k's state from to.
func (c *Core) pull(k Call, to string) Action {
	if f := c.pulls[k.Key]; f != nil {
		return Action{Kind: Wait}
	}
	c.pulls[k.Key] = &flight{asked: []string{to}}
	return Action{Kind: Pull, To: to}
}

// setInc records the incarnation a new pull asks for.
func (c *Core) setInc(key string, a Action) {
	if f := c.pulls[key]; f != nil && a.Kind == Pull {
		f.inc = a.Inc
	}
}

// nextSource is the newest unresolved source of key not asked yet, "" if
// none: the member that owned key before this node, in a ring change whose
// hand-off that member has not finished.
func (c *Core) nextSource(key string, h uint64, asked []string) (string, uint64) {
	for i := len(c.srcs) - 1; i >= 0; i-- {
		s := c.srcs[i]
		o := s.prev.OwnerOfHash(h)
		if o == "" || o == c.self || s.done[o] || contains(asked, o) {
			continue
		}
		return o, incOf(s.prev, o)
	}
	return "", 0
}

// maybeHolder is a member to ask, in case, for a key that came here in a
// ring change whose owners before are done: one of the change's members
// that has not said Done yet. A false death can leave a state with a
// member the ring never gave the key (it took it while the owner was
// thought dead), which pushes it to the key's new owner before it says
// Done; until then the previous owner's Done does not clear the key.
// "" if none (asked: the members asked already).
func (c *Core) maybeHolder(h uint64, asked []string) (string, uint64) {
	for i := len(c.srcs) - 1; i >= 0; i-- {
		s := c.srcs[i]
		if o := s.prev.OwnerOfHash(h); o == "" || o == c.self {
			continue // the key did not come here in this change
		}
		for _, m := range s.prev.Members() {
			if m != c.self && !s.done[m] && c.inView(m) && !contains(asked, m) {
				return m, incOf(s.prev, m)
			}
		}
	}
	return "", 0
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (c *Core) inView(name string) bool { return c.view != nil && c.view.Contains(name) }

// liveMark is key's mark if it still matters at now.
func (c *Core) liveMark(key string, now int64) *mark {
	m := c.marks[key]
	if m == nil {
		return nil
	}
	if m.until <= now {
		delete(c.marks, key)
		return nil
	}
	return m
}
