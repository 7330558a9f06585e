package memstore

import "sync"

// Window waiters (FixedWindow, SlidingWindow, SlidingLog) reserve nothing:
// a denied one is told when to ask again. All told the same instant (the
// window's edge), 2,000 waiters on one window asked again together, and
// the holder served 19,973 calls for 110 admissions. Instead each denied
// waiter takes a place in the key's queue, counted in hits: the p-th hit
// in line asks again when the key would admit the hits ahead of it and its
// own (a peek for p mod Limit + n hits), plus a Window for each Limit hits
// ahead of that, so about as many ask at each instant as can be admitted
// then: O(1) calls per admission.
//
// The queue is a count, not a list: it drains at Limit hits per Window,
// the rate the key admits at, so the waiters that were admitted, or gave
// up, leave it as time passes, and one that is denied again takes a new
// place at its end. A waiter that gave up would hold its place until it
// drained (the hits behind it asking again later than they could; nothing
// is admitted beyond the rule, as nothing is reserved), but it says so:
// WaitN's cancel takes its hits out of the count (CancelAt, and a node's
// cancel of a forwarded wait, CancelTicket). The count is a hint
// for spreading the asks: a key whose count is lost (the bound below)
// starts again from an empty queue.

// maxQueued bounds the keys whose window queues are counted.
const maxQueued = 1 << 16

// windowQueues counts the waiters queued on each key's window (index 0:
// WaitN's state).
type windowQueues struct {
	mu sync.Mutex
	m  map[string]windowQueue
}

// windowQueue is a key's queue: count hits were in line at window index
// idx (its window under the rule that counted them: floor(now/Window)).
type windowQueue struct {
	window, idx, count int64
}

// place returns where n hits join key's queue at window index idx, under a
// rule of limit hits per window ms: the hits ahead of them, the queue
// drained at limit per window since it was counted. If join, the hits take
// that place (the count grows by n).
func (q *windowQueues) place(key string, window, idx, limit, n int64, join bool) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.m[key]
	ahead := int64(0)
	if ok && w.window == window && idx >= w.idx {
		if gone := idx - w.idx; gone < w.count/limit+1 {
			ahead = max(0, w.count-gone*limit)
		}
	}
	if !join {
		return ahead
	}
	if q.m == nil || len(q.m) >= maxQueued && !ok {
		q.m = map[string]windowQueue{} // (a hint: lost, the queues start again)
	}
	q.m[key] = windowQueue{window: window, idx: idx, count: ahead + n}
	return ahead
}

// leave takes n hits out of key's queue at window index idx: a waiter
// that gave up before its turn (CancelAt), so that those behind it, and
// those who come next, do not wait for it.
func (q *windowQueues) leave(key string, window, idx, limit, n int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.m[key]
	if !ok || w.window != window || idx < w.idx {
		return
	}
	ahead := int64(0)
	if gone := idx - w.idx; gone < w.count/limit+1 {
		ahead = max(0, w.count-gone*limit)
	}
	q.m[key] = windowQueue{window: window, idx: idx, count: max(0, ahead-n)}
}

// forget drops key's queue (Reset: the key starts afresh).
func (q *windowQueues) forget(key string) {
	q.mu.Lock()
	delete(q.m, key)
	q.mu.Unlock()
}
