package memstore

// Holes: what a bucket's cancel gives back (CancelAt).
//
// A bucket's level is a queue of units: each reservation's n·Window units
// sit above those reserved before it, and it acts once the level below its
// top has drained far enough (a token bucket: its top within the capacity;
// a leaky bucket: its bottom at empty). Measured from a fixed origin, a
// unit's place in that queue never changes: the level drains from the
// bottom, and new units go on top. A reservation's ticket gives its top's
// place (its level just after, at its instant; as a level at t it is
// drain(level, t−instant)).
//
// A cancel cannot simply take its units out of the level. The waiters
// above it keep the instants they were promised (they sleep on timers, at
// other members or processes, and are not told), so a caller who came next
// would be placed as if they had moved up, and act beside them: on a
// token bucket of burst 1 at 10/s, waiters due at 100 ms and 200 ms, the
// first gives up, its token goes back, a newcomer is placed at 200 ms, and
// two hits act in the same instant. x/time/rate gives back only what no
// later reservation was promised, and forgets the rest: 1,000 waiters who
// gave up in the order they came (the first to time out is the first that
// came) gave back nothing, and the bucket refused for 86–99 s with nobody
// waiting.
//
// So a cancel of a reservation with live units above it leaves a hole: its
// units stay in the level (the waiters above keep their instants, and
// nobody is placed among them), and the key's hole record remembers where
// they are. Holes never overlap (each reservation is cancelled once);
// adjacent ones join into one run, so the record is a list of runs with
// live units (still waiting, or admitted) between them. A run that reaches
// the top of the level has nobody above it: it comes back, the level going
// down to its bottom, so the queue's tail moves down to the last unit of
// someone who still counts. A cancel of the reservation on top gives back
// its own units at once, and with them the run just under it, if any.
//
// The record keeps maxRuns runs, the highest; deeper ones are kept only
// as a sum (deep: how many units, and the bottom of the deepest). That is
// enough for the case that matters most: every hole lies between the
// deepest bottom and the top, and none overlaps another, so when the units
// of all the holes add up to that span, every unit above the bottom is a
// hole, and they all come back. The last of a bucket's waiters to give
// up, in whatever order they gave up (shuffled, 1,000 waiters leave
// hundreds of runs on the way), so takes the level down to where it was
// before them: the bucket is then exactly as if they had never come
// (drained as it would have been).
//
// Why it is exact: when a run comes back, the hits that will act are those
// below its bottom (admitted or still waiting); each of them was placed,
// and acts, as the queue stood when it came, and the holes never act. A
// bucket fed only those hits, at their instants, would hold at most the
// level they left, which is the run's bottom: removing hits from a
// bucket's history never raises its level later. Placing newcomers on that
// bottom therefore admits nothing the rule does not, over any span. And
// every waiter acts exactly when it was promised, never later: a hole
// comes back only once nobody is above it, so nobody is placed among
// those still waiting, and their instants need no change. (Moving them up
// instead would need each to be told, on its timer at another member or
// process; they would then act earlier, which the rule allows, but a
// waiter not told in time would act beside a newcomer.)
//
// The record is a hint kept beside the state, not in it (the state's form,
// the hand-off and the store's value are unchanged): a record that is
// lost (a hand-off, the bounds below, a GiveBack or a lease's Return that
// took units off the top, a Reset, a change of the state's epoch or rule)
// only means those holes stay in the level until it drains, as under
// x/time/rate's rule. remote's cancel script keeps the same record, with
// the same arithmetic, in a key of its own (remote/wait.go).

// maxHoleSkew bounds how far (ms) a hole record's instant may be ahead of
// a cancel's (see holesAt).
const maxHoleSkew = 1 << 20

// maxHoles bounds the keys whose hole records a shard keeps, and maxRuns
// the runs a record keeps (past it, the deepest join its deep sum).
const (
	maxHoles = 1 << 10
	maxRuns  = 16
)

// holeRecords holds a shard's hole records (index 0: WaitN's state),
// under the shard's lock.
type holeRecords struct {
	m map[string]holeRecord
}

// holeRecord is a key's holes, in the state of epoch epoch under a rule
// of window ms and limit, as levels at instant tau (ms), when the level
// was top (every hole lies below it): runs of units, from lo to hi, the
// highest first, none touching another, and below the deepest of them
// deep (the runs dropped past maxRuns: h units, the deepest from bot).
type holeRecord struct {
	epoch, window, limit, tau, top int64
	deep                           deepHoles
	runs                           []run
}

// deepHoles is h hole units somewhere above bot (h == 0: none).
type deepHoles struct{ bot, h int64 }

type run struct{ lo, hi int64 }

func (q *holeRecords) get(key string) (holeRecord, bool) {
	r, ok := q.m[key]
	return r, ok
}

func (q *holeRecords) put(key string, r holeRecord) {
	if q.m == nil {
		q.m = map[string]holeRecord{}
	}
	if _, ok := q.m[key]; !ok && len(q.m) >= maxHoles {
		for k := range q.m { // (a hint: one key's holes are forgotten)
			delete(q.m, k)
			break
		}
	}
	q.m[key] = r
}

func (q *holeRecords) forget(key string) {
	if q.m != nil {
		delete(q.m, key)
	}
}

// holesAt appends to dst rec's runs as levels at t, less what drained
// out of the level (a run drained away is gone; one partly drained ends
// at empty), and returns them with its deep holes at t (the units that
// drained out of the level are taken to have been holes, so what remains
// is at most what is there), or none if rec does not fit the state
// (epoch, window, limit). t may be a little before tau: cancels read the
// clock before they take the lock, so one that read it first may come
// second (the holes are then higher at t, by what drains from t to tau);
// a record more than maxHoleSkew ms ahead of t is dropped, which keeps the
// arithmetic below 2^53.
func holesAt(dst []run, rec holeRecord, epoch, window, limit, t int64) ([]run, deepHoles) {
	if rec.epoch != epoch || rec.window != window || rec.limit != limit || rec.tau-t >= maxHoleSkew {
		return dst, deepHoles{}
	}
	el := t - rec.tau
	if el >= ceilDiv(rec.top, limit) {
		return dst, deepHoles{} // drained away
	}
	for _, r := range rec.runs {
		lo, hi := r.lo-el*limit, r.hi-el*limit
		if hi <= 0 {
			break
		}
		dst = append(dst, run{max(lo, 0), hi})
	}
	d := rec.deep
	if d.h > 0 {
		d.bot -= el * limit
		if d.bot < 0 {
			d.h, d.bot = d.h+d.bot, 0
		}
	}
	if d.h <= 0 {
		d = deepHoles{}
	}
	return dst, d
}

// cancelRuns is the arithmetic of a bucket's cancel, shared by memstore
// and (in Lua) remote's cancel script: the level at t, the cancelled
// reservation's top as a level at t and its units u, and the key's holes
// at t. It returns the new level and the holes to keep (runs in runs'
// array).
func cancelRuns(level, top, u int64, runs []run, deep deepHoles) (int64, []run, deepHoles) {
	if level < top {
		// The level fell below this reservation since (a GiveBack or a
		// lease's Return took units off the top): its own units come back,
		// as they always did, and the holes' places no longer hold.
		return max(0, level-u), runs[:0], deepHoles{}
	}
	lo, hi := top-u, top
	i := 0 // runs[:i] lie above the new hole
	for i < len(runs) && runs[i].lo >= hi {
		i++
	}
	if len(runs) > 0 && runs[0].hi > level || i < len(runs) && runs[i].hi > lo {
		runs, deep, i = runs[:0], deepHoles{}, 0 // above the top, or overlapping: places that no longer hold
	}
	// Join the runs that touch it: the one above (ending where it starts)
	// and the one below.
	j := i // runs[j:] lie below it
	if i > 0 && runs[i-1].lo == hi {
		i--
		hi = runs[i].hi
	}
	if j < len(runs) && runs[j].hi == lo {
		lo = runs[j].lo
		j++
	}
	runs = append(runs[:i], append([]run{{lo, hi}}, runs[j:]...)...)
	if runs[0].hi == level { // nobody above it: it comes back
		level = runs[0].lo
		runs = runs[1:]
	}
	// All holes up to the top: they all come back.
	bot, h := deep.bot, deep.h
	if h == 0 && len(runs) > 0 {
		bot = runs[0].lo
	}
	for _, r := range runs {
		bot, h = min(bot, r.lo), h+r.hi-r.lo
	}
	switch span := level - bot; {
	case h == 0:
	case h == span:
		return bot, runs[:0], deepHoles{}
	case h > span:
		return level, runs[:0], deepHoles{} // places that no longer hold
	}
	for len(runs) > maxRuns { // the deepest joins the sum
		r := runs[len(runs)-1]
		if deep.h == 0 {
			deep.bot = r.lo
		}
		deep = deepHoles{min(deep.bot, r.lo), deep.h + r.hi - r.lo}
		runs = runs[:len(runs)-1]
	}
	return level, runs, deep
}
