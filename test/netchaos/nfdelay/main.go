// Command nfdelay delays packets by a fixed time: it takes the packets that
// an iptables rule sends to an NFQUEUE queue and gives each its verdict
// (accept) that long after it arrived, in order. test/netchaos runs it in a
// container's network namespace (nsenter -n) to add latency where the kernel
// has no sch_netem; rules use --queue-bypass, so packets pass undelayed
// when it is not running.
//
//	nfdelay -queue 7 -delay 200ms
//
// It speaks the kernel's nfnetlink_queue protocol over a netlink socket
// (package syscall only) and runs until killed.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"syscall"
	"time"
)

// nfnetlink_queue constants (linux/netfilter/nfnetlink_queue.h).
const (
	netlinkNetfilter = 12
	subsysQueue      = 3
	msgPacket        = 0
	msgVerdict       = 1
	msgConfig        = 2
	cfgCmd           = 1 // NFQA_CFG_CMD
	cfgParams        = 2 // NFQA_CFG_PARAMS
	cfgQueueMaxLen   = 3 // NFQA_CFG_QUEUE_MAXLEN
	cmdBind          = 1
	copyMeta         = 1
	attrPacketHdr    = 1 // NFQA_PACKET_HDR
	attrVerdictHdr   = 2 // NFQA_VERDICT_HDR
	verdictAccept    = 1
	nlmFRequest      = 1
	nlmFAck          = 4
	nlmsgError       = 2
	queueMaxLen      = 1 << 14
)

func main() {
	queue := flag.Uint("queue", 0, "NFQUEUE queue number")
	delay := flag.Duration("delay", 200*time.Millisecond, "how long each packet waits")
	flag.Parse()
	if err := run(uint16(*queue), *delay); err != nil {
		fmt.Fprintln(os.Stderr, "nfdelay:", err)
		os.Exit(1)
	}
}

func run(queue uint16, delay time.Duration) error {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW, netlinkNetfilter)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	send := func(typ uint16, flags uint16, attrs []byte) error {
		return syscall.Sendto(fd, message(typ, flags, queue, attrs), 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK})
	}
	params := binary.BigEndian.AppendUint32(nil, 0xffff) // copy range
	params = append(params, copyMeta)
	cfg := [][]byte{
		attr(cfgCmd, []byte{cmdBind, 0, 0, 0}),
		attr(cfgParams, params),
		attr(cfgQueueMaxLen, binary.BigEndian.AppendUint32(nil, queueMaxLen)),
	}
	buf := make([]byte, 1<<16)
	for _, a := range cfg {
		if err := send(subsysQueue<<8|msgConfig, nlmFRequest|nlmFAck, a); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("config ack: %w", err)
		}
		if err := ackError(buf[:n]); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}

	fmt.Println("ready") // bound: the queue's packets come here from now on

	type held struct {
		id  uint32
		due time.Time
	}
	pending := make(chan held, queueMaxLen)
	go func() {
		for h := range pending {
			time.Sleep(time.Until(h.due)) // the delay itself
			v := binary.BigEndian.AppendUint32(nil, verdictAccept)
			v = binary.BigEndian.AppendUint32(v, h.id)
			_ = send(subsysQueue<<8|msgVerdict, nlmFRequest, attr(attrVerdictHdr, v))
		}
	}()
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.EINTR) {
			continue // the kernel dropped packets it could not queue to us
		}
		if err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		now := time.Now()
		ids, err := packetIDs(buf[:n])
		if err != nil {
			return err
		}
		for _, id := range ids {
			pending <- held{id, now.Add(delay)}
		}
	}
}

// message is one netlink message: header, nfgenmsg (family unspecified,
// version 0, the queue number), attributes.
func message(typ, flags, queue uint16, attrs []byte) []byte {
	b := make([]byte, 16, 20+len(attrs))
	binary.NativeEndian.PutUint32(b[0:], uint32(20+len(attrs)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags)
	b = append(b, 0, 0)
	b = binary.BigEndian.AppendUint16(b, queue)
	return append(b, attrs...)
}

// attr is one netlink attribute, padded to 4 bytes.
func attr(typ uint16, data []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

var errShort = errors.New("nfdelay: short netlink message")

// ackError returns the error a netlink acknowledgement carries, if any.
func ackError(b []byte) error {
	if len(b) < 20 {
		return errShort
	}
	if binary.NativeEndian.Uint16(b[4:]) != nlmsgError {
		return nil
	}
	if code := int32(binary.NativeEndian.Uint32(b[16:])); code != 0 {
		return fmt.Errorf("nfdelay: kernel: %w", syscall.Errno(-code))
	}
	return nil
}

// packetIDs returns the ids of the queued packets in a buffer of netlink
// messages.
func packetIDs(b []byte) ([]uint32, error) {
	var ids []uint32
	for len(b) >= 16 {
		l := int(binary.NativeEndian.Uint32(b))
		typ := binary.NativeEndian.Uint16(b[4:])
		if l < 16 || l > len(b) {
			return ids, fmt.Errorf("%w: length %d of %d", errShort, l, len(b))
		}
		msg := b[16:l]
		b = b[min(len(b), (l+3)&^3):]
		if typ != subsysQueue<<8|msgPacket || len(msg) < 4 {
			continue
		}
		for a := msg[4:]; len(a) >= 4; {
			al := int(binary.NativeEndian.Uint16(a))
			at := binary.NativeEndian.Uint16(a[2:]) & 0x3fff
			if al < 4 || al > len(a) {
				return ids, fmt.Errorf("%w: attribute length %d of %d", errShort, al, len(a))
			}
			if at == attrPacketHdr && al >= 8 {
				ids = append(ids, binary.BigEndian.Uint32(a[4:]))
			}
			a = a[min(len(a), (al+3)&^3):]
		}
	}
	return ids, nil
}
