package routes

import (
	"maps"
	"regexp"
	"slices"
)

// zeroFields says, for every number and duration field (by its README path,
// "[]" for any list index), what an explicit 0 in the file means. An empty
// reason means 0 is a value the field takes as written (or another rule
// reports it); otherwise 0 is meaningless there and the reason says why.
// Leaving a field out (or writing null) always takes its default: a zero
// is never silently replaced by one. TestZeroFields_ClassifiesEveryNumber
// keeps this table complete: a new number or duration field needs a line.
var zeroFields = map[string]string{
	"version":                                      "", // the version rule reports it
	"bridge.shutdown_timeout":                      "in-flight sends would get no time at all to finish at shutdown",
	"bridge.lease_ttl":                             "every lease would lapse as soon as it was taken",
	"stores.outbox.options.done_retention":         "", // keep no delivered tombstones
	"receivers[].topics[].qos":                     "", // QoS 0, at most once (warned when it feeds a route)
	"receivers[].options.keep_alive":               "it turns MQTT keep-alive off, so a dead connection to the broker would go unnoticed",
	"receivers[].options.max_clients":              "no client could ever connect",
	"receivers[].options.session_expiry":           "", // sessions end when their client disconnects
	"receivers[].options.max_payload_bytes":        "every payload would be a dead letter",
	"receivers[].options.max_inflight_bytes":       "gobridge could never read a message",
	"receivers[].options.connect_timeout":          "a connection attempt to an unresponsive broker would never time out",
	"receivers[].options.max_in_flight":            "no request could ever be served",
	"receivers[].options.settle_timeout":           "every request would be answered 503 before its message settled",
	"receivers[].options.read_timeout":             "a slow client could hold a request open forever",
	"receivers[].options.write_timeout":            "a slow client could hold a request open forever",
	"receivers[].options.max_batch_lines":          "no batch could be accepted",
	"receivers[].options.max_batch_bytes":          "no batch could be accepted",
	"senders[].options.batch_size":                 "SendMessageBatch takes 1 to 10 messages",
	"senders[].options.timeout":                    "a request to a target that never answers would never time out",
	"routes[].session.partitions":                  "a session needs at least one partition",
	"routes[].session.drain_interval":              "the drainer would poll the store in a busy loop",
	"routes[].session.drain_strategy.interval":     "the drainer would poll the store in a busy loop",
	"routes[].session.drain_strategy.min_interval": "the drainer would poll the store in a busy loop",
	"routes[].session.drain_strategy.max_interval": "the drainer would poll the store in a busy loop",
	"routes[].session.drain_strategy.multiplier":   "the idle interval must grow: multiplier must be greater than 1",
	"routes[].session.batch_size":                  "a claim of 0 records would never deliver anything",
	"routes[].policy.max_in_flight":                "no send could ever start",
	"routes[].policy.max_outbox_depth":             "ingest would never acknowledge a message",
	"routes[].policy.max_outbox_bytes":             "ingest would never acknowledge a message",
	"routes[].policy.max_dead_letters":             "no record could ever be dead-lettered: every failure would be held",
	"routes[].policy.stall_after":                  "/readyz would report a stall whenever anything is pending",
	"routes[].policy.max_replay_attempts":          "", // replay_budget alone decides when a record is poisoned
	"routes[].policy.replay_budget":                "", // the attempt count alone decides
	"routes[].policy.send_timeout":                 "every send would time out before it started",
	"routes[].policy.direct_timeout":               "every direct attempt would time out before it started",
	"routes[].policy.ttl":                          "", // records never expire (the default)
	"routes[].policy.backoff.initial_interval":     "retries would follow each other without any delay",
	"routes[].policy.backoff.max_interval":         "retries would follow each other without any delay",
	"routes[].policy.backoff.multiplier":           "the delay would shrink to nothing: multiplier must be at least 1 (1 keeps it constant)",
}

var listIndex = regexp.MustCompile(`\[\d+\]`)

// checkExplicitZeros reports every number or duration written as 0 where 0
// means nothing useful. setDefaults has replaced such a zero with the
// default, but the config is invalid: what the file says is not what would
// run.
func (c *Config) checkExplicitZeros(add func(Problem)) {
	for _, p := range slices.Sorted(maps.Keys(c.src.zero)) {
		why := zeroFields[listIndex.ReplaceAllString(p, "[]")]
		if why == "" {
			continue
		}
		add(c.Errorf(p, "zero-value", "%s: 0 is not a usable value: %s; leave the field out to use its default", p, why))
	}
}
