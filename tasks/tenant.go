package tasks

import "strings"

// DefaultTenant is the tenant of everything published without one: the
// operator's own subscribers and events, and all that a release before
// tenants stored. Its ids are stored as they are given, so that nothing
// of it moves.
const DefaultTenant = "default"

// A tenant owns its subscribers, events, deliveries and dead letters: ids
// are unique within a tenant. Inside hooklane a subscriber of tenant t is
// the subscriber id "t/<id>" (ScopedID) and its events are stored under
// "t/<event id>" (Keys.TenantEvent): neither a subscriber id, an event id
// nor an event type may hold a slash, so no id of one tenant is another's,
// and every per-subscriber key, task and lock of a tenant's subscriber is
// its own. The default tenant's ids have no prefix.
const tenantSep = "/"

// ValidateTenant accepts 1-32 characters of a-z 0-9 _ -.
func ValidateTenant(name string) error {
	if name == "" || len(name) > 32 {
		return invalid("tenant", "want 1-32 characters of a-z 0-9 _ -")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return invalid("tenant", "want 1-32 characters of a-z 0-9 _ -")
		}
	}
	return nil
}

// ScopedID is the id subscriber id of tenant is stored under.
func ScopedID(tenant, id string) string {
	if tenant == "" || tenant == DefaultTenant {
		return id
	}
	return tenant + tenantSep + id
}

// SplitScoped is ScopedID's inverse: the tenant of a stored subscriber id
// and the id its tenant knows it by.
func SplitScoped(stored string) (tenant, id string) {
	if t, rest, ok := strings.Cut(stored, tenantSep); ok {
		return t, rest
	}
	return DefaultTenant, stored
}

// TenantOf is the tenant of a stored subscriber id.
func TenantOf(stored string) string {
	t, _ := SplitScoped(stored)
	return t
}

// ScopedRange is the ZRANGEBYLEX range (min, max) of tenant's stored
// subscriber ids in a sorted set of every one: "<tenant>/" up to, not
// including, "<tenant>0" ("0" follows "/"). Not for the default tenant,
// whose ids are the ones without a slash.
func ScopedRange(tenant string) (lo, hi string) {
	return "[" + tenant + tenantSep, "(" + tenant + "0"
}

// scopedEvent is the name event id of tenant is stored under.
func scopedEvent(tenant, id string) string { return ScopedID(tenant, id) }

// ValidateScopedID accepts a stored subscriber id: a default tenant's id
// as ValidateStoredSubscriberID does, or "<tenant>/<id>" of another
// tenant. For what the engine stored (task ids, payloads), never for an
// id a caller gives, which its tenant scopes (ScopedID).
func ValidateScopedID(stored string) error {
	t, id, scoped := strings.Cut(stored, tenantSep)
	if !scoped {
		return ValidateStoredSubscriberID(stored)
	}
	if t == DefaultTenant || ValidateTenant(t) != nil {
		return invalid("subscriber_id", "want 1-64 characters of A-Z a-z 0-9 . _ -")
	}
	return ValidateStoredSubscriberID(id)
}
