package hold

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

// Fork is the version of a copy of a state of version v that leaves while
// another copy of it may still arrive somewhere (a push on its way): v
// with one more origin, fresh (not 0). The copy of v then counts a start
// the other does not: when the two meet, the other is taken for its
// ancestor (Descends) or merged with it, never for a copy of it.
func (v Version) Fork(origin uint64) Version {
	return Join(v, Version{Epoch: v.Epoch, Seq: v.Seq, Origins: [3]uint64{origin}})
}

// Descends reports whether a state of version v descends from one of
// version w or is a copy of it, as far as versions tell: v counts every
// start w counts, and either counts one more (w is of a branch v forked
// from) or is not older (one lineage: hand-overs raise the epoch).
func (v Version) Descends(w Version) bool {
	return v.Covers(w) && (!w.Covers(v) || !v.Less(w))
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

// Loaded is the version of a state loaded at now (ms) from a store that
// held it at v: a branch of its own (origin), whose epoch follows v's so
// that its writes are newer than the one it loaded. It counts none of v's
// origins: the store's copy may lag what a holder admitted since, so a
// state of v's lineage that arrives later is merged with it (counting the
// snapshot twice: it admits less, never more), not taken for a copy.
func (v Version) Loaded(now int64, origin uint64) Version {
	w := v.Next(now)
	w.Origins = [3]uint64{origin}
	return w
}
