package web

import (
	"context"
	"errors"
	"sync"

	"github.com/hooklane/hooklane/producer"
	"github.com/hooklane/hooklane/tasks"
)

// storedEvent is event id as kept for its payload retention: the event,
// the body each subscriber is sent, its subscribers (sorted) and when it
// was first published; ok is false once it is past the retention (or was
// never published).
//
// It reads the stored event alone (producer.StoredEvent: one round trip),
// not the delivery record of every subscriber the event went to, as the
// producer's GetEvent does: a page of an event fanned out to 100,000
// would cost 100,000 reads. The reply still holds every subscriber id
// (the stored event keeps them with the payload): its bytes grow with the
// fan-out, its commands do not.
func (c *console) storedEvent(ctx context.Context, p *producer.Producer, id string) (se tasks.StoredEvent, ok bool, err error) {
	if tasks.ValidateEventID(id) != nil {
		return se, false, nil
	}
	se, err = p.StoredEvent(ctx, id)
	if errors.Is(err, producer.ErrUnknownEvent) {
		return se, false, nil
	}
	return se, err == nil, err
}

// deliveryOf is one delivery record read by readDeliveries; Record is nil
// when the record is gone (past its retention).
type deliveryOf struct {
	SubscriberID string
	EventID      string
	Record       *tasks.DeliveryRecord
}

// readDeliveries reads the delivery of event ids[i] to subs[i], with its
// attempts, through the producer's GetDelivery, a few at a time: a page
// reads as many as it shows.
func (c *console) readDeliveries(ctx context.Context, p *producer.Producer, subs, ids []string) ([]deliveryOf, error) {
	out := make([]deliveryOf, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range ids {
		out[i] = deliveryOf{SubscriberID: subs[i], EventID: ids[i]}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d, err := p.GetDelivery(ctx, subs[i], ids[i])
			switch {
			case err == nil:
				out[i].Record = &d
			case !errors.Is(err, producer.ErrUnknownDelivery):
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
