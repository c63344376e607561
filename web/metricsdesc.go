package web

import "github.com/prometheus/client_golang/prometheus"

// The series of /metrics (web/API.md, Metrics). The counters and histograms
// exist twice: over every subscriber, without a subscriber label (from the
// namespace's totals), and per subscriber marked for metrics, named
// hooklane_subscriber_…, with one.

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("hooklane_"+name, help, labels, nil)
}

// countDescs are the series of one counters hash.
type countDescs struct {
	deliveries, responses, throttled, deferrals, dead, latency, lateness *prometheus.Desc
}

// newCountDescs names one counters hash's series; since says from when it
// counts: every one of them is all-time, never reset, and says so.
func newCountDescs(prefix, whose, since string, labels ...string) countDescs {
	l := func(more ...string) []string { return append(labels[:len(labels):len(labels)], more...) }
	whose += ", all-time (" + since + ")"
	return countDescs{
		deliveries: desc(prefix+"deliveries_total", "Delivery task runs"+whose+", by outcome: delivered (2xx), failed (counted, will retry), deferred (not yet; no attempt spent), dead, infra_error (Redis trouble in a gate).", l("outcome")...),
		responses:  desc(prefix+"responses_total", "Answers received from endpoints"+whose+`, by HTTP status; code "error" when the request got none (connect error, timeout).`, l("code")...),
		throttled:  desc(prefix+"throttled_total", "429 Too Many Requests answers received from endpoints"+whose+".", l()...),
		deferrals:  desc(prefix+"deferrals_total", "Tasks"+whose+", rescheduled without spending an attempt, by the gate that deferred them.", l("gate")...),
		dead:       desc(prefix+"dead_letters_total", "Deliveries"+whose+", given up, by reason: attempts, horizon, gone, refused, undecodable.", l("reason")...),
		latency:    desc(prefix+"delivery_latency_seconds", "Publish to delivered (2xx received)"+whose+".", l()...),
		lateness:   desc(prefix+"delivery_lateness_seconds", "Due (the later of publish and not-before) to delivered"+whose+": how late a scheduled event arrived.", l()...),
	}
}

var (
	aggregateDescs  = newCountDescs("", ", every subscriber together", "since the namespace's first delivery")
	subscriberDescs = newCountDescs("subscriber_", " of a subscriber marked for metrics", "since the subscriber was created", "subscriber")
	tenantDescs     = newCountDescs("tenant_", " of a tenant listed in HOOKLANE_METRICS_TENANTS, every subscriber of its together", "since its first delivery", "tenant")

	descUp           = desc("redis_up", "1 when the last scrape could read hooklane's state from Redis.")
	descSubscribers  = desc("subscribers", "Subscribers.")
	descPausedCount  = desc("subscribers_paused", "Subscribers paused (by an operator, or by a 410 Gone).")
	descCoolingCount = desc("subscribers_cooling", "Subscribers whose destination is in a Retry-After or 429 cooldown now.")
	descOpenCount    = desc("breakers_open", "Destinations whose circuit breaker is open (their events held, one probe at a time).")
	descBreaker      = desc("breaker_state", "The marked subscriber's circuit breaker: 0 closed, 1 open, 2 open with the probe in flight.", "subscriber")
	descEffective    = desc("effective_rate", "Requests per second the marked subscriber is sent at: its limit, or less, learnt from the receiver (429s, RateLimit-Policy) or carried by its in-flight slots at the endpoint's latency; the reason is in GET /v1/subscribers/{id}/status.", "subscriber")
	descMarked       = desc("metrics_marked_subscribers", "Subscribers marked for series of their own (metrics: true); only the first metrics_max_subscribers by id get them.")
	descMaxMarked    = desc("metrics_max_subscribers", "How many marked subscribers get series of their own (HOOKLANE_METRICS_MAX_SUBSCRIBERS).")
	descInFlight     = desc("in_flight", "Requests to the endpoint in flight now, per marked subscriber.", "subscriber")
	descPaused       = desc("subscriber_paused", "1 when the marked subscriber is paused.", "subscriber")
	descCooldown     = desc("cooldown_remaining_seconds", "Time until the marked subscriber's Retry-After cooldown ends; 0 when none.", "subscriber")
	descOldest       = desc("oldest_eligible_task_age_seconds", "Age of the oldest task that is due and waiting for a worker (asynq queue latency).", "queue")
	descRetryWait    = desc("retry_wait_tasks", "Tasks waiting in asynq's retry state: counted failures in backoff and deferrals waiting for a deadline.", "queue")
	descScheduled    = desc("scheduled_tasks", "Tasks waiting for a not-before time or a pacing slot.", "queue")
	descOperator     = desc("operator_events_total", "Operator events published (hooklane.subscriber.failing, .recovered, .disabled, hooklane.delivery.dead), all-time, by type.", "type")
	descDropped      = desc("dropped_total", "Tasks dropped unsent, all-time, by reason: deleted (their subscriber was deleted or re-created since).", "reason")
	descPublishing   = desc("web_publishes_in_progress", "Publishes this web process is serving now (at most HOOKLANE_WEB_MAX_PUBLISHES).")
	descShed         = desc("web_publishes_shed_total", "Publishes this web process answered 503 overloaded, every place taken (HOOKLANE_WEB_MAX_PUBLISHES), all-time since it started; nothing of them was written.")
	descRescued      = desc("rescued_total", "Deliveries that nothing was moving, moved by the rescuer or a turn, all-time, by reason: no_turn, lost_run, lost_task, stale.", "reason")
)

var allDescs = []*prometheus.Desc{
	aggregateDescs.deliveries, aggregateDescs.responses, aggregateDescs.throttled, aggregateDescs.deferrals,
	aggregateDescs.dead, aggregateDescs.latency, aggregateDescs.lateness,
	subscriberDescs.deliveries, subscriberDescs.responses, subscriberDescs.throttled, subscriberDescs.deferrals,
	subscriberDescs.dead, subscriberDescs.latency, subscriberDescs.lateness,
	tenantDescs.deliveries, tenantDescs.responses, tenantDescs.throttled, tenantDescs.deferrals,
	tenantDescs.dead, tenantDescs.latency, tenantDescs.lateness,
	descUp, descSubscribers, descPausedCount, descCoolingCount, descOpenCount, descMarked, descMaxMarked,
	descInFlight, descPaused, descBreaker, descEffective, descCooldown, descOldest, descRetryWait, descScheduled, descDropped, descRescued, descOperator,
	descPublishing, descShed,
}
