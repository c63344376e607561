package web_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hooklane/hooklane/tasks"
)

// The limits openapi.json states for ids, types, regions, secrets, event
// filters and URLs are the ones the server enforces: for each value here
// the document's schema and the server's validator agree, accept or
// refuse. A pattern edited on one side only fails this test.
func TestSchemaLimitsMatchValidators(t *testing.T) {
	t.Parallel()
	doc := theContract(t).doc
	schemas := doc.Components.Schemas
	subscriberRequest := schemas["SubscriberRequest"].Value.Properties
	eventFilter := subscriberRequest["event_types"].Value.Items
	secret := func(n int) string { return "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, n)) }
	ids := []string{"", "a", ".", "..", "...", ".a", "a.", "..a", "a..b", "a_b-c.d", "a:b", "a~b", "a/b", "a b", "é",
		strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("a", 128), strings.Repeat("a", 129),
		"." + strings.Repeat("a", 63), ".." + strings.Repeat("a", 62), ".." + strings.Repeat("a", 63)}
	for _, c := range []struct {
		name      string
		schema    *openapi3.SchemaRef
		validate  func(string) error
		candidate []string
	}{
		{"SubscriberID", schemas["SubscriberID"], tasks.ValidateSubscriberID, ids},
		{"StoredSubscriberID", schemas["StoredSubscriberID"], tasks.ValidateStoredSubscriberID, ids},
		{"EventID", schemas["EventID"], tasks.ValidateEventID, ids},
		{"EventType", schemas["EventType"], func(typ string) error {
			return (&tasks.Event{ID: "e", Type: typ, Data: []byte("null")}).Validate()
		}, append(ids, "video.trending", "a.*", "*")},
		{"Region", schemas["Region"], tasks.ValidateRegion, []string{"", "eu", "us-east-1", "EU", "eu_1", "eu.1", strings.Repeat("a", 32), strings.Repeat("a", 33)}},
		{"Secret", schemas["Secret"], tasks.ValidateSecret, []string{
			secret(20), secret(22), secret(23), secret(24), secret(25), secret(26), secret(27), secret(40),
			secret(62), secret(63), secret(64), secret(65), secret(66), secret(70),
			"whsec_", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw=",
			"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", "whsec_MfKQ9r8GKYqrTwjU\nPD8ILPZIo2LaLaSw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS_",
		}},
		{"an event_types entry", eventFilter, func(p string) error {
			s := tasks.Subscriber{ID: "a", URL: "https://a.test/h", EventTypes: []string{p}, Secrets: []string{secret(32)}}
			s, _ = s.WithDefaults()
			return s.Validate()
		}, append(ids, "video.*", ".*", "a.**", "*", "a*", "a.*.*", strings.Repeat("a", 126)+".*", strings.Repeat("a", 127)+".*")},
		{"SubscriberRequest.url", subscriberRequest["url"], tasks.ValidateURL, []string{
			"https://a.test/h", "http://a.test", "HTTPS://a.test/h?x=1", "https://[::1]:8080/h", "https://a.test?x",
			"", "a.test/h", "ftp://a.test/h", "https://", "https:///h", "https://u@a.test/h", "https://u:p@a.test/h",
			"https://a.test/h#frag", "https://a.test/h#", "https://a.test?a=b#c", "https://a.test/" + strings.Repeat("a", 2048-16), "https://a.test/" + strings.Repeat("a", 2048-15),
		}},
	} {
		for _, v := range c.candidate {
			schemaOK := c.schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()) == nil
			serverOK := c.validate(v) == nil
			if schemaOK != serverOK {
				t.Errorf("%s %q: the document accepts it: %v, the server: %v", c.name, v, schemaOK, serverOK)
			}
		}
	}
}
