package main

import (
	"encoding/binary"
	"slices"
	"testing"
)

// packetMsg is a queued-packet message as the kernel sends it.
func packetMsg(id uint32) []byte {
	hdr := binary.BigEndian.AppendUint32(nil, id)
	hdr = append(hdr, 0x08, 0x00, 3) // hw protocol, hook
	return message(subsysQueue<<8|msgPacket, 0, 7, append(attr(5, []byte{1, 2, 3, 4, 5}), attr(attrPacketHdr, hdr)...))
}

func TestPacketIDs(t *testing.T) {
	b := append(packetMsg(41), packetMsg(42)...)
	b = append(b, message(subsysQueue<<8|msgConfig, 0, 7, nil)...) // not a packet: skipped
	ids, err := packetIDs(b)
	if err != nil || !slices.Equal(ids, []uint32{41, 42}) {
		t.Fatalf("packetIDs = %v, %v; want [41 42]", ids, err)
	}
	if _, err := packetIDs(packetMsg(1)[:20]); err == nil {
		t.Fatal("a truncated message: no error")
	}
}

// errMsg is an acknowledgement: the header, then the error code (no
// nfgenmsg), then the request's header.
func errMsg(code int32) []byte {
	b := binary.NativeEndian.AppendUint32(nil, 36)
	b = binary.NativeEndian.AppendUint16(b, nlmsgError)
	b = append(b, make([]byte, 10)...)
	b = binary.NativeEndian.AppendUint32(b, uint32(code))
	return append(b, make([]byte, 16)...)
}

func TestAckError(t *testing.T) {
	if err := ackError(errMsg(0)); err != nil {
		t.Fatalf("ack 0: %v", err)
	}
	if err := ackError(errMsg(-1)); err == nil { // EPERM
		t.Fatal("ack -1: no error")
	}
	if err := ackError(errMsg(-1)[:10]); err == nil {
		t.Fatal("a short ack: no error")
	}
}

func FuzzPacketIDs(f *testing.F) {
	f.Add(packetMsg(7))
	f.Add(append(packetMsg(1), packetMsg(2)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, _ := packetIDs(b) // must not panic
		if len(ids) > len(b)/8 {
			t.Fatalf("%d ids from %d bytes", len(ids), len(b))
		}
	})
}
