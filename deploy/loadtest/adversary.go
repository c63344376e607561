package loadtest

// idle lists what a subscriber's endpoint was built to do to the sender and
// did not do in this run. Each invariant is only as good as the attack it
// survived: "0 early" from an endpoint that never answered 429, or
// "nothing lost" from a CRM whose outage nobody hit, held without being
// tested. collect records each as an invalid reason that hides an
// invariant.
func idle(s subSpec, sr *SubReport) []string {
	if sr.Published == 0 {
		return []string{"no events were published to it, so nothing about it was tested"}
	}
	e, st := s.Endpoint.withDefaults(), sr.Stats
	var out []string
	switch e.Kind {
	case RateEnforcing:
		switch {
		case st.Throttled == 0:
			out = append(out, "never answered 429 (its bucket never ran dry), so its 0 early and 0 bans prove nothing")
		case st.RetryAfterSent == 0:
			out = append(out, "its 429s carried no Retry-After, so there was no deadline to come back early to")
		case e.BanFor > 0 && st.Armed == 0:
			out = append(out, "no Retry-After deadline was ever armed with a ban")
		}
	case Flaky:
		if e.ResetShare > 0 && st.Resets == 0 {
			out = append(out, "never reset a connection")
		}
		if e.FailShare > 0 && st.Failed == 0 {
			out = append(out, "never answered 5xx")
		}
	case Gone:
		if st.Gone == 0 {
			out = append(out, "never answered 410")
		}
	}
	// A down endpoint refuses connections: only the worker sees that.
	if e.DownFor > 0 && sr.Worker["http:error"] == 0 {
		out = append(out, "no request was refused while it was down, so its outage was never hit")
	}
	return out
}
