// Package producer is the SDK apps call to register subscribers and publish
// events to them.
//
// Publish fans an event out to every matching, non-paused subscriber as one
// asynq task each. The task id is derived from (subscriber id, event id), so
// publishing the same event again — after a timeout, a crash, or a partly
// failed fan-out — enqueues only what is missing and reports the rest as
// duplicates: while the earlier task exists asynq refuses its id, and
// once a worker has taken it the delivery record (kept for
// Config.DedupWindow after the delivery ends) says so. Publishing is
// therefore safe to repeat until it reports no failure.
//
// PublishBatch (PublishEach, with options per event) publishes up to
// MaxBatch events in a few round trips instead of a few per event, and
// answers each as Publish would have, in order: a refused event writes
// nothing for itself and does not stop the others.
//
// Every delivery has a record (Producer.GetDelivery, Producer.Deliveries):
// its state, times and attempts; each event's payload is kept once for
// Config.PayloadRetention (Producer.GetEvent), so that Producer.Resend can
// send it again.
//
// Producer.Tenant is a Producer for one tenant (a customer of the app that
// owns its endpoints): it creates, reads, publishes to and replays that
// tenant's subscribers, events, deliveries and dead letters only, by the
// ids the tenant gave them; two tenants may both have subscriber "s1"
// and event "evt_1", each its own. A Producer from New is the operator's:
// it writes as the default tenant (whose ids are stored as given: data of
// a release before tenants is the default tenant's) and reads every
// tenant's.
//
// Delivery is at-least-once: a worker that dies after the endpoint answered
// but before recording it delivers again, with the same webhook-id header,
// which receivers use to drop duplicates. There is no ordering promise.
package producer
