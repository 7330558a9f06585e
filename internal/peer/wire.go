package peer

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// The record layer. After the handshake every frame (frame.go) travels in
// a record:
//
//	length u32 (big endian) | payload
//
// With a secret the payload is sealed with AES-256-GCM under the key of its
// direction (auth.go), with the length as additional data and a 96-bit
// nonce of 4 zero bytes and a 64-bit counter: the number of records sent
// before it in that direction. Each side counts what it receives, so a
// record modified, replayed (on this or any other connection), dropped or
// reordered fails to open, and the connection is closed: nothing it carried
// after the fault is believed. Without a secret the payload is in clear.
//
// In version 2 a record's payload is exactly one frame. From version 3 it
// is one or more frames, back to back: a writer seals what it flushes
// together, the small frames queued while the write before was in flight
// in as few records as batchMax allows (one seal, one tag and one open per
// record, not per frame), and a large frame in a record of its own. A
// record that ends inside a frame, or holds several over batchMax, closes
// the connection, as a frame that does not parse does. The handshake settles the version, so a node of
// version 3 sends a node of version 2 one frame a record.
const (
	tagLen    = 16 // AES-GCM's tag
	maxRecord = headerLen + MaxStatesBody + tagLen
	// startBuf is a connection buffer's size when it is first needed;
	// buffers grow with the records they carry, and a buffer over keepBuf
	// is dropped once drained. Idle connections drop theirs.
	startBuf = 4 << 10
	keepBuf  = 16 << 10
	// batchMax bounds the frames a record carries together, and
	// smallFrame the frames that share a record: a larger one (a hand-off
	// batch, a state) travels alone. So a record of several frames is at
	// most batchMax and a tag, which a server's MaxInFlightBytes counts as
	// a whole, as it counts any record.
	batchMax   = 4 << 10
	smallFrame = 512
)

// ErrSealed is returned for a record that fails to open: modified,
// replayed, dropped before or reordered, or not sealed with this
// connection's key.
var ErrSealed = errors.New("peer: record failed to open")

// sealer seals or opens one direction's records.
type sealer struct {
	aead  cipher.AEAD
	n     uint64 // records so far
	nonce [12]byte
}

func newSealer(key []byte) (*sealer, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("peer: cipher: %w", err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return nil, fmt.Errorf("peer: cipher: %w", err)
	}
	return &sealer{aead: a}, nil
}

// next returns the nonce of the next record. At a million records a second
// the counter would wrap after 584,000 years.
func (s *sealer) next() []byte {
	binary.BigEndian.PutUint64(s.nonce[4:], s.n)
	s.n++
	return s.nonce[:]
}

// writer queues frames and writes them by opportunity: whoever finds no
// write in progress writes everything queued, repeating while more arrives
// during the write. Nobody waits for anything but the write in progress: a
// lone frame goes out at once, and frames queued during a write go out
// together in the next.
type writer struct {
	mu       sync.Mutex
	buf      []byte // queued: records (version 2), or frames in clear (batch)
	spare    []byte
	flushing bool
	seal     *sealer   // nil: in clear
	frames   int       // frames in buf
	deadline time.Time // the write deadline set last (by the flusher)
	// batch (version 3): frames queue in clear and each flush puts them in
	// records (sealed) by the flusher, outside mu; out is its output.
	batch bool
	out   []byte
	ad    [4]byte // a record's length, the additional data of its seal
}

// begin starts a frame: in version 2 it reserves its record's length.
// Called with mu held.
func (w *writer) begin() int {
	s := len(w.buf)
	if !w.batch {
		w.buf = append(w.buf, 0, 0, 0, 0)
	}
	return s
}

// end finishes the frame begun at s, appended since: in version 2 it
// writes its record's length and seals the frame in place. Called with mu
// held.
func (w *writer) end(s int) {
	w.frames++
	if w.batch {
		return
	}
	n := len(w.buf) - s - 4
	if w.seal == nil {
		binary.BigEndian.PutUint32(w.buf[s:], uint32(n))
		return
	}
	binary.BigEndian.PutUint32(w.buf[s:], uint32(n+tagLen))
	w.buf = slices.Grow(w.buf, tagLen)
	pt := w.buf[s+4:]
	out := w.seal.aead.Seal(pt[:0], w.seal.next(), pt, w.buf[s:s+4])
	w.buf = w.buf[:s+4+len(out)]
}

// flush writes what is queued unless a write is in progress (whose writer
// then writes it too). Called with mu held; returns with it released.
func (w *writer) flush(nc net.Conn, timeout time.Duration) error {
	_, err := w.flushUnsent(nc, timeout)
	return err
}

// flushUnsent is flush, and reports whether its first write, which carried
// everything queued when it was called, failed before a byte of it left
// (a socket closed or reset before it): nothing it carried was sent.
func (w *writer) flushUnsent(nc net.Conn, timeout time.Duration) (unsent bool, err error) {
	if w.flushing {
		w.mu.Unlock()
		return false, nil
	}
	w.flushing = true
	for first := true; len(w.buf) > 0 && err == nil; first = false {
		buf := w.buf
		w.buf, w.frames = w.spare[:0], 0
		w.mu.Unlock()
		out := buf
		if w.batch {
			// Only the flusher seals (flushing is set): the counter
			// follows the order of the writes.
			out = w.records(w.out[:0], buf)
		}
		// A write has between timeout and twice it: the deadline is set
		// again only once less than timeout is left, not every write.
		// (time.Until reads the monotonic clock alone: half a time.Now.)
		if time.Until(w.deadline) < timeout {
			w.deadline = time.Now().Add(2 * timeout)
			_ = nc.SetWriteDeadline(w.deadline)
		}
		var n int
		n, err = nc.Write(out)
		unsent = first && err != nil && n == 0
		w.mu.Lock()
		w.spare = nil
		if cap(buf) <= keepBuf {
			w.spare = buf[:0]
		}
		if w.batch {
			w.out = nil
			if cap(out) <= keepBuf {
				w.out = out[:0]
			}
		}
	}
	if err != nil {
		w.buf, w.frames = w.buf[:0], 0
	}
	w.flushing = false
	w.mu.Unlock()
	return unsent, err
}

// records appends to out the records that carry frames (version 3):
// consecutive small frames together, up to batchMax a record.
func (w *writer) records(out, frames []byte) []byte {
	for len(frames) > 0 {
		n := frameLen(frames)
		if n <= smallFrame {
			for n < len(frames) {
				m := frameLen(frames[n:])
				if m > smallFrame || n+m > batchMax {
					break
				}
				n += m
			}
		}
		out = w.record(out, frames[:n])
		frames = frames[n:]
	}
	return out
}

// record appends one record of payload p to out, sealed if w seals.
func (w *writer) record(out, p []byte) []byte {
	if w.seal == nil {
		out = binary.BigEndian.AppendUint32(out, uint32(len(p)))
		return append(out, p...)
	}
	binary.BigEndian.PutUint32(w.ad[:], uint32(len(p)+tagLen))
	out = append(out, w.ad[:]...)
	return w.seal.aead.Seal(out, w.seal.next(), p, w.ad[:])
}

// frameLen is the length of the frame b starts with (one this side
// encoded).
func frameLen(b []byte) int { return headerLen + int(binary.BigEndian.Uint32(b[2:6])) }

// release drops the buffers of an idle writer.
func (w *writer) release() {
	w.mu.Lock()
	if !w.flushing && len(w.buf) == 0 {
		w.buf, w.spare, w.out = nil, nil, nil
	}
	w.mu.Unlock()
}

type readDeadliner interface {
	io.Reader
	SetReadDeadline(time.Time) error
}

// reader reads records. With a bodyTimeout, the rest of a record must
// arrive within it once its first byte has; with an idle step, a connection
// on which nothing arrives drops its buffer after a step and fails with
// errIdle after idleTimeout.
type reader struct {
	c    readDeadliner
	open *sealer // nil: in clear

	bodyTimeout time.Duration
	idleStep    time.Duration
	idleTimeout time.Duration
	onIdle      func() // called when the buffer is dropped for idleness
	// admit, if not nil, is called with a record's length once it is read,
	// before the record's body is: a server counts it against the
	// connection's in-flight bytes, and waits for room.
	admit func(n int)
	// yield: a read deadline returns its error at once and loses nothing,
	// so that the next call of next (by the same goroutine or another)
	// goes on where this one stopped. A client's readers, which take turns
	// and set deadlines of their own, yield; with admit, none may.
	yield bool
	// single (version 2): a record carries exactly one frame.
	single bool

	buf       []byte // buf[r:w] is buffered input
	r, w      int
	rest      []byte // the frames of the last record not yet returned (in buf, before r)
	held      int    // bytes of admitted records not yet accounted to a frame
	size      int    // bytes of admitted records the last frame accounts for
	reads     uint64 // reads that returned bytes
	readsSeen uint64 // reads at the last idle check
	idleSteps int
	small     [16]byte // what an idle reader reads into
}

var (
	errIdle        = errors.New("peer: idle")
	errBodyTimeout = errors.New("peer: body timed out")
)

// start arms the idle deadline.
func (rd *reader) start() {
	if rd.idleStep > 0 {
		_ = rd.c.SetReadDeadline(time.Now().Add(rd.idleStep))
	}
}

// next returns the next frame's type, id and body. The body is valid until
// the next call. size is then the bytes of admitted records the frame
// accounts for: its own, and for a record's last frame the rest of the
// record (its length and tag), so that a record's frames account for all of
// it.
func (rd *reader) next() (typ byte, id uint64, body []byte, err error) {
	rd.size = 0
	if len(rd.rest) > 0 {
		return rd.frame()
	}
	if err = rd.fill(4); err != nil {
		return
	}
	n := int(binary.BigEndian.Uint32(rd.buf[rd.r:]))
	least := headerLen
	if rd.open != nil {
		least += tagLen
	}
	if n < least || n > maxRecord {
		return 0, 0, nil, fmt.Errorf("%w: record of %d bytes", ErrMalformed, n)
	}
	if rd.admit != nil {
		rd.admit(n) // before the body is read: the length is only a claim
		rd.held += n
	}
	if err = rd.fill(4 + n); err != nil {
		return
	}
	rec := rd.buf[rd.r : rd.r+4+n]
	rd.r += 4 + n
	if rd.rest, err = openRecord(rd.open, rec); err != nil {
		return 0, 0, nil, err
	}
	if rd.single || len(rd.rest) > batchMax {
		// Version 2, or a record over batchMax: the frame must fill it
		// (so a record of several is at most batchMax and a tag, as
		// ServerConfig.MaxInFlightBytes says).
		p := rd.rest
		if _, _, bl, err := parseHeader(p[:headerLen]); err == nil && bl != len(p)-headerLen {
			rd.rest = nil
			return 0, 0, nil, fmt.Errorf("%w: body of %d bytes in a record of %d", ErrMalformed, bl, len(p)-headerLen)
		}
	}
	return rd.frame()
}

// frame cuts the next frame from the record being read.
func (rd *reader) frame() (typ byte, id uint64, body []byte, err error) {
	p := rd.rest
	if len(p) < headerLen {
		rd.rest = nil
		return 0, 0, nil, fmt.Errorf("%w: a record ends %d bytes into a frame", ErrMalformed, len(p))
	}
	typ, id, bl, err := parseHeader(p[:headerLen])
	if err != nil {
		rd.rest = nil
		return 0, 0, nil, err
	}
	if bl > len(p)-headerLen {
		rd.rest = nil
		return 0, 0, nil, fmt.Errorf("%w: body of %d bytes in a record of %d", ErrMalformed, bl, len(p)-headerLen)
	}
	body, rd.rest = p[headerLen:headerLen+bl], p[headerLen+bl:]
	if rd.admit != nil {
		rd.size = headerLen + bl
		if len(rd.rest) == 0 {
			rd.size = rd.held
		}
		rd.held -= rd.size
	}
	return typ, id, body, nil
}

// openRecord opens (if sealed) one record and returns its payload.
func openRecord(open *sealer, rec []byte) ([]byte, error) {
	p := rec[4:]
	if open != nil {
		var err error
		if p, err = open.aead.Open(p[:0], open.next(), p, rec[:4]); err != nil {
			return nil, fmt.Errorf("%w: record %d", ErrSealed, open.n-1)
		}
	}
	return p, nil
}

// buffered reports whether a whole frame is buffered.
func (rd *reader) buffered() bool {
	if len(rd.rest) > 0 {
		return true
	}
	n := rd.w - rd.r
	return n >= 4 && n-4 >= int(binary.BigEndian.Uint32(rd.buf[rd.r:]))
}

// release drops the buffer of a reader that holds nothing.
func (rd *reader) release() {
	if rd.r == rd.w && len(rd.rest) == 0 {
		rd.buf, rd.r, rd.w = nil, 0, 0
	}
}

// fill reads until k bytes are buffered.
func (rd *reader) fill(k int) error {
	if rd.w-rd.r >= k {
		return nil
	}
	if rd.r == rd.w {
		rd.r, rd.w = 0, 0
		if cap(rd.buf) > keepBuf {
			rd.buf = nil
		}
	}
	body := false // a body deadline is set
	for rd.w-rd.r < k {
		if rd.w == len(rd.buf) {
			rd.room(k)
		}
		if rd.w > rd.r && !body && rd.bodyTimeout > 0 {
			_ = rd.c.SetReadDeadline(time.Now().Add(rd.bodyTimeout))
			body = true
		}
		n, err := rd.c.Read(rd.buf[rd.w:])
		rd.w += n
		if n > 0 {
			rd.reads++
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || rd.yield {
			return err
		}
		if body || rd.w > rd.r {
			return fmt.Errorf("%w after %s", errBodyTimeout, rd.bodyTimeout)
		}
		if err := rd.idle(); err != nil {
			return err
		}
	}
	if body && rd.idleStep > 0 {
		_ = rd.c.SetReadDeadline(time.Now().Add(rd.idleStep))
	}
	return nil
}

// room makes room to read into a full buffer, on the way to k bytes
// buffered: it moves what is buffered to the front if k bytes then fit or
// half the buffer is freed, else it grows the buffer to twice its size (at
// least startBuf, at most k). So a buffer grows with the bytes that
// arrived, to at most twice them, never to a length a record announced but
// did not bring: a connection that sends a length and nothing more costs
// startBuf.
func (rd *reader) room(k int) {
	have, buf := rd.w-rd.r, rd.buf
	if k > len(buf) && have >= len(buf)/2 {
		buf = make([]byte, max(startBuf, min(k, 2*len(buf))))
	}
	rd.w = copy(buf, rd.buf[rd.r:rd.w])
	rd.r, rd.buf = 0, buf
}

// idle handles a read deadline that passed with nothing buffered. With an
// idle step: if nothing arrived during the step either, the buffer is
// dropped, and after idleTimeout the connection is given up. Until
// something arrives, the reader then reads into a few bytes of its own.
func (rd *reader) idle() error {
	switch {
	case rd.idleStep <= 0:
		return errIdle // a deadline that is not ours
	case rd.reads != rd.readsSeen:
		rd.readsSeen, rd.idleSteps = rd.reads, 0
	default:
		rd.idleSteps++
		if rd.idleSteps == 1 {
			rd.buf, rd.r, rd.w = nil, 0, 0
			if rd.onIdle != nil {
				rd.onIdle()
			}
		}
		if time.Duration(rd.idleSteps)*rd.idleStep >= rd.idleTimeout {
			return errIdle
		}
	}
	_ = rd.c.SetReadDeadline(time.Now().Add(rd.idleStep))
	if rd.buf != nil {
		return nil
	}
	// Wait for the next record without holding a buffer.
	for {
		n, err := rd.c.Read(rd.small[:])
		if n > 0 {
			rd.reads++
			rd.buf = make([]byte, startBuf)
			rd.r, rd.w = 0, copy(rd.buf, rd.small[:n])
			return nil
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		rd.idleSteps++
		if time.Duration(rd.idleSteps)*rd.idleStep >= rd.idleTimeout {
			return errIdle
		}
		_ = rd.c.SetReadDeadline(time.Now().Add(rd.idleStep))
	}
}
