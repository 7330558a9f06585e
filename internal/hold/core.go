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

// Version orders the states of one key across holders, so that a late
// copy never overwrites a newer one (in a hand-off or in the store). Epoch
// rises at every hand-over of the state (a hybrid clock: at least the
// giver's epoch + 1 and the taker's clock in ms); Seq counts the holder's
// writes within its epoch. Origins name the fresh starts the state counts:
// a key that two nodes started independently (while they disagreed on its
// owner) holds two lineages, and their states merge (local.Merge) when they
// meet; a state whose origins another already covers is a copy of it, and
// does not.
type Version struct {
	Epoch, Seq uint64
	Origins    [3]uint64 // 0: none
}

// Fresh is the version of a state that starts at now (ms) on a node, with
// origin a number unique to this start (0 is none).
func Fresh(now int64, origin uint64) Version {
	v := Version{Epoch: uint64(max(now, 1))}
	v.Origins[0] = origin
	return v
}

// Covers reports whether v counts every start w counts.
func (v Version) Covers(w Version) bool {
	for _, o := range w.Origins {
		if o != 0 && o != v.Origins[0] && o != v.Origins[1] && o != v.Origins[2] {
			return false
		}
	}
	return true
}

// Join is the version of the merge of states of versions v and w. Past three
// origins the oldest are forgotten (a copy of one may then merge again: it
// admits less, never more).
func Join(v, w Version) Version {
	j := Version{Epoch: max(v.Epoch, w.Epoch), Seq: max(v.Seq, w.Seq)}
	n := 0
	add := func(o uint64) {
		if o == 0 {
			return
		}
		for _, x := range j.Origins[:min(n, len(j.Origins))] {
			if x == o {
				return
			}
		}
		if n < len(j.Origins) {
			j.Origins[n] = o
		} else {
			copy(j.Origins[:], j.Origins[1:])
			j.Origins[len(j.Origins)-1] = o
		}
		n++
	}
	for _, o := range v.Origins {
		add(o)
	}
	for _, o := range w.Origins {
		add(o)
	}
	return j
}

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	return v.Epoch < w.Epoch || v.Epoch == w.Epoch && v.Seq < w.Seq
}

// Next is the version a state takes when it changes hands at now (ms).
func (v Version) Next(now int64) Version {
	e := v.Epoch + 1
	if now > 0 && uint64(now) > e {
		e = uint64(now)
	}
	return Version{Epoch: e, Origins: v.Origins}
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

// AnswerKind is what a pulled member said.
type AnswerKind uint8

const (
	None        AnswerKind = iota // it holds nothing for the key, and knows of nobody who may
	State                         // here is the state (it left the member with the answer)
	MovedTo                       // ask To: the state went there, or may be there
	Unreachable                   // no answer (the shell's pull timed out, or the member is gone)
	Mine                          // the member is taking the key itself (a pull of its own is on its way): go there
	Gone                          // the incarnation asked for is gone (the member restarted): it holds nothing of its predecessor's
)

// Answer is a pulled member's answer.
type Answer struct {
	Kind AnswerKind
	To   string           // MovedTo
	Inc  uint64           // MovedTo: To's incarnation, as the answerer knew it (0: unknown)
	St   *ringlimit.State // State; nil is a key whose state expired
	Ver  Version          // State
}

// mark says that this node gave a key's state to another member.
type mark struct {
	to     string
	inc    uint64           // to's incarnation when marked (0: unknown)
	ver    Version          // the version given
	copy   *ringlimit.State // the state pushed to to, until to confirms it (a pull may take it)
	served bool             // the copy went out in a pull's answer too: it may be installed there
	until  int64            // ms: after it the state no longer matters, nor the mark
}

// source is what a ring change left behind: for every key this node owns
// now and another member owned in prev, that member may hold the state.
type source struct {
	id   uint64
	at   int64 // ms, when the change was seen: after at+MaxUntil no state it stands for matters
	prev View
	done map[string]bool // members that resolved it (Done)
}

// flight is one pull in progress for a key: the members asked so far.
type flight struct {
	asked   []string
	namedBy map[string]string // a member asked -> the member whose MovedTo named it
	hinted  bool              // a Gone has been reported back once
	tries   int               // unanswered pulls of the last member asked
	inc     uint64            // the incarnation of the last member asked
	ceded   string            // this node answered a pull of the key meanwhile and gave way to this member
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

	bugs Bug // planted bugs, for the simulator's mutation check
}

// Bug plants one known bug in the core, so that the simulator's mutation
// test can show it finds each.
type Bug uint8

const (
	BugTwoHolders Bug = 1 << iota // a node that gave a key away decides it afresh
	BugPullTwice                  // a pull is answered with the state, and the state stays
	BugSkipLoad                   // an unreachable source is given up without the store load
	BugSkipWindow                 // a ring change leaves no source: new owners decide at once
)

// New returns the core of the node named self, alone in its ring.
func New(self string) *Core {
	return &Core{self: self, marks: map[string]*mark{}, pulls: map[string]*flight{},
		maxMarks: 1 << 20, MaxUntil: 25 * 3600 * 1000}
}

// SetBugs plants bugs (tests only).
func (c *Core) SetBugs(b Bug) { c.bugs = b }

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
	if prev != nil && c.bugs&BugSkipWindow == 0 {
		c.nextSrc++
		c.srcs = append(c.srcs, &source{id: c.nextSrc, at: now, prev: prev, done: map[string]bool{}})
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
		return c.leaving.OwnerOfHash(h)
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
	if m := c.liveMark(k.Key, k.Now); m != nil && c.bugs&BugTwoHolders == 0 {
		if m.to == k.Via || (!c.inView(m.to) && c.leaving == nil) {
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
		to := c.leaving.OwnerOfHash(k.Hash)
		if to == "" || to == c.self {
			return Action{Kind: Decide} // the last member
		}
		return c.away(k, to)
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
	return Action{Kind: Decide}
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

// maxPullSteps bounds the members one pull asks, redirects included.
const maxPullSteps = 12

// maxPullTries bounds the pulls of one member that go unanswered before
// the member is given up on (see Pulled).
const maxPullTries = 3

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

// Pulled gives the core the answer of a pull of key, from the member named
// from. It returns what the shell does next: Decide (the state, if one
// came, is to be installed first: see Arrived), Pull from another member,
// or Load from the store. The calls that waited (Wait) are then called
// again.
//
// held is the version of the key's state in the local store, nil if none:
// one that came back while the pull was out ends it, and the calls are
// decided here. Install over a held state means merging the two.
func (c *Core) Pulled(key string, h uint64, from string, a Answer, held *Version, now int64) Action {
	f := c.pulls[key]
	got := a.Kind == State && a.St != nil
	if m := c.liveMark(key, now); got && m != nil && m.to != c.self && !m.ver.Less(a.Ver) {
		// A stale copy (the state came here by another way too, and this
		// node passed it on since): m.to holds it or knows who does.
		delete(c.pulls, key)
		return Action{Kind: Forward, To: m.to}
	}
	if held != nil {
		delete(c.pulls, key)
		return Action{Kind: Decide, Install: got && !held.Covers(a.Ver)}
	}
	if f == nil {
		// The pull ended before its answer came (its state came by
		// another way): a state in the answer is this node's all the same.
		return Action{Kind: Decide, Install: got}
	}
	switch a.Kind {
	case State:
		delete(c.pulls, key)
		delete(c.marks, key)
		if f.ceded != "" && a.St != nil {
			// This node gave way to f.ceded while its pull was out: the
			// state goes there (the shell installs it, pushes it to To and
			// sends the calls after it); two starts there merge.
			return Action{Kind: Forward, To: f.ceded, Install: true, PushTo: f.ceded}
		}
		if a.St == nil {
			// It had one, and it expired: the key starts here.
			return c.conclude(key, f, Action{Kind: Decide})
		}
		return Action{Kind: Decide, Install: true}
	case MovedTo:
		// (A member may be asked again: it may have said "ask X" while a
		// pull of its own was out, and hold the state now.)
		if a.To != "" && a.To != c.self && len(f.asked) < maxPullSteps {
			f.asked = append(f.asked, a.To)
			f.tries, f.inc = 0, a.Inc
			if f.namedBy == nil {
				f.namedBy = map[string]string{}
			}
			f.namedBy[a.To] = from
			return Action{Kind: Pull, To: a.To, Inc: a.Inc}
		}
	case Mine:
		// from is taking the key (or won the tie with this node): the
		// calls go there. A mark that says where the state is stays.
		delete(c.pulls, key)
		if c.liveMark(key, now) == nil {
			c.setMark(key, &mark{to: from, until: now + c.MaxUntil})
		}
		return Action{Kind: Forward, To: from}
	case Unreachable, Gone:
		if by := f.namedBy[from]; a.Kind == Gone && by != "" && !f.hinted && len(f.asked) < maxPullSteps {
			// from was named by by, and its incarnation is gone: by may
			// hold a copy of what it pushed there. Tell it, and ask again.
			f.hinted = true
			f.asked = append(f.asked, by)
			gone, inc := from, f.inc
			f.tries, f.inc = 0, 0
			return Action{Kind: Pull, To: by, Gone: gone, GoneInc: inc}
		}
		if m := c.marks[key]; m != nil && m.to == from && m.copy != nil && (a.Kind == Gone || f.tries >= maxPullTries-1) {
			// This node pushed the state to from, which is gone (or
			// cannot be reached) before it confirmed: the copy is the
			// state. It comes back here.
			delete(c.marks, key)
			delete(c.pulls, key)
			return Action{Kind: Decide, Install: true, St: m.copy, Ver: m.ver}
		}
		if a.Kind == Unreachable && f.tries < maxPullTries-1 {
			// Slow is not dead: a member thought gone may still answer,
			// and it may hold the state. Ask again before giving up on it.
			f.tries++
			return Action{Kind: Pull, To: from, Inc: f.inc}
		}
		// It may hold the state and be cut off, or have crashed: what it
		// wrote behind is in the store.
		if c.bugs&BugSkipLoad != 0 {
			return c.conclude(key, f, Action{Kind: Decide})
		}
		if m := c.marks[key]; m != nil && m.to != c.self && m.copy != nil {
			return c.conclude(key, f, Action{Kind: Decide}) // (sends the calls after the copy)
		}
		if to, inc := c.nextSource(key, h, f.asked); to != "" && len(f.asked) < maxPullSteps {
			// One lead lost; the others may hold it.
			f.asked = append(f.asked, to)
			f.tries, f.inc = 0, inc
			return Action{Kind: Pull, To: to, Inc: inc}
		}
		if o := c.Owner(h); o != c.self {
			return c.conclude(key, f, Action{Kind: Forward, To: o})
		}
		return Action{Kind: Load} // the pull goes on until Loaded
	}
	// Nothing there: the next source, if any.
	if to, inc := c.nextSource(key, h, f.asked); to != "" {
		f.asked = append(f.asked, to)
		f.tries, f.inc = 0, inc
		return Action{Kind: Pull, To: to, Inc: inc}
	}
	if m := c.marks[key]; m != nil && m.to != c.self && m.copy != nil {
		// This node gave the state away while its pull was out, and the
		// push is not confirmed: the state is there, or comes back here.
		return c.conclude(key, f, Action{Kind: Decide}) // (sends the calls after the copy)
	}
	if o := c.Owner(h); o != c.self {
		// The ring moved on while the pull was out: the key starts at its
		// owner, not here.
		return c.conclude(key, f, Action{Kind: Forward, To: o})
	}
	if c.Stored {
		return Action{Kind: Load} // the pull goes on until Loaded
	}
	return c.conclude(key, f, Action{Kind: Decide})
}

// Path is the members the pull of key on its way has asked, for the
// next pull's Ask.Path.
func (c *Core) Path(key string) []string {
	if f := c.pulls[key]; f != nil {
		return f.asked
	}
	return nil
}

// Stray is the member a state held here goes to once decided: its owner in
// this node's view, or "" if that is this node.
func (c *Core) Stray(h uint64) string {
	if o := c.Owner(h); o != c.self {
		return o
	}
	return ""
}

// Loaded ends a pull whose last step was a load from the store (the
// state, if the store had one, is installed): Decide, or Forward if this
// node gave the key way meanwhile.
func (c *Core) Loaded(key string) Action {
	f := c.pulls[key]
	if f == nil {
		return Action{Kind: Decide}
	}
	return c.conclude(key, f, Action{Kind: Decide})
}

// conclude ends a pull that found no state: the key starts here (act),
// unless this node gave way meanwhile.
func (c *Core) conclude(key string, f *flight, act Action) Action {
	delete(c.pulls, key)
	if f.ceded != "" {
		// While this pull was on its way, this node answered a pull of
		// the key's with "nothing here": the asker holds it.
		return Action{Kind: Forward, To: f.ceded}
	}
	if m := c.marks[key]; m != nil && m.to != c.self {
		if m.copy != nil {
			// A push of the state to m.to is on its way: the state is
			// there, or comes back here (TakeBack). The calls go there.
			return Action{Kind: Forward, To: m.to}
		}
		delete(c.marks, key) // it came back here empty
	}
	return act
}

// Ask is a pull asked of this node.
type Ask struct {
	Key  string
	Hash uint64
	From string // the member that asks
	Inc  uint64 // the incarnation of this node the asker expects (0: any)
	// Path is the members this pull asked before this node (see Path): a
	// member is never sent back to one of them, so a cycle of members
	// that each name the other ends with a definite answer.
	Path []string
	// Gone, in its incarnation GoneInc, was found gone by the asker after
	// this node named it (see Action.Gone): a copy this node pushed there
	// is the state, and goes to the asker.
	Gone    string
	GoneInc uint64
	Has     bool // the key's state is in the local store
	Now     int64
}

// Reply is what this node answers to a pull. With Give the shell takes the
// state out of the local store, answers with it and calls Gave; with
// GiveCopy it answers with Copy (the copy of an unconfirmed push, which
// leaves with the answer); else it answers A.
type Reply struct {
	Give bool
	Keep bool // (BugPullTwice) answer with the state and keep it
	Copy *ringlimit.State
	Ver  Version
	A    Answer
}

// Asked answers a pull.
func (c *Core) Asked(a Ask) Reply {
	// It may ask an earlier incarnation of this node, gone with whatever
	// it held. This one answers from what it knows of the key now (it may
	// have taken the key since); knowing nothing, it says Gone: the store
	// has what the earlier one wrote behind.
	earlier := a.Inc != 0 && a.Inc != c.Inc
	if a.Has {
		if c.bugs&BugPullTwice != 0 {
			return Reply{Keep: true}
		}
		return Reply{Give: true}
	}
	if m := c.liveMark(a.Key, a.Now); m != nil && a.Gone != "" && m.to == a.Gone && m.copy != nil &&
		(a.GoneInc == 0 || m.inc == 0 || m.inc == a.GoneInc) {
		// The member this node pushed the state to is gone in the
		// incarnation it was pushed to: the copy is the state, and goes
		// to the asker (kept as its copy until it confirms).
		c.setMark(a.Key, &mark{to: a.From, ver: m.ver, copy: m.copy, until: m.until, served: true})
		return Reply{Copy: m.copy, Ver: m.ver, A: Answer{Kind: State, St: m.copy, Ver: m.ver}}
	}
	if m := c.liveMark(a.Key, a.Now); m != nil && m.to == a.From && m.copy != nil {
		// Every pull of its gets the copy until it confirms one: an
		// answer may be lost, or come after the asker gave up on it.
		m.served = true
		return Reply{Copy: m.copy, Ver: m.ver, A: Answer{Kind: State, St: m.copy, Ver: m.ver}}
	}
	// Not here. Whoever may still hold it for this node (an unresolved
	// source of its own, a pull on its way) holds it for the asker now.
	if f := c.pulls[a.Key]; f != nil {
		if last := f.asked[len(f.asked)-1]; last != a.From {
			// This node is taking the key already: the asker's calls come
			// here. (Sent on to the member this node asks, the two could
			// each give it up and both start it.)
			return Reply{A: Answer{Kind: Mine}}
		}
		// Both take the key at once from each other, each from its own
		// view. One gives way: the lower name keeps it.
		if c.self < a.From && f.ceded == "" {
			return Reply{A: Answer{Kind: Mine}}
		}
		f.ceded = a.From
		c.setMark(a.Key, &mark{to: a.From, until: a.Now + c.MaxUntil})
		return Reply{A: Answer{Kind: None}}
	}
	if m := c.liveMark(a.Key, a.Now); m != nil && m.to != c.self {
		if m.to == a.From {
			return Reply{A: Answer{Kind: None}} // it confirmed it
		}
		return Reply{A: Answer{Kind: MovedTo, To: m.to, Inc: m.inc}}
	}
	if o, inc := c.nextSource(a.Key, a.Hash, append(a.Path[:len(a.Path):len(a.Path)], a.From)); o != "" {
		return Reply{A: Answer{Kind: MovedTo, To: o, Inc: inc}}
	}
	if earlier {
		return Reply{A: Answer{Kind: Gone}}
	}
	// Nothing here: the asker holds the key from now on. The mark sends
	// later calls, pulls and late states of the key on to it.
	c.setMark(a.Key, &mark{to: a.From, until: a.Now + c.MaxUntil})
	return Reply{A: Answer{Kind: None}}
}

func (c *Core) setMark(key string, m *mark) {
	if m.inc == 0 && c.view != nil {
		m.inc = incOf(c.view, m.to)
	}
	if _, ok := c.marks[key]; !ok && len(c.marks) >= c.maxMarks {
		// Full: the oldest-expiring marks would go first in a real
		// bound; a mark is the truth, so keep it and grow (counted).
	}
	c.marks[key] = m
}

// Gave records that key's state (version ver, expiring at until) left this
// node for the member to, in a push or in a pull's answer: copy is the
// state sent, kept until Confirmed (an answer lost on the way is not a
// state lost: the member's next pull gets the copy).
func (c *Core) Gave(key, to string, ver Version, copy *ringlimit.State, until int64) {
	c.setMark(key, &mark{to: to, ver: ver, copy: copy, until: until})
}

// Pending returns the copy this node keeps of key's state for a push to
// the member to that is not confirmed yet: what a retry of the push may
// send. false if there is none (confirmed, taken back, or given on).
func (c *Core) Pending(key, to string) (*ringlimit.State, Version, bool) {
	m := c.marks[key]
	if m == nil || m.to != to || m.copy == nil {
		return nil, Version{}, false
	}
	return m.copy, m.ver, true
}

// MarkInc is the incarnation of the member key's state was given to, as
// this node knew it then (0: unknown): a push of it is meant for that
// incarnation only (Arrival.Inc).
func (c *Core) MarkInc(key string) uint64 {
	if m := c.marks[key]; m != nil {
		return m.inc
	}
	return 0
}

// HasCopy reports whether this node keeps a copy of key's state for a
// member it gave it to (not confirmed yet).
func (c *Core) HasCopy(key string) bool {
	m := c.marks[key]
	return m != nil && m.copy != nil
}

// Confirmed records that the member to installed the state pushed to it.
func (c *Core) Confirmed(key, to string) {
	if m := c.marks[key]; m != nil && m.to == to {
		m.copy = nil
	}
}

// TakeBack undoes a push that could not be delivered: it returns the copy
// to import again, if the mark still holds it (a pull did not take it).
// A pull of the key on its way ends: the state is here again (the shell
// decides the calls that waited for it).
func (c *Core) TakeBack(key, to string) (*ringlimit.State, Version, bool) {
	m := c.marks[key]
	if m == nil || m.to != to || m.copy == nil || m.served {
		// (A copy served in a pull's answer may be installed at to even
		// though to refused the push: it stays given.)
		return nil, Version{}, false
	}
	delete(c.marks, key)
	delete(c.pulls, key)
	return m.copy, m.ver, true
}

// Arrival is a state that arrived in a push.
type Arrival struct {
	Key  string
	Hash uint64
	From string
	Inc  uint64 // the incarnation of this node the push was meant for (0: any)
	Ver  Version
	Has  bool    // a state is here already
	Held Version // its version, if Has
	Now  int64
}

// Arrived says whether a pushed state is installed, and if so where it goes
// on: "" (it stays: this node owns the key) or the member to push it to.
// Installing over a state that is here means merging the two (local.Merge):
// they were started apart.
// A node that leaves refuses every state (refused): its sender keeps it
// (TakeBack), since what arrives now could stay behind.
func (c *Core) Arrived(a Arrival) (install bool, on string, refused bool) {
	if a.Inc != 0 && a.Inc != c.Inc {
		// Meant for an earlier incarnation of this node, which is gone:
		// the sender keeps it (it may have taken its copy back already).
		return false, "", true
	}
	// A copy of a state that arrived here before (a retried push whose
	// answer was lost) is acknowledged, not refused: its sender must not
	// take back what this node installed.
	if a.Has && a.Held.Covers(a.Ver) {
		return false, "", false // a copy of one installed already
	}
	if m := c.liveMark(a.Key, a.Now); m != nil && m.to != c.self && !m.ver.Less(a.Ver) {
		return false, "", false // a late copy of one this node has passed on since
	}
	if c.leaving != nil {
		// Refused: the state stays with its sender, and pulls and calls
		// that reach this node for the key go there.
		c.setMark(a.Key, &mark{to: a.From, until: a.Now + c.MaxUntil})
		return false, "", true
	}
	delete(c.marks, a.Key)
	delete(c.pulls, a.Key) // a pull on its way ends here: the state came
	if o := c.Owner(a.Hash); o != c.self && o != a.From {
		return true, o, false
	}
	// Owned here, or owned by its sender in this node's view: the sender
	// gave it here on its own view (it leaves, or its ring is newer), and
	// its mark sends the key's calls here. It is never pushed back.
	return true, "", false
}

// Tick lets the core drop what has expired at now.
func (c *Core) Tick(now int64) { c.expire(now) }

// Done is a member's word that it holds no state for the keys this node
// owns in the view viewID, and expects none (it is Clean). It resolves the
// sources that name it, and reports whether this node became Clean by it
// (the shell then sends its own Done, once its push is confirmed).
func (c *Core) Done(from string, viewID uint64) (becameClean bool) {
	if viewID != c.viewID || len(c.srcs) == 0 {
		return false
	}
	kept := c.srcs[:0]
	for _, s := range c.srcs {
		s.done[from] = true
		if !c.resolved(s) {
			kept = append(kept, s)
		}
	}
	clear(c.srcs[len(kept):])
	c.srcs = kept
	return len(c.srcs) == 0
}

// resolved reports whether every other member of s.prev has resolved s.
// A member that left cannot: its keys are pulled from it (or loaded from
// the store) one by one until the source expires.
func (c *Core) resolved(s *source) bool {
	for _, o := range s.prev.Members() {
		if o != c.self && !s.done[o] {
			return false
		}
	}
	return true
}

// Clean reports whether this node expects no state from another member: no
// unresolved source and no pull on its way.
func (c *Core) Clean() bool { return len(c.srcs) == 0 && len(c.pulls) == 0 }
