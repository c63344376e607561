package producer

import (
	"strings"

	"github.com/hooklane/hooklane/tasks"
)

// Tenant is a Producer for tenant name: it sees and changes that tenant's
// subscribers, events, deliveries and dead letters only, by the ids the
// tenant gave them, and publishes to that tenant's subscribers. Two
// tenants may both have subscriber "s1" and event "evt_1": each is its
// own. It shares p's connection (Close on it does nothing). Name
// tasks.DefaultTenant is the default tenant: what a Producer without a
// tenant publishes and creates, by the same ids, without the other
// tenants' in its lists. A Producer that is no Tenant's (New) is the
// operator's: it writes as the default tenant and reads everything, other
// tenants' ids as stored ("<tenant>/<id>").
func (p *Producer) Tenant(name string) (*Producer, error) {
	if err := tasks.ValidateTenant(name); err != nil {
		return nil, err
	}
	t := *p
	t.ownRDB, t.tenant = false, name
	return &t, nil
}

// StoredID is the id p's subscriber id is stored under, which its Redis
// keys are named by (tasks.Keys).
func (p *Producer) StoredID(id string) string { return p.sid(id) }

// TenantName is the tenant p is a Producer for ("" the operator's: every
// tenant's, see Tenant).
func (p *Producer) TenantName() string { return p.tenant }

// writeTenant is the tenant p publishes and creates as.
func (p *Producer) writeTenant() string {
	if p.tenant == "" {
		return tasks.DefaultTenant
	}
	return p.tenant
}

// sid is the stored id of p's tenant's subscriber id.
func (p *Producer) sid(id string) string { return tasks.ScopedID(p.writeTenant(), id) }

// ext is the id a stored subscriber id is known by to p: its tenant's id,
// or, to the operator's Producer, the stored id itself.
func (p *Producer) ext(stored string) string {
	if p.tenant == "" {
		return stored
	}
	_, id := tasks.SplitScoped(stored)
	return id
}

// owns reports whether p sees the subscriber stored as stored.
func (p *Producer) owns(stored string) bool {
	return p.tenant == "" || tasks.TenantOf(stored) == p.tenant
}

// extSub is s as p shows it (its id p's).
func (p *Producer) extSub(s tasks.Subscriber) tasks.Subscriber {
	s.ID = p.ext(s.ID)
	return s
}

// extTask is task id "<stored subscriber>:<event>" as p shows it.
func (p *Producer) extTask(taskID string) string {
	sub, ev, ok := tasks.SplitTaskID(taskID)
	if !ok {
		return taskID
	}
	return tasks.TaskID(p.ext(sub), ev)
}

// storedTask is the stored task id of p's task id "<subscriber>:<event>";
// to a tenant's Producer, "" for one that names no subscriber of its
// (no ledger entry is stored under "").
func (p *Producer) storedTask(taskID string) string {
	if p.tenant == "" {
		return taskID
	}
	sub, ev, ok := strings.Cut(taskID, ":")
	if !ok || tasks.ValidateStoredSubscriberID(sub) != nil {
		return ""
	}
	return tasks.TaskID(p.sid(sub), ev)
}

// target is t as p shows it.
func (p *Producer) extTarget(t Target) Target {
	t.SubscriberID, t.TaskID = p.ext(t.SubscriberID), p.extTask(t.TaskID)
	return t
}

// extResult is a publish's result as p shows it (its targets' ids p's).
func (p *Producer) extResult(res *PublishResult, err error) (*PublishResult, error) {
	if res != nil && p.tenant != "" {
		for i, t := range res.Targets {
			res.Targets[i] = p.extTarget(t)
		}
	}
	return res, err
}

// eventKeys are the keys event id of p's tenant is stored under: the
// hash, and the release before's string (the default tenant's only).
func (p *Producer) eventKeys(id string) (event, legacy string) {
	return p.tenantEventKeys(p.writeTenant(), id)
}

// tenantEventKeys are eventKeys of tenant's event id.
func (p *Producer) tenantEventKeys(tenant, id string) (event, legacy string) {
	return p.keys.TenantEvent(tenant, id), p.keys.LegacyEvent(tasks.ScopedID(tenant, id))
}
