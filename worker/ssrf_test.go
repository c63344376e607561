package worker

import (
	"testing"
)

func TestDialControlRefusesBeforeConnecting(t *testing.T) {
	ctl := dialControl(nil)
	if err := ctl("tcp4", "169.254.169.254:80", nil); err == nil {
		t.Fatal("metadata address accepted")
	}
	if err := ctl("tcp4", "93.184.216.34:443", nil); err != nil {
		t.Fatalf("public address refused: %v", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://a.test/hook?token=s3cret": "https://a.test/hook?REDACTED",
		"https://a.test/hook":              "https://a.test/hook",
		"http://u:p@a.test/x#frag":         "http://a.test/x",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
