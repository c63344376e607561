// Package tasks defines what hooklane stores and queues: the Event apps
// publish, the Subscriber it is delivered to, and the asynq task that carries
// one event to one subscriber. It does no I/O.
//
// The task follows asynq's own pattern: TypeDeliver, a Delivery payload with
// snake_case JSON and NewDeliverTask. Its TaskID is derived from the subscriber
// and event ids, which is what makes publishing idempotent.
package tasks
