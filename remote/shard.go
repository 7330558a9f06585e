package remote

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"
)

// NumSlots is the number of hash slots of a Valkey Cluster.
const NumSlots = 16384

// shardMap is one snapshot of a cluster's topology: the master that serves
// each slot. names[0] is "", for slots no master serves.
type shardMap struct {
	master [NumSlots]uint16 // index into names
	names  []string
}

// Slot returns the cluster hash slot of key's Valkey key (Key(key)): the
// CRC16 of its hash tag, which is key itself up to its first "}" (the whole
// Valkey key if key starts with "}"), modulo 16384. It allocates nothing.
func (l *Limiter) Slot(key string) uint16 {
	tag := len(key)
	for i := 0; i < len(key); i++ {
		if key[i] == '}' {
			tag = i
			break
		}
	}
	if tag > 0 {
		return crc16(0, key[:tag]) % NumSlots
	}
	// An empty tag: the whole key is hashed.
	crc := crc16(0, l.prefix)
	crc = crc16(crc, "{")
	crc = crc16(crc, key)
	return crc16(crc, "}") % NumSlots
}

// Shard returns the address of the Valkey Cluster master that serves key's
// slot, as the cluster last reported it (RefreshShards), or "" when the
// client is not a cluster client, the topology has not been read yet, or no
// master serves the slot. Keys of one shard fail together when its master
// does: a failover.Limiter keeps one breaker per shard (Config.Shard), so a
// dead master does not send the other masters' keys to the fallback. It
// allocates nothing and takes no lock.
func (l *Limiter) Shard(key string) string {
	m := l.shards.Load()
	if m == nil {
		return ""
	}
	return m.names[m.master[l.Slot(key)]]
}

// RefreshShards reads the cluster's slot map (CLUSTER SLOTS, from the first
// master that answers) for Shard. With a client that is not a cluster client
// it does nothing. On an error the previous map stays.
func (l *Limiter) RefreshShards(ctx context.Context) error {
	if l.client.Mode() != valkey.ClientModeCluster {
		return nil
	}
	var err error
	for _, c := range l.client.Nodes() {
		var m *shardMap
		if m, err = readShards(ctx, c); err == nil {
			l.shards.Store(m)
			return nil
		}
	}
	if err == nil {
		err = fmt.Errorf("no node known")
	}
	return fmt.Errorf("remote: cluster slots: %w", err)
}

// readShards asks one node for CLUSTER SLOTS, within a second at most.
func readShards(ctx context.Context, c valkey.Client) (*shardMap, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ranges, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	m := &shardMap{names: []string{""}}
	index := map[string]uint16{"": 0}
	for _, r := range ranges {
		v, err := r.ToArray()
		if err != nil || len(v) < 3 {
			return nil, fmt.Errorf("unexpected slot range %s", r.String())
		}
		lo, err1 := v[0].AsInt64()
		hi, err2 := v[1].AsInt64()
		master, err3 := v[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || lo < 0 || hi >= NumSlots || lo > hi {
			return nil, fmt.Errorf("unexpected slot range %s", r.String())
		}
		host, _ := master[0].ToString()
		port, err := master[1].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("unexpected slot range %s", r.String())
		}
		if host == "" { // the node does not know its own address: the one we asked
			host, _, _ = net.SplitHostPort(addrOf(c))
		}
		name := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		i, ok := index[name]
		if !ok {
			i = uint16(len(m.names))
			index[name] = i
			m.names = append(m.names, name)
		}
		for s := lo; s <= hi; s++ {
			m.master[s] = i
		}
	}
	return m, nil
}

// addrOf returns the address of a single-node client.
func addrOf(c valkey.Client) string {
	for addr := range c.Nodes() {
		return addr
	}
	return ""
}

// crc16tab is the table of CRC-16/XMODEM (polynomial 0x1021), the checksum
// of Valkey Cluster's key slots.
var crc16tab = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// crc16 continues the CRC-16/XMODEM crc over s.
func crc16(crc uint16, s string) uint16 {
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16tab[byte(crc>>8)^s[i]]
	}
	return crc
}
