package bridge

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/receivers"
)

// metrics are the bridge's Prometheus metrics. Labels are bounded: route,
// session, receiver, outcome, reason; never topics or IDs. The README
// section "operations" lists them.
type metrics struct {
	received, acked, unmatched *prometheus.CounterVec // ingest, by receiver

	// routes and delivery (both modes), by route; retried also by outcome
	routeReceived, routeAcked, filtered, persisted, sent, retried      *prometheus.CounterVec
	deadLettered, dropped, expired, abandoned, stale, direct, fallback *prometheus.CounterVec

	senderUp, limit, inFlight *prometheus.GaugeVec // by sender; by route
	sendSeconds               *prometheus.HistogramVec

	pending, bytes, oldestAge, deadLetters *prometheus.GaugeVec // outbox, by session; dead letters by route
	backpressure                           *prometheus.CounterVec
	appendSeconds, appendBatch             prometheus.Histogram
	appendErrors                           prometheus.Counter
	ready                                  prometheus.Gauge

	vecs []interface{ DeletePartialMatch(prometheus.Labels) int } // every labelled metric, for forget
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	var vecs []prometheus.Collector // registered below with the others
	counter := func(sub, name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gobridge", Subsystem: sub, Name: name, Help: help}, labels)
		vecs = append(vecs, c)
		return c
	}
	gauge := func(sub, name, help string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "gobridge", Subsystem: sub, Name: name, Help: help}, labels)
		vecs = append(vecs, g)
		return g
	}
	m := &metrics{
		received:  counter("ingest", "received_total", "Messages handed to gobridge by a receiver.", "receiver"),
		acked:     counter("ingest", "acked_total", "Messages settled on every matched route and released for acknowledgement.", "receiver"),
		unmatched: counter("ingest", "unmatched_total", "Messages that matched no route (acknowledged at once).", "receiver"),

		routeReceived: counter("route", "received_total", "Messages that matched the route.", "route"),
		routeAcked:    counter("route", "acked_total", "Messages whose delivery on the route settled (persisted, sent, filtered, dead-lettered or dropped), releasing the source.", "route"),
		filtered:      counter("route", "filtered_total", "Messages a filter processor dropped.", "route"),
		persisted:     counter("route", "persisted_total", "Records committed to the outbox (shared_outbox).", "route"),

		sent:         counter("delivery", "sent_total", "Messages the target accepted.", "route"),
		retried:      counter("delivery", "retried_total", "Failed sends that will be retried, by outcome (transient, capacity).", "route", "outcome"),
		deadLettered: counter("delivery", "dead_lettered_total", "Messages dead-lettered (permanent failure, poisoned, expired with on_expired: dlq).", "route"),
		dropped:      counter("delivery", "dropped_total", "Messages dropped by policy (on_permanent_failure or on_expired: drop).", "route"),
		expired:      counter("delivery", "expired_total", "Records past their ttl, settled by on_expired.", "route"),
		abandoned:    counter("delivery", "abandoned_total", "Sends abandoned for ignoring their context past send_timeout (their records are retried).", "route"),
		stale:        counter("delivery", "stale_total", "Outcomes the store refused because another owner holds the record now (its claim was taken over).", "route"),
		direct:       counter("delivery", "direct_total", "direct_or_outbox: messages the target accepted on the direct attempt (no store write).", "route"),
		fallback:     counter("delivery", "fallback_total", "direct_or_outbox: messages that went to the outbox because the direct attempt failed, timed out, or was skipped (sender down, or earlier messages of its key in the outbox).", "route"),
		senderUp:     gauge("", "sender_up", "1 when the sender is up, 0 while it is down (probed once per backoff step; DESIGN 11.3).", "sender"),
		sendSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gobridge", Subsystem: "delivery", Name: "send_seconds",
			Help:    "Duration of one send to the target, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"route"}),
		limit:    gauge("delivery", "limit", "AIMD concurrency limit of the route's drainer.", "route"),
		inFlight: gauge("delivery", "in_flight", "Sends in flight.", "route"),

		pending:      gauge("outbox", "pending", "Live records (waiting for delivery) in the session.", "session"),
		bytes:        gauge("outbox", "bytes", "Bytes of the session's live records (payload, topic, headers).", "session"),
		deadLetters:  gauge("", "dead_letters", "Dead letters the route holds now.", "route"),
		oldestAge:    gauge("outbox", "oldest_age_seconds", "Age of the oldest pending record of the session, in seconds (0: none).", "session"),
		backpressure: counter("outbox", "backpressure_seconds_total", "Time ingest spent blocked because the session was at max_outbox_depth or max_outbox_bytes (or a route at max_dead_letters), in seconds, counted while it waits.", "session"),
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "gobridge", Subsystem: "outbox", Name: "append_seconds",
			Help:    "Duration of one group-commit append, in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		appendBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "gobridge", Subsystem: "outbox", Name: "append_batch_records",
			Help:    "Records per group-commit append.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		appendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gobridge", Subsystem: "outbox", Name: "append_errors_total",
			Help: "Failed outbox writes (retried), and outcomes the store refused.",
		}),

		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gobridge", Name: "ready", Help: "1 when /readyz reports ready.",
		}),
	}
	for _, c := range append(vecs, m.sendSeconds, m.appendSeconds, m.appendBatch, m.appendErrors, m.ready) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
		if v, ok := c.(interface{ DeletePartialMatch(prometheus.Labels) int }); ok {
			m.vecs = append(m.vecs, v)
		}
	}
	return m, nil
}

// forget deletes every series whose label (route, session, sender,
// receiver) is id.
func (m *metrics) forget(label, id string) {
	for _, v := range m.vecs {
		v.DeletePartialMatch(prometheus.Labels{label: id})
	}
}

// forget drops what the metrics, the journal and stall detection keep of
// the parts of old that p does not have: a process reloaded for months
// with changing names keeps only what runs.
func (b *Bridge) forget(old, p *parts) {
	b.gaugeMu.Lock() // p is current: outboxGauges sets no series of old's from now on
	defer b.gaugeMu.Unlock()
	var routes, sessions, senders []string
	for _, r := range old.routes {
		if p.route(r.id) == nil {
			routes = append(routes, r.id)
			b.metrics.forget("route", r.id)
		}
	}
	for id := range old.sessions {
		if p.sessions[id] == nil {
			sessions = append(sessions, id)
			b.metrics.forget("session", id)
			b.lastSent.Delete(id)
		}
	}
	for id := range old.senders {
		if p.senders[id] == nil {
			senders = append(senders, id)
			b.metrics.forget("sender", id)
		}
	}
	for _, rc := range old.receivers {
		if p.receiver(rc.id) == nil {
			b.metrics.forget("receiver", rc.id)
		}
	}
	b.journal.Forget(routes, sessions, senders)
}

// initRoute makes a route's series visible at zero.
func (m *metrics) initRoute(route string) {
	for _, c := range []*prometheus.CounterVec{m.routeReceived, m.routeAcked, m.filtered, m.persisted,
		m.sent, m.deadLettered, m.dropped, m.expired, m.abandoned, m.stale, m.direct, m.fallback} {
		c.WithLabelValues(route)
	}
	m.retried.WithLabelValues(route, drainer.ResultTransient)
	m.retried.WithLabelValues(route, drainer.ResultCapacity)
	m.inFlight.WithLabelValues(route)
}

func (m *metrics) initReceiver(id string) {
	m.received.WithLabelValues(id)
	m.acked.WithLabelValues(id)
	m.unmatched.WithLabelValues(id)
}

// receiverCollector exports the receivers' states and counters at scrape time.
type receiverCollector struct{ b *Bridge }

var (
	descConnected = prometheus.NewDesc("gobridge_receiver_connected",
		"1 when the receiver is connected (listener: accepting).", []string{"receiver"}, nil)
	descSubscribed = prometheus.NewDesc("gobridge_receiver_subscribed",
		"1 when every subscription of the receiver was granted.", []string{"receiver"}, nil)
	descReconnects = prometheus.NewDesc("gobridge_receiver_reconnects_total",
		"Successful connections after the first (mqtt).", []string{"receiver"}, nil)
	descDropped = prometheus.NewDesc("gobridge_receiver_dropped_total",
		"QoS 0 messages dropped because the receiver's in-flight bound was reached (mqtt).", []string{"receiver"}, nil)
	descAbandoned = prometheus.NewDesc("gobridge_receiver_abandoned_total",
		"Messages left unacknowledged because the receiver stopped or lost its connection before they settled (they are sent again).", []string{"receiver"}, nil)
	descUnrouted = prometheus.NewDesc("gobridge_receiver_unrouted_total",
		"Messages the embedded listener accepted on topics none of its subscriptions match.", []string{"receiver"}, nil)
	descRecvInFlight = prometheus.NewDesc("gobridge_receiver_in_flight",
		"Messages received and not yet acknowledged.", []string{"receiver"}, nil)
	descRecvInFlightBytes = prometheus.NewDesc("gobridge_receiver_in_flight_bytes",
		"Payload bytes received and not yet acknowledged (bounded by max_inflight_bytes).", []string{"receiver"}, nil)
	descAdopted = prometheus.NewDesc("gobridge_receiver_adopted_sessions",
		"Persistent sessions of other instances (gone, or not back yet) this receiver runs (mqtt, DynamoDB outbox).", []string{"receiver"}, nil)
	descRejected = prometheus.NewDesc("gobridge_ingest_rejected_total",
		"Messages a receiver refused to route: payload_too_large (over max_payload_bytes: dead-lettered truncated, or dropped without an outbox store) denied (the listener's publish ACL; acknowledged and discarded; http_listener: 401, 403), malformed (http_listener: 400, 415) or busy (http_listener: 503 before the message was taken).",
		[]string{"receiver", "reason"}, nil)
)

// Describe implements prometheus.Collector.
func (c receiverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnected, descSubscribed, descReconnects, descDropped, descAbandoned, descUnrouted, descRecvInFlight, descRecvInFlightBytes, descRejected, descAdopted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c receiverCollector) Collect(ch chan<- prometheus.Metric) {
	for _, nr := range c.b.cur.Load().receivers {
		status := nr.r.Status()
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, b2f(status.Connected), nr.id)
		ch <- prometheus.MustNewConstMetric(descSubscribed, prometheus.GaugeValue, b2f(status.Subscribed), nr.id)
		rs, ok := nr.r.(interface{ Stats() receivers.Stats }) // receivers that count their own events
		if !ok {
			continue
		}
		st := rs.Stats()
		ch <- prometheus.MustNewConstMetric(descReconnects, prometheus.CounterValue, float64(st.Reconnects), nr.id)
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.Dropped), nr.id)
		ch <- prometheus.MustNewConstMetric(descAbandoned, prometheus.CounterValue, float64(st.Abandoned), nr.id)
		ch <- prometheus.MustNewConstMetric(descUnrouted, prometheus.CounterValue, float64(st.Unrouted), nr.id)
		ch <- prometheus.MustNewConstMetric(descRecvInFlight, prometheus.GaugeValue, float64(st.InFlight), nr.id)
		ch <- prometheus.MustNewConstMetric(descRecvInFlightBytes, prometheus.GaugeValue, float64(st.InFlightBytes), nr.id)
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(st.TooLarge), nr.id, receivers.ReasonPayloadTooLarge)
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(st.Denied), nr.id, receivers.ReasonDenied)
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(st.Malformed), nr.id, receivers.ReasonMalformed)
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(st.Busy), nr.id, receivers.ReasonBusy)
		if g, ok := nr.r.(*guarded); ok {
			ch <- prometheus.MustNewConstMetric(descAdopted, prometheus.GaugeValue, float64(g.Adopted()), nr.id)
		}
	}
}

// observer turns drainer events into metrics, stall-detection state and
// the delivery journal's entries.
type observer struct {
	b *Bridge
	s *session // whose drainer reports
}

var _ drainer.Observer = (*observer)(nil)

// Delivered implements drainer.Observer.
func (o *observer) Delivered(out drainer.Outcome) {
	m := o.b.metrics
	switch out.Result {
	case drainer.ResultOK:
		m.sent.WithLabelValues(out.Route).Inc()
	case drainer.ResultTransient, drainer.ResultCapacity:
		m.retried.WithLabelValues(out.Route, out.Result).Inc()
	case drainer.ResultDeadLettered:
		m.deadLettered.WithLabelValues(out.Route).Inc()
	case drainer.ResultDropped:
		m.dropped.WithLabelValues(out.Route).Inc()
	case drainer.ResultExpired: // and settled by on_expired
		m.expired.WithLabelValues(out.Route).Inc()
		if o.s.routes[out.Route].Policy.DropExpired {
			m.dropped.WithLabelValues(out.Route).Inc()
		} else {
			m.deadLettered.WithLabelValues(out.Route).Inc()
		}
	case drainer.ResultFiltered: // a requeued ingest dead letter, at drain
		m.filtered.WithLabelValues(out.Route).Inc()
	case drainer.ResultStale:
		m.stale.WithLabelValues(out.Route).Inc()
	}
	if out.Latency > 0 {
		m.sendSeconds.WithLabelValues(out.Route).Observe(out.Latency.Seconds())
	}
	o.b.journal.Delivered(out)
}

// Limit implements drainer.Observer.
func (o *observer) Limit(route string, n int) {
	o.b.metrics.limit.WithLabelValues(route).Set(float64(n))
	o.b.journal.Limit(route, n)
}

// InFlight implements drainer.Observer.
func (o *observer) InFlight(route string, n int) {
	o.b.metrics.inFlight.WithLabelValues(route).Set(float64(n))
	o.b.journal.InFlight(route, n)
}

// Abandoned implements drainer.Observer.
func (o *observer) Abandoned(route string) { o.b.metrics.abandoned.WithLabelValues(route).Inc() }

// Sent implements drainer.Observer.
func (o *observer) Sent(session string, at time.Time) {
	o.b.lastSent.Store(session, at)
	o.b.journal.Sent(session, at)
}
