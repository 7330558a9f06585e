package node_test

import (
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/internal/seedsteps"
	"github.com/ringlimit/ringlimit/node"
	"github.com/ringlimit/ringlimit/node/nodetest"
)

// newOneNode starts a one-node cluster on the manual clock clk.
func newOneNode(t *testing.T, clk ringlimit.Clock) ringlimit.Limiter {
	c := nodetest.Start(t, 1, func(cfg *node.Config) { cfg.Clock = clk })
	return c.Nodes[0]
}

// The seeds' and DESIGN's worked examples (internal/seedsteps, the tables
// local, remote and failover run), through a one-node node: its chain adds
// nothing to the decisions.
func TestWorkedExamples(t *testing.T) { seedsteps.Run(t, ringlimit.Local, newOneNode) }

func TestLeakyBucketBurstDelays(t *testing.T) { seedsteps.RunLeakyBurst(t, newOneNode) }
