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

// The record layer. After the handshake every frame (frame.go) travels as
// one record:
//
//	length u32 (big endian) | payload
//
// With a secret the payload is the frame sealed with AES-256-GCM under the
// key of its direction (auth.go), with the length as additional data and a
// 96-bit nonce of 4 zero bytes and a 64-bit counter: the number of records
// sent before it in that direction. Each side counts what it receives, so a
// record modified, replayed (on this or any other connection), dropped or
// reordered fails to open, and the connection is closed: nothing it carried
// after the fault is believed. Without a secret the payload is the frame in
// clear.
const (
	tagLen    = 16 // AES-GCM's tag
	maxRecord = headerLen + MaxStatesBody + tagLen
	// startBuf is a connection buffer's size when it is first needed;
	// buffers grow with the records they carry, and a buffer over keepBuf
	// is dropped once drained. Idle connections drop theirs.
	startBuf = 4 << 10
	keepBuf  = 16 << 10
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

// writer queues records and writes them by opportunity: whoever finds no
// write in progress writes everything queued, repeating while more arrives
// during the write.
type writer struct {
	mu       sync.Mutex
	buf      []byte
	spare    []byte
	flushing bool
	seal     *sealer   // nil: in clear
	frames   int       // records in buf
	last     time.Time // when the last write began
	// hold, if not nil, is asked (with mu held) after each write that
	// left more queued: true leaves the rest queued for later (a Client
	// holds calls while answers are due).
	hold func() bool
}

// begin starts a record: it reserves the length. Called with mu held.
func (w *writer) begin() int {
	s := len(w.buf)
	w.buf = append(w.buf, 0, 0, 0, 0)
	return s
}

// end finishes the record begun at s, whose frame was appended since:
// it writes the length and seals the frame in place. Called with mu held.
func (w *writer) end(s int) {
	w.frames++
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
	if w.flushing {
		w.mu.Unlock()
		return nil
	}
	w.flushing = true
	var err error
	for len(w.buf) > 0 && err == nil {
		buf := w.buf
		w.buf, w.frames = w.spare[:0], 0
		now := time.Now()
		w.last = now
		w.mu.Unlock()
		_ = nc.SetWriteDeadline(now.Add(timeout))
		_, err = nc.Write(buf)
		w.mu.Lock()
		w.spare = nil
		if cap(buf) <= keepBuf {
			w.spare = buf[:0]
		}
		if err == nil && len(w.buf) > 0 && w.hold != nil && w.hold() {
			break
		}
	}
	if err != nil {
		w.buf, w.frames = w.buf[:0], 0
	}
	w.flushing = false
	w.mu.Unlock()
	return err
}

// release drops the buffers of an idle writer.
func (w *writer) release() {
	w.mu.Lock()
	if !w.flushing && len(w.buf) == 0 {
		w.buf, w.spare = nil, nil
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
	wake  bool // a deadline wakes the reader to drop its buffer (clients)

	buf       []byte // buf[r:w] is buffered input
	r, w      int
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
// the next call.
func (rd *reader) next() (typ byte, id uint64, body []byte, err error) {
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
	}
	if err = rd.fill(4 + n); err != nil {
		return
	}
	rec := rd.buf[rd.r : rd.r+4+n]
	rd.r += 4 + n
	return openRecord(rd.open, rec)
}

// openRecord opens (if sealed) and checks one record.
func openRecord(open *sealer, rec []byte) (typ byte, id uint64, body []byte, err error) {
	p := rec[4:]
	if open != nil {
		if p, err = open.aead.Open(p[:0], open.next(), p, rec[:4]); err != nil {
			return 0, 0, nil, fmt.Errorf("%w: record %d", ErrSealed, open.n-1)
		}
	}
	typ, id, bl, err := parseHeader(p[:headerLen])
	if err != nil {
		return 0, 0, nil, err
	}
	if bl != len(p)-headerLen {
		return 0, 0, nil, fmt.Errorf("%w: body of %d bytes in a record of %d", ErrMalformed, bl, len(p)-headerLen)
	}
	return typ, id, p[headerLen:], nil
}

// buffered reports whether a whole record is buffered.
func (rd *reader) buffered() bool {
	n := rd.w - rd.r
	return n >= 4 && n-4 >= int(binary.BigEndian.Uint32(rd.buf[rd.r:]))
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
		if !errors.Is(err, os.ErrDeadlineExceeded) {
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
// dropped, and after idleTimeout the connection is given up. With wake (a
// client's reader, whose idle timer sets a deadline to wake it): the buffer
// is dropped at once. Until something arrives, the reader then reads into
// a few bytes of its own.
func (rd *reader) idle() error {
	switch {
	case rd.wake:
		_ = rd.c.SetReadDeadline(time.Time{})
		rd.buf, rd.r, rd.w = nil, 0, 0
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
	if rd.idleStep > 0 {
		_ = rd.c.SetReadDeadline(time.Now().Add(rd.idleStep))
	}
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
		if rd.wake {
			_ = rd.c.SetReadDeadline(time.Time{})
			continue
		}
		rd.idleSteps++
		if time.Duration(rd.idleSteps)*rd.idleStep >= rd.idleTimeout {
			return errIdle
		}
		_ = rd.c.SetReadDeadline(time.Now().Add(rd.idleStep))
	}
}
