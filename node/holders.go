package node

import (
	"sync"
	"sync/atomic"

	"github.com/ringlimit/ringlimit/local"
	"github.com/ringlimit/ringlimit/ring"
	"hash/maphash"
)

// holders is the single source of truth for "who holds this key" while
// ownership changes. Every decision on a key here and every hand-over of
// its state (push, pull, install) runs under the key's stripe lock, so no
// call decides on a key after its state left, and a state never arrives
// while another decision here starts the key afresh.
//
// It keeps a mark for each key whose state moved: to the member that holds
// it now (a copy of a pushed state stays in the mark until that member
// confirms it or pulls it, so a failed push can take it back), or to this
// node itself
// (the key is settled here: it needs no pull before deciding). Marks matter
// only within the hand-off window and while leaving; the table is cleared
// when the window ends. The local store holds states only; it knows nothing
// of marks.
type holders struct {
	self     string
	current  func(*mark) bool // whether a mark's member may still hold its key
	changing func() bool      // within the hand-off window
	local    *local.Limiter
	seed     maphash.Seed
	max      int // marks kept at most; beyond it no new mark is made (see give)

	count   atomic.Int64
	moving  atomic.Int64              // hand-overs taking states out of the local store now (see quiet)
	leaving atomic.Pointer[ring.Ring] // set by Close: every key goes to its owner in it
	stripes [holderStripes]holderStripe
}

const holderStripes = 64

type holderStripe struct {
	mu    sync.Mutex
	marks map[string]*mark
	_     [48]byte // keep neighbouring stripes' locks off this cache line
}

// mark says where a key's state is.
type mark struct {
	to   string       // the member that holds the key; this node's own name: settled here
	addr string       // to's RPC address when marked; "" if it was not known yet
	at   int64        // Config.Clock, ms, when marked
	st   *local.State // the state pushed to to, until to confirmed or pulled it
}

func (h *holders) init(self string, l *local.Limiter, max int) {
	h.self, h.local, h.max, h.seed = self, l, max, maphash.MakeSeed()
	for i := range h.stripes {
		h.stripes[i].marks = map[string]*mark{}
	}
}

// lock locks key's stripe: what runs until unlock is one step for the key.
func (h *holders) lock(key string) *holderStripe {
	s := &h.stripes[maphash.String(h.seed, key)%holderStripes]
	s.mu.Lock()
	return s
}

func (s *holderStripe) unlock() { s.mu.Unlock() }

// get returns key's mark, nil if none. The stripe is locked.
func (s *holderStripe) get(key string) *mark {
	if len(s.marks) == 0 {
		return nil
	}
	return s.marks[key]
}

// set replaces key's mark. A mark that says the key is settled here is an
// optimisation (it saves a pull) and is refused beyond the table's bound; a
// mark that says the key moved is the truth and is always kept (there are
// at most as many as the states this node gave away within the window). It
// reports whether the key has m as its mark now. The stripe is locked.
func (h *holders) set(s *holderStripe, key string, m *mark) bool {
	if _, ok := s.marks[key]; !ok {
		if m.to == h.self && h.count.Load() >= int64(h.max) {
			return false
		}
		h.count.Add(1)
	}
	s.marks[key] = m
	return true
}

// drop removes key's mark. The stripe is locked.
func (h *holders) drop(s *holderStripe, key string) {
	if _, ok := s.marks[key]; ok {
		delete(s.marks, key)
		h.count.Add(-1)
	}
}

// clear drops every mark: the hand-off window is over.
func (h *holders) clear() {
	for i := range h.stripes {
		s := &h.stripes[i]
		s.mu.Lock()
		h.count.Add(-int64(len(s.marks)))
		clear(s.marks)
		s.mu.Unlock()
	}
}

// forget drops the marks that gone reports true for, and returns the keys
// whose copies were still unconfirmed with their copies.
func (h *holders) forget(gone func(*mark) bool) {
	for i := range h.stripes {
		s := &h.stripes[i]
		s.mu.Lock()
		for k, m := range s.marks {
			if m.to != h.self && gone(m) {
				delete(s.marks, k)
				h.count.Add(-1)
			}
		}
		s.mu.Unlock()
	}
}

// quiet reports whether no key changes hands: no mark, no hand-over taking
// a state out, not within the hand-off window, not leaving. A decision on an
// owned key needs no stripe lock when the key's state is here (a mark that
// says a key moved is only ever set with its state gone from the local
// store, in one step under the stripe lock and the store's), or when quiet
// allows a state to start here: the local store asks it under its own lock
// (local.AllowNIfAt), and a hand-over raises moving before it takes a state
// out under that same lock, so a decision either ran before the state left
// (and left with it) or sees quiet false and takes the chain's slow way,
// past the key's mark.
func (h *holders) quiet() bool {
	return h.moving.Load() == 0 && h.count.Load() == 0 && h.leaving.Load() == nil && !h.changing()
}

// size is the number of marks.
func (h *holders) size() int { return int(h.count.Load()) }

// pickHolder implements holderPicker.
func (h *holders) pickHolder(key, from string) (s *holderStripe, to, src string, settled bool) {
	src = from
	s = h.lock(key)
	m := s.get(key)
	if m != nil && m.to != h.self {
		if m.to != from && h.current(m) {
			s.unlock()
			return nil, m.to, "", false
		}
		// It gave the key back (it redirected the call here), or it left
		// the ring: it pushed what it held on, or crashed (the store has
		// what it wrote behind), or is only suspected and comes back in a
		// moment. Either way the state comes from it or from the store
		// before this node decides.
		src = m.to
		h.drop(s, key)
		m = nil
	}
	if lr := h.leaving.Load(); lr != nil {
		s.unlock()
		if to := lr.Owner(key); to != "" && to != h.self {
			return nil, to, "", false
		}
		return nil, toStore, "", false // the last member: nobody to hand it to
	}
	return s, "", src, m != nil || (src == "" && !h.changing())
}
