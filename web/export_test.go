package web

import "github.com/redis/go-redis/v9"

// Redis is the Server's Redis client, so that BenchmarkPublishSpike can
// read its pool's figures and time a publish's round trips on it.
func (s *Server) Redis() redis.UniversalClient { return s.rdb }

// APIRoutePatterns is the pattern of each entry of apiRoutes, the table the
// API's mux is built from, for the test that compares it with openapi.json.
func APIRoutePatterns() []string {
	out := make([]string, len(apiRoutes))
	for i, rt := range apiRoutes {
		out[i] = rt.pattern
	}
	return out
}

// RefreshFor is refreshFor, the seconds after which a page showing
// deliveries reloads itself.
var RefreshFor = refreshFor

// PublishesInProgress is how many publishes hold a place (admission.go).
func (s *Server) PublishesInProgress() int { return s.places.inProgress() }
