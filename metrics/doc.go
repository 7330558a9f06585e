// Package metrics exports a ringlimit node's, a Middleware's and a rule
// Watcher's counters as Prometheus series:
//
//	reg := prometheus.NewRegistry()   // or prometheus.DefaultRegisterer
//	err := metrics.Register(reg, n)   // n *node.Node
//	err = metrics.RegisterMiddleware(reg, mw)
//	err = metrics.RegisterWatcher(reg, w)
//
// Handler does the same with a registry of its own, for programs that keep
// none.
//
// Every value is read from the observed thing when the registry is
// gathered: node, httplimit and rules count with atomic counters and have no
// Prometheus dependency. Names follow Prometheus practice: the ringlimit_
// prefix, base units (seconds), counters ending in _total. Labels come from
// bounded sets only (source, result, policy, peer name, rule name); a
// rate-limit key is never a label. Every family is present, at zero, from
// the first scrape, except where a label has no value yet: peer series need a
// second member, rule series a rule.
//
// Series of Register (the node):
//
//	ringlimit_decisions_total{source,result}        counter  decisions returned to this node's callers, by the source
//	                                                         that decided (local, peer, store, fallback) and result
//	                                                         (allowed, denied, shadow_denied); exact
//	ringlimit_decision_duration_seconds{source}     histogram time to decide; sampled: _count is about 1/64 of the decisions
//	ringlimit_served_total                          counter  calls this node decided for peers, as their keys' owner
//	ringlimit_forwards_total                        counter  calls forwarded to the owning peer
//	ringlimit_forward_failures_total                counter  of those, the ones the owner did not answer (went to the store)
//	ringlimit_redirects_total                       counter  calls sent on to a key's new holder during ownership changes
//	ringlimit_peer_breaker_state{peer}              gauge    0 closed, 1 half-open, 2 open
//	ringlimit_store_breaker_state                   gauge    0 closed, 1 half-open, 2 open
//	ringlimit_store_breaker_opens_total             counter
//	ringlimit_store_errors_total                    counter  store calls that failed
//	ringlimit_store_timeouts_total                  counter  store calls that timed out
//	ringlimit_peer_timeout_seconds{peer}            gauge    effective timeout of a forward to each peer now (RTO under ForwardTimeout)
//	ringlimit_store_timeout_seconds{shard}          gauge    effective timeout of a store call now, per shard (RTO under StoreTimeout)
//	ringlimit_sched_lag_seconds                     gauge    how long this node was descheduled at a stretch lately (5 s)
//	ringlimit_fallback_decisions_total{policy}      counter  decisions by the fail-open policy (open, closed, local_share)
//	ringlimit_members                               gauge    live members this node sees, itself included
//	ringlimit_keys                                  gauge    keys whose state this node holds
//	ringlimit_evictions_total{live}                 counter  keys dropped for room; live="true": their state still mattered
//	ringlimit_evictions_denying_total               counter  of those live, keys that were denying
//	ringlimit_expirations_total                     counter  idle keys dropped
//	ringlimit_handoff_states_total{direction}       counter  states handed over: out (given), in (received)
//	ringlimit_handoff_pulls_total                   counter
//	ringlimit_handoff_failures_total                counter
//	ringlimit_handoff_in_progress                   gauge    1 while leaving or within the hand-off window
//	ringlimit_writebehind_writes_total              counter  states written behind to the store
//	ringlimit_writebehind_failures_total            counter  failed pipelined writes
//	ringlimit_writebehind_drops_total               counter  states dropped from the full queue
//	ringlimit_writebehind_queue                     gauge    states waiting to be written
//	ringlimit_store_loads_total                     counter  states looked up on gaining ownership
//	ringlimit_store_load_failures_total             counter
//
// Series of RegisterMiddleware and RegisterWatcher:
//
//	ringlimit_http_requests_total{rule,result}      counter  each rule's decisions on requests: allowed, denied, shadow_denied
//	ringlimit_near_limit_total{rule}                counter  allowed decisions that left < 20 % of the limit
//	ringlimit_http_key_errors_total                 counter
//	ringlimit_http_limiter_errors_total             counter
//	ringlimit_http_delay_expired_total              counter
//	ringlimit_rules_reloads_total{result}           counter  success, failure
//	ringlimit_rules                                 gauge    rules in force
//
// The latency histogram costs a clock read on the decisions it times, so
// about one decision in node.LatencySampleEvery (64) is timed, and its _count
// and _sum are of those only; decisions_total counts every decision.
// Register also turns the node's decision counting on: a node nobody
// registers pays one atomic load per decision.
package metrics
