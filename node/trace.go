package node

import (
	"context"
	"log/slog"
)

// The hand-off trace: with Config.Logger enabled at Debug level, every step
// of the ownership core that moves or places a key's state is logged (a
// call's route while its key changes hands, a pull and its answer, a load,
// a push and what its target did, a Done, a view). Steady decisions are not
// logged. It is for operators and tests that must follow one key through a
// deploy; it costs one branch per step when off.

func (n *Node) initTrace() {
	n.tracing = n.cfg.Logger.Enabled(context.Background(), slog.LevelDebug)
}

// trace logs one hand-off step; callers check n.tracing first, so that the
// arguments are not built when it is off.
func (n *Node) trace(msg string, args ...any) {
	n.cfg.Logger.Debug("node: hand-off: "+msg, append([]any{"node", n.name}, args...)...)
}
