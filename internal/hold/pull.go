package hold

import "github.com/ringlimit/ringlimit"

// AnswerKind is what a pulled member said.
type AnswerKind uint8

const (
	None        AnswerKind = iota // it holds nothing for the key, and knows of nobody who may
	State                         // here is the state (it left the member with the answer)
	MovedTo                       // ask To: the state went there, or may be there
	Unreachable                   // no answer (the shell's pull timed out, or the member is gone)
	Mine                          // the member is taking the key itself (a pull of its own is on its way): go there
	Gone                          // the incarnation asked for is gone (the member restarted): it holds nothing of its predecessor's
	// Coming: the member leaves, gave way to the asker while a pull of its
	// own for the key is out, and sends what that pull finds to the asker
	// (a push): the state may be on its way there. The asker asks again
	// (after its pull timeout, as for a live member that did not answer)
	// until the state comes or the member says otherwise; it starts
	// nothing meanwhile.
	Coming
)

var answerNames = [...]string{"none", "state", "moved", "unreachable", "mine", "gone", "coming"}

func (k AnswerKind) String() string {
	if int(k) < len(answerNames) {
		return answerNames[k]
	}
	return "answer?"
}

// Answer is a pulled member's answer.
type Answer struct {
	Kind AnswerKind
	To   string           // MovedTo
	Inc  uint64           // MovedTo: To's incarnation, as the answerer knew it (0: unknown)
	St   *ringlimit.State // State; nil is a key whose state expired
	Ver  Version          // State
	// Leaving (with Unreachable): the member is still in the membership,
	// as a leaver this node's view dropped early (it refused a push as
	// one, see the package doc). Its leave is no death: it runs, holds
	// what it gave in answers that were not confirmed, and may answer
	// yet, so it is asked again as a member the view has alive. (It
	// leaves the membership once its hand-off is confirmed.)
	Leaving bool
}

// maxPullSteps bounds the members one pull asks, redirects included.
const maxPullSteps = 12

// maxPullTries bounds the pulls of one member that go unanswered before
// the member is given up on (see Pulled).
const maxPullTries = 3

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
	c.arrivals++
	f := c.pulls[key]
	act := c.pulled(key, h, from, a, held, now, f)
	if f != nil && a.Kind == Unreachable && !(act.Kind == Pull && act.To == from) && !act.Install {
		act.Drop = from // given up on (see Action.Drop)
	}
	return act
}

func (c *Core) pulled(key string, h uint64, from string, a Answer, held *Version, now int64, f *flight) Action {
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
	if c.leaving != nil {
		if f != nil && c.alive(from, f.inc, a) {
			// A leaver's pull waits for a live member as any pull does:
			// given up, the member would take back what it gave in an
			// answer still on its way (Drop), while the member this node
			// gave way to (ceded) was told nothing is here and starts the
			// key.
			f.tries++
			return Action{Kind: Pull, To: from, Inc: f.inc}
		}
		if act, ok := c.leaverPulled(key, h, f, got); ok {
			return act
		}
	}
	if f == nil {
		// The pull ended before its answer came (its state came by
		// another way): a state in the answer is this node's all the same.
		return Action{Kind: Decide, Install: got}
	}
	if f.maybe {
		if a.Kind != State && a.Kind != MovedTo && a.Kind != Mine && a.Kind != Coming {
			// A member asked only in case held nothing, or did not
			// answer: the next one that has not said Done, each once;
			// then, as before their Done, the key starts here (no store
			// load, no second try: slow is not a lead), or at its owner
			// if the ring moved on meanwhile.
			if to, inc := c.maybeHolder(h, f.asked); to != "" && len(f.asked) < maxPullSteps {
				f.asked = append(f.asked, to)
				f.tries, f.inc = 0, inc
				return Action{Kind: Pull, To: to, Inc: inc}
			}
			if f.sourced {
				// The sources said nothing before these were asked: the
				// key ends as a pull of its sources that found nothing.
				return c.nothingFound(key, h, f)
			}
			if o := c.Owner(h); o != c.self && !f.promised {
				return c.conclude(key, f, Action{Kind: Forward, To: o})
			}
			return c.conclude(key, f, Action{Kind: Decide})
		}
		f.maybe = false // a lead: followed as any
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
	case Coming:
		// from leaves, and gave way to this node while its own pull was
		// out: what that pull finds comes here (Arrived ends this pull).
		// Until it says otherwise, nothing starts here: told "nothing"
		// instead, this node started the key from the store while the
		// state was on its way to from (stress seed 11084). Asked again,
		// paced as a member that did not answer; not a step.
		f.tries = 0
		return Action{Kind: Pull, To: from, Inc: f.inc}
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
		live := c.alive(from, f.inc, a)
		if m := c.marks[key]; m != nil && m.to == from && m.copy != nil && !m.served && (a.Kind == Gone || f.tries >= maxPullTries-1 && !live) {
			// This node pushed the state to from, which is gone (or
			// cannot be reached) before it confirmed: the copy is the
			// state. It comes back here. (Not once the copy went out in
			// a pull's answer too: a later incarnation of from may have
			// asked under the same name, and installed it.)
			delete(c.marks, key)
			delete(c.pulls, key)
			return Action{Kind: Decide, Install: true, St: m.copy, Ver: m.ver}
		}
		if a.Kind == Unreachable && (f.tries < maxPullTries-1 || live) {
			// Slow is not dead: a member thought gone may still answer,
			// and it may hold the state. Ask again before giving up on it;
			// and while the failure detector still has it alive (it is in
			// this node's view), never give up: it may be deciding the
			// key now (paused, starved, or cut off from this node alone).
			// The calls meanwhile wait, or go to the store by their own
			// deadlines, not by this pull's.
			f.tries++
			return Action{Kind: Pull, To: from, Inc: f.inc}
		}
		// It may hold the state and be cut off, or have crashed: what it
		// wrote behind is in the store.
		f.cleared = append(f.cleared, from)
		if c.bugs&bugSkipLoad != 0 || f.ceded != "" {
			return c.conclude(key, f, Action{Kind: Decide}) // (a node that gave way sends the calls there)
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
		if o := c.Owner(h); o != c.self && !f.promised {
			return c.conclude(key, f, Action{Kind: Forward, To: o})
		}
		return Action{Kind: Load, Cleared: f.cleared} // the pull goes on until Loaded
	}
	if a.Kind == None {
		f.cleared = append(f.cleared, from)
		if by := f.namedBy[from]; by != "" && !f.hinted && len(f.asked) < maxPullSteps {
			// by said the state went to from, which holds nothing: a push
			// of it may still be on its way there, and by keeps a copy
			// until from confirms it. Tell by, and ask it again: the copy
			// comes here (from, when it arrives, sends it on after it).
			f.hinted = true
			f.asked = append(f.asked, by)
			gone, inc := from, f.inc
			f.tries, f.inc = 0, 0
			return Action{Kind: Pull, To: by, Gone: gone, GoneInc: inc}
		}
	}
	// Nothing there: the next source, if any.
	if to, inc := c.nextSource(key, h, f.asked); to != "" {
		f.asked = append(f.asked, to)
		f.tries, f.inc = 0, inc
		return Action{Kind: Pull, To: to, Inc: inc}
	}
	if to, inc := c.maybeHolder(h, f.asked); to != "" && len(f.asked) < maxPullSteps && c.bugs&bugNoMaybeAfterSources == 0 {
		// The owners before hold nothing, but a member of the change
		// that has not said Done may: a leaver hands a key to the owner
		// of its own view, which may not be the ring's owner now (it
		// sends it on as a stray, and says Done only once that push is
		// confirmed). Each such member is asked once, as Call does for
		// a key with no source.
		f.asked = append(f.asked, to)
		f.tries, f.inc = 0, inc
		f.maybe, f.sourced = true, true
		return Action{Kind: Pull, To: to, Inc: inc}
	}
	return c.nothingFound(key, h, f)
}

// alive reports whether a (an answer of from) is Unreachable from a member
// the failure detector still has alive: in this node's view, or a leaver
// still in the membership (Answer.Leaving). Such a member is asked again,
// never given up (unless the shell stops).
//
// The view must have the incarnation asked for (inc, 0 if any): a member
// that restarted under its name is another member, and its predecessor,
// which the pull asked, is gone. (Without it, a pull of a crashed member's
// key asked its gone incarnation for good once the view had its successor:
// stress seed 14412's calls were never answered.)
func (c *Core) alive(from string, inc uint64, a Answer) bool {
	if inc != 0 && c.inView(from) && !a.Leaving {
		if in := incOf(c.view, from); in != 0 && in != inc {
			return false
		}
	}
	return a.Kind == Unreachable && (c.inView(from) || a.Leaving) && !c.stopped && c.bugs&bugGiveUpLive == 0
}

// nothingFound ends a pull of key whose sources (and the members asked in
// case) held nothing.
func (c *Core) nothingFound(key string, h uint64, f *flight) Action {
	if m := c.marks[key]; m != nil && m.to != c.self && m.copy != nil {
		// This node gave the state away while its pull was out, and the
		// push is not confirmed: the state is there, or comes back here.
		return c.conclude(key, f, Action{Kind: Decide}) // (sends the calls after the copy)
	}
	if o := c.Owner(h); o != c.self && !f.promised {
		// The ring moved on while the pull was out: the key starts at its
		// owner, not here. (Unless this node told others it takes the
		// key: their calls come here, and sending them on could make two
		// members send each other's calls back and forth.)
		return c.conclude(key, f, Action{Kind: Forward, To: o})
	}
	if c.Stored && f.ceded == "" {
		return Action{Kind: Load, Cleared: f.cleared} // the pull goes on until Loaded
	}
	return c.conclude(key, f, Action{Kind: Decide})
}

// leaverPulled ends a pull of a leaving node, which takes no key: a state
// the answer brings goes on to the member this node gave way to, or to the
// key's owner in the ring without this node, and the calls go after it;
// without a state the calls go to where the state is on its way, if a push
// of it is, or there. ok is false if this node is the last member: the
// pull goes on as for any node.
func (c *Core) leaverPulled(key string, h uint64, f *flight, got bool) (Action, bool) {
	to := ""
	if f != nil {
		to = f.ceded
	}
	if m := c.marks[key]; to == "" && !got && m != nil && m.to != c.self && m.copy != nil {
		to = m.to
	}
	if to == "" {
		to = c.leaving.OwnerOfHash(h)
	}
	if to == "" || to == c.self {
		return Action{}, false
	}
	delete(c.pulls, key)
	if got {
		delete(c.marks, key)
		return Action{Kind: Forward, To: to, Install: true, PushTo: to}, true
	}
	return Action{Kind: Forward, To: to}, true
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

// Loaded ends a pull whose last step was a load from the store: Decide (the
// shell then installs what it loaded, if anything, and decides), or Forward
// if this node gave the key way meanwhile (the shell installs nothing).
//
// claimant is the member the store says took the key before (see
// Action.Cleared), "" if this node's claim stood: the calls then go
// there, asked as a source, instead.
func (c *Core) Loaded(key string, claimant string, inc uint64) Action {
	c.arrivals++
	f := c.pulls[key]
	if f == nil {
		return Action{Kind: Decide}
	}
	if claimant != "" && claimant != c.self {
		// Another member loaded the key first: it holds it, or knows who
		// does. The load here is not installed.
		if len(f.asked) >= maxPullSteps {
			// Out of steps (members that each named the other while a
			// push between them was on its way): the claim still stands,
			// so the key is not started here; the calls go to the
			// claimant, which holds it or sends them on.
			return c.conclude(key, f, Action{Kind: Forward, To: claimant})
		}
		f.asked = append(f.asked, claimant)
		f.tries, f.inc = 0, inc
		return Action{Kind: Pull, To: claimant, Inc: inc}
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
	// Fork is a fresh origin (not 0), for a copy served while the push it
	// is a copy of may still arrive (see Version.Fork).
	Fork uint64
}

// Reply is what this node answers to a pull. With Give the shell takes the
// state out of the local store, answers with it and calls Gave; with
// GiveCopy it answers with Copy (the copy of an unconfirmed push, which
// leaves with the answer); else it answers A.
type Reply struct {
	Give bool
	keep bool // (bugPullTwice) answer with the state and keep it
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
		if c.bugs&bugPullTwice != 0 {
			return Reply{keep: true}
		}
		return Reply{Give: true}
	}
	if m := c.liveMark(a.Key, a.Now); m != nil && a.Gone != "" && m.to == a.Gone && m.copy != nil && !m.served &&
		(a.GoneInc == 0 || m.inc == 0 || m.inc == a.GoneInc) {
		// The member this node pushed the state to is gone in the
		// incarnation it was pushed to: the copy is the state, and goes
		// to the asker (kept as its copy until it confirms). Not once the
		// copy went out in a pull's answer: the member may have asked
		// again in a later incarnation, and installed it.
		//
		// The push may still arrive at m.to, which then passes it on to
		// the asker: the state forks here. The copy served carries an
		// origin of its own (Fork), so that each branch knows the other
		// when they meet: the push's is an ancestor of this one's, never
		// a descendant (Arrived drops it), and this one is never taken
		// for a late copy of the push (by epochs alone, a relay of the
		// push could pass the version of this branch, decided on and
		// handed back, and both were dropped: the key lost).
		fv := m.ver.Fork(a.Fork)
		c.setMark(a.Key, &mark{to: a.From, ver: m.ver, copy: m.copy, until: m.until, served: true})
		return Reply{Copy: m.copy, Ver: fv, A: Answer{Kind: State, St: m.copy, Ver: fv}}
	}
	if m := c.liveMark(a.Key, a.Now); m != nil && m.to == a.From && m.copy != nil {
		// Every pull of its gets the copy until it confirms one: an
		// answer may be lost, or come after the asker gave up on it.
		m.served = true
		return Reply{Copy: m.copy, Ver: m.ver, A: Answer{Kind: State, St: m.copy, Ver: m.ver}}
	}
	if m := c.liveMark(a.Key, a.Now); m != nil && m.copy != nil && m.to != c.self {
		// A push of the state to m.to is on its way: it is there, or comes
		// back here (a pull of this node's own, to take it back, may be out
		// too). The asker goes there; the copy is never given up for it.
		return Reply{A: Answer{Kind: MovedTo, To: m.to, Inc: m.inc}}
	}
	// Not here. Whoever may still hold it for this node (an unresolved
	// source of its own, a pull on its way) holds it for the asker now.
	if f := c.pulls[a.Key]; f != nil {
		// (A leaving node takes no key: it gives way to the asker, and
		// what its pull finds goes there.)
		if last := f.asked[len(f.asked)-1]; last != a.From && c.leaving == nil {
			// This node is taking the key already: the asker's calls come
			// here. (Sent on to the member this node asks, the two could
			// each give it up and both start it.)
			f.promised = true
			return Reply{A: Answer{Kind: Mine}}
		}
		// Both take the key at once from each other, each from its own
		// view. One gives way: the lower name keeps it.
		if c.self < a.From && f.ceded == "" && c.leaving == nil {
			f.promised = true
			return Reply{A: Answer{Kind: Mine}}
		}
		f.ceded = a.From
		c.setMark(a.Key, &mark{to: a.From, until: a.Now + c.MaxUntil})
		if last := f.asked[len(f.asked)-1]; last != a.From && c.leaving != nil {
			// A leaver's pull asks another member, whose answer may
			// bring the state: it goes on to the asker (ceded), which
			// waits for it.
			return Reply{A: Answer{Kind: Coming}}
		}
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
