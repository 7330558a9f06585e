package ring

import "github.com/hashicorp/memberlist"

// Transport is the gossip transport (memberlist's). It is named here so that
// packages above ring can wrap it (Config.WrapTransport) without importing
// memberlist themselves.
type Transport = memberlist.Transport
