package deploy_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hooklane/hooklane/deploy"
)

// env is a getenv over a map.
func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestRedisFromEnv(t *testing.T) {
	ca := writeCA(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-pw" // must never appear in an error
	tests := []struct {
		name string
		env  map[string]string
		want deploy.RedisConfig
		// errs: every string must be in the error; none: no error.
		errs []string
	}{
		{name: "nothing set", env: nil, want: deploy.RedisConfig{}},
		{name: "url", env: map[string]string{"REDIS_URL": "redis://:" + secret + "@127.0.0.1:6380/2"},
			want: deploy.RedisConfig{URL: "redis://:" + secret + "@127.0.0.1:6380/2"}},
		{name: "rediss url with skip_verify, CA and skip-verify variable", env: map[string]string{
			"REDIS_URL": "rediss://h.example:6380/0?skip_verify=true", "HOOKLANE_REDIS_TLS_CA": ca, "HOOKLANE_REDIS_TLS_SKIP_VERIFY": "true"},
			want: deploy.RedisConfig{URL: "rediss://h.example:6380/0?skip_verify=true", TLSCAFile: ca, TLSSkipVerify: true}},
		{name: "rediss url with HOOKLANE_REDIS_TLS=true too", env: map[string]string{"REDIS_URL": "rediss://h.example:6380", "HOOKLANE_REDIS_TLS": "true"},
			want: deploy.RedisConfig{URL: "rediss://h.example:6380", TLS: true}},
		{name: "cluster with auth and tls", env: map[string]string{
			"HOOKLANE_REDIS_CLUSTER_ADDRS": " 10.0.0.1:7000, node-b.example:7001 ,[::1]:7002",
			"HOOKLANE_REDIS_USERNAME":      "app", "HOOKLANE_REDIS_PASSWORD": secret,
			"HOOKLANE_REDIS_TLS": "true", "HOOKLANE_REDIS_TLS_SKIP_VERIFY": "false", "HOOKLANE_REDIS_TLS_CA": ca},
			want: deploy.RedisConfig{ClusterAddrs: []string{"10.0.0.1:7000", "node-b.example:7001", "[::1]:7002"},
				Username: "app", Password: secret, TLS: true, TLSCAFile: ca}},
		{name: "sentinel with auth on both", env: map[string]string{
			"HOOKLANE_REDIS_SENTINEL_ADDRS": "s1:26379,s2:26379", "HOOKLANE_REDIS_SENTINEL_MASTER": "mymaster",
			"HOOKLANE_REDIS_PASSWORD": secret, "HOOKLANE_REDIS_SENTINEL_USERNAME": "watcher", "HOOKLANE_REDIS_SENTINEL_PASSWORD": secret,
			"HOOKLANE_REDIS_TLS": "1", "HOOKLANE_REDIS_TLS_SKIP_VERIFY": "true"},
			want: deploy.RedisConfig{SentinelAddrs: []string{"s1:26379", "s2:26379"}, SentinelMaster: "mymaster",
				Password: secret, SentinelUsername: "watcher", SentinelPassword: secret, TLS: true, TLSSkipVerify: true}},

		{name: "url and cluster", env: map[string]string{"REDIS_URL": "redis://:" + secret + "@h:6379", "HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000"},
			errs: []string{"REDIS_URL", "HOOKLANE_REDIS_CLUSTER_ADDRS", "choose one"}},
		{name: "cluster and sentinel", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000", "HOOKLANE_REDIS_SENTINEL_ADDRS": "h:26379", "HOOKLANE_REDIS_SENTINEL_MASTER": "m"},
			errs: []string{"HOOKLANE_REDIS_CLUSTER_ADDRS", "HOOKLANE_REDIS_SENTINEL_ADDRS", "choose one"}},
		{name: "url and a sentinel master alone", env: map[string]string{"REDIS_URL": "redis://h:6379", "HOOKLANE_REDIS_SENTINEL_MASTER": "m"},
			errs: []string{"REDIS_URL", "HOOKLANE_REDIS_SENTINEL_MASTER", "choose one"}},
		{name: "sentinel addrs without master", env: map[string]string{"HOOKLANE_REDIS_SENTINEL_ADDRS": "h:26379"},
			errs: []string{"HOOKLANE_REDIS_SENTINEL_ADDRS", "needs the master's name", "HOOKLANE_REDIS_SENTINEL_MASTER"}},
		{name: "sentinel master without addrs", env: map[string]string{"HOOKLANE_REDIS_SENTINEL_MASTER": "m"},
			errs: []string{"HOOKLANE_REDIS_SENTINEL_MASTER", "needs the sentinels' addresses", "HOOKLANE_REDIS_SENTINEL_ADDRS"}},
		{name: "cluster address without port", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000,10.0.0.2"},
			errs: []string{"HOOKLANE_REDIS_CLUSTER_ADDRS", `"10.0.0.2"`, "host:port"}},
		{name: "cluster address without host", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": ":7000"},
			errs: []string{"HOOKLANE_REDIS_CLUSTER_ADDRS", `":7000"`}},
		{name: "cluster address with an empty entry", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000,,h:7001"},
			errs: []string{"HOOKLANE_REDIS_CLUSTER_ADDRS", `""`}},
		{name: "sentinel address with a bad port", env: map[string]string{"HOOKLANE_REDIS_SENTINEL_ADDRS": "h:99999", "HOOKLANE_REDIS_SENTINEL_MASTER": "m"},
			errs: []string{"HOOKLANE_REDIS_SENTINEL_ADDRS", `"h:99999"`, "1 to 65535"}},
		{name: "url of another scheme", env: map[string]string{"REDIS_URL": "http://h:6379"},
			errs: []string{"REDIS_URL", "not a redis://"}},
		{name: "malformed url holding a password", env: map[string]string{"REDIS_URL": "redis://u:" + secret + "@h:port/0"},
			errs: []string{"REDIS_URL", "invalid port"}},
		{name: "url with a bad database", env: map[string]string{"REDIS_URL": "redis://h:6379/x"},
			errs: []string{"REDIS_URL", "database"}},
		{name: "password beside a url", env: map[string]string{"REDIS_URL": "redis://h:6379", "HOOKLANE_REDIS_PASSWORD": secret},
			errs: []string{"HOOKLANE_REDIS_PASSWORD", "in the URL"}},
		{name: "password with no mode", env: map[string]string{"HOOKLANE_REDIS_PASSWORD": secret},
			errs: []string{"HOOKLANE_REDIS_PASSWORD", "in the URL"}},
		{name: "user without password", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000", "HOOKLANE_REDIS_USERNAME": "app"},
			errs: []string{"HOOKLANE_REDIS_USERNAME", "needs its password", "HOOKLANE_REDIS_PASSWORD"}},
		{name: "sentinel password without sentinel", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000", "HOOKLANE_REDIS_SENTINEL_PASSWORD": secret},
			errs: []string{"HOOKLANE_REDIS_SENTINEL_PASSWORD", "HOOKLANE_REDIS_SENTINEL_ADDRS"}},
		{name: "sentinel user without its password", env: map[string]string{"HOOKLANE_REDIS_SENTINEL_ADDRS": "h:26379", "HOOKLANE_REDIS_SENTINEL_MASTER": "m", "HOOKLANE_REDIS_SENTINEL_USERNAME": "w"},
			errs: []string{"HOOKLANE_REDIS_SENTINEL_USERNAME", "HOOKLANE_REDIS_SENTINEL_PASSWORD"}},
		{name: "tls with a redis:// url", env: map[string]string{"REDIS_URL": "redis://h:6379", "HOOKLANE_REDIS_TLS": "true"},
			errs: []string{"HOOKLANE_REDIS_TLS", "rediss://"}},
		{name: "tls with no mode", env: map[string]string{"HOOKLANE_REDIS_TLS": "true"},
			errs: []string{"HOOKLANE_REDIS_TLS", "rediss://", "REDIS_URL"}},
		{name: "tls not a boolean", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000", "HOOKLANE_REDIS_TLS": "yes"},
			errs: []string{"HOOKLANE_REDIS_TLS", `"yes"`, "true or false"}},
		{name: "skip verify not a boolean", env: map[string]string{"HOOKLANE_REDIS_TLS_SKIP_VERIFY": "on"},
			errs: []string{"HOOKLANE_REDIS_TLS_SKIP_VERIFY", `"on"`}},
		{name: "skip verify without tls", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000", "HOOKLANE_REDIS_TLS_SKIP_VERIFY": "true"},
			errs: []string{"HOOKLANE_REDIS_TLS_SKIP_VERIFY", "no TLS"}},
		{name: "skip verify with a redis:// url", env: map[string]string{"REDIS_URL": "redis://h:6379", "HOOKLANE_REDIS_TLS_SKIP_VERIFY": "true"},
			errs: []string{"HOOKLANE_REDIS_TLS_SKIP_VERIFY", "no TLS"}},
		{name: "ca without tls", env: map[string]string{"HOOKLANE_REDIS_SENTINEL_ADDRS": "h:26379", "HOOKLANE_REDIS_SENTINEL_MASTER": "m", "HOOKLANE_REDIS_TLS_CA": ca},
			errs: []string{"HOOKLANE_REDIS_TLS_CA", "TLS, which is off"}},
		{name: "ca file missing", env: map[string]string{"HOOKLANE_REDIS_CLUSTER_ADDRS": "h:7000", "HOOKLANE_REDIS_TLS": "true", "HOOKLANE_REDIS_TLS_CA": "/nonexistent/ca.pem"},
			errs: []string{"HOOKLANE_REDIS_TLS_CA", "/nonexistent/ca.pem", "no such file"}},
		{name: "ca file not PEM", env: map[string]string{"REDIS_URL": "rediss://h:6379", "HOOKLANE_REDIS_TLS_CA": notPEM},
			errs: []string{"HOOKLANE_REDIS_TLS_CA", "no PEM certificate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := deploy.RedisFromEnv(env(tt.env))
			if tt.errs == nil {
				if err != nil {
					t.Fatalf("RedisFromEnv: %v", err)
				}
				if !reflect.DeepEqual(tt.want, got) {
					t.Fatalf("RedisFromEnv:\nwant %#v\ngot  %#v", fields(tt.want), fields(got))
				}
				return
			}
			if err == nil {
				t.Fatalf("RedisFromEnv accepted %v", tt.env)
			}
			for _, s := range tt.errs {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q shows the password", err)
			}
			// Validate says the same of the config built in Go.
			if got.Validate() == nil && !strings.Contains(err.Error(), "true or false") {
				t.Errorf("Validate accepts what RedisFromEnv refused: %v", err)
			}
		})
	}
}

// fields prints a config's fields, which %#v would hide behind GoString.
func fields(c deploy.RedisConfig) string {
	type plain deploy.RedisConfig
	return fmt.Sprintf("%+v", plain(c))
}

func TestRedisConfigModesAndDefaults(t *testing.T) {
	var zero deploy.RedisConfig
	if zero.IsSet() || zero.Mode() != deploy.ModeSingle || zero.IsCluster() {
		t.Errorf("zero config: IsSet %v, Mode %q, IsCluster %v; want false, single, false", zero.IsSet(), zero.Mode(), zero.IsCluster())
	}
	if got := zero.WithDefaults().URL; got != "redis://127.0.0.1:6379/0" {
		t.Errorf("default URL %q", got)
	}
	cl := deploy.RedisConfig{ClusterAddrs: []string{"h:7000"}}
	if !cl.IsSet() || cl.Mode() != deploy.ModeCluster || !cl.IsCluster() || cl.WithDefaults().URL != "" {
		t.Errorf("cluster config: IsSet %v, Mode %q, IsCluster %v, default URL %q", cl.IsSet(), cl.Mode(), cl.IsCluster(), cl.WithDefaults().URL)
	}
	se := deploy.RedisConfig{SentinelAddrs: []string{"h:26379"}, SentinelMaster: "m"}
	if !se.IsSet() || se.Mode() != deploy.ModeSentinel || se.IsCluster() || se.WithDefaults().URL != "" {
		t.Errorf("sentinel config: IsSet %v, Mode %q, IsCluster %v", se.IsSet(), se.Mode(), se.IsCluster())
	}
	if err := (deploy.RedisConfig{ClusterAddrs: []string{"h:7000"}, URL: "redis://h:6379"}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "REDIS_URL and HOOKLANE_REDIS_CLUSTER_ADDRS") {
		t.Errorf("Validate of two modes: %v", err)
	}
	if _, err := (deploy.RedisConfig{SentinelMaster: "m"}).NewClient(deploy.ClientTuning{}); err == nil {
		t.Error("NewClient built a client from an invalid config")
	}
}

// Env renders what RedisFromEnv reads back, so a child process gets the
// parent's whole configuration.
func TestRedisConfigEnvRoundTrip(t *testing.T) {
	ca := writeCA(t)
	for _, c := range []deploy.RedisConfig{
		{},
		{URL: "rediss://u:p@h:6380/3?skip_verify=true", TLSCAFile: ca},
		{ClusterAddrs: []string{"a:1", "b:2"}, Username: "u", Password: "p", TLS: true, TLSSkipVerify: true},
		{SentinelAddrs: []string{"a:1", "b:2", "c:3"}, SentinelMaster: "m", Password: "p", SentinelUsername: "su", SentinelPassword: "sp", TLS: true, TLSCAFile: ca},
	} {
		e := map[string]string{}
		for _, kv := range c.Env() {
			k, v, _ := strings.Cut(kv, "=")
			if !contains(deploy.RedisEnvVars, k) {
				t.Errorf("Env writes %s, which RedisEnvVars does not list", k)
			}
			e[k] = v
		}
		got, err := deploy.RedisFromEnv(env(e))
		if err != nil {
			t.Fatalf("RedisFromEnv(%v): %v", e, err)
		}
		if !reflect.DeepEqual(c, got) {
			t.Errorf("round trip through %v:\nwant %s\ngot  %s", c.Env(), fields(c), fields(got))
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// No way of printing a config shows a password: String, every fmt verb,
// slog's text and JSON handlers.
func TestRedisConfigNeverShowsSecrets(t *testing.T) {
	for _, c := range []deploy.RedisConfig{
		{URL: "redis://app:url-secret-1@h:6379/0"},
		{URL: "rediss://:url-secret-2@h:6379/0"},
		{ClusterAddrs: []string{"h:7000"}, Username: "app", Password: "data-secret-3", TLS: true},
		{SentinelAddrs: []string{"h:26379"}, SentinelMaster: "m", Password: "data-secret-4", SentinelPassword: "sentinel-secret-5"},
	} {
		var text, js bytes.Buffer
		slog.New(slog.NewTextHandler(&text, nil)).Info("start", "redis", c)
		slog.New(slog.NewJSONHandler(&js, nil)).Info("start", "redis", c)
		shown := map[string]string{
			"String": c.String(), "%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", c), "%#v": fmt.Sprintf("%#v", c),
			"%s of a pointer": fmt.Sprintf("%s", &c), "slog text": text.String(), "slog json": js.String(),
		}
		for how, s := range shown {
			if strings.Contains(s, "secret") {
				t.Errorf("%s shows a password: %s", how, s)
			}
			if !strings.Contains(s, c.Mode()) {
				t.Errorf("%s does not say the mode %s: %s", how, c.Mode(), s)
			}
		}
		if (c.Password != "" || strings.Contains(c.URL, "secret")) && !strings.Contains(c.String(), "[redacted]") {
			t.Errorf("String %q does not say a password is set", c.String())
		}
	}
	if got := (deploy.RedisConfig{URL: "redis://u:secret@h:port"}).String(); strings.Contains(got, "secret") {
		t.Errorf("String of a malformed URL shows its password: %s", got)
	}
}

// For one server NewClient builds a plain client with the process' tuning,
// leaving the URL's own settings where the tuning says nothing.
func TestNewClientSingleServer(t *testing.T) {
	ctx := context.Background()
	c := deploy.RedisConfig{URL: redisSrv.URL + "?dial_timeout=3s&max_retries=2"}
	rdb, err := c.NewClient(deploy.ClientTuning{MinRetryBackoff: 250 * time.Millisecond, MaxRetryBackoff: time.Second, DialerRetries: 1, PoolSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	cl, ok := rdb.(*redis.Client)
	if !ok {
		t.Fatalf("NewClient built a %T, want *redis.Client", rdb)
	}
	o := cl.Options()
	if o.Addr != redisSrv.Addr || o.MaxRetries != 2 || o.DialTimeout != 3*time.Second || o.MinRetryBackoff != 250*time.Millisecond ||
		o.MaxRetryBackoff != time.Second || o.DialerRetries != 1 || o.PoolSize != 7 {
		t.Errorf("options: addr %s, max retries %d, dial timeout %v, backoff %v-%v, dialer retries %d, pool %d",
			o.Addr, o.MaxRetries, o.DialTimeout, o.MinRetryBackoff, o.MaxRetryBackoff, o.DialerRetries, o.PoolSize)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	rdb2, err := c.NewClient(deploy.ClientTuning{MaxRetries: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb2.Close()
	if got := rdb2.(*redis.Client).Options().MaxRetries; got != 10 {
		t.Errorf("tuning's MaxRetries 10 gave %d", got)
	}

	opt, ok := c.AsynqConnOpt().MakeRedisClient().(*redis.Client)
	if !ok {
		t.Fatalf("AsynqConnOpt makes a %T", c.AsynqConnOpt().MakeRedisClient())
	}
	defer opt.Close()
	if err := opt.Ping(ctx).Err(); err != nil || opt.Options().DialTimeout != 3*time.Second {
		t.Errorf("AsynqConnOpt's client: PING %v, dial timeout %v", err, opt.Options().DialTimeout)
	}
}

// A rediss:// URL verifies the server's certificate: against the system's
// roots it fails, with HOOKLANE_REDIS_TLS_CA or skip-verify it connects.
func TestNewClientTLSWithPrivateCA(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeServerCert(t, dir)
	tlsPort, err := deploy.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r, err := deploy.StartRedis(ctx, deploy.RedisOpts{Args: []string{"--tls-port", fmt.Sprint(tlsPort),
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	url := fmt.Sprintf("rediss://127.0.0.1:%d/0", tlsPort)
	ping := func(c deploy.RedisConfig) error {
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		rdb, err := c.NewClient(deploy.ClientTuning{MaxRetries: -1, DialerRetries: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		err = rdb.Ping(ctx).Err()
		insp := c.AsynqConnOpt().MakeRedisClient().(redis.UniversalClient)
		defer insp.Close()
		if aerr := insp.Ping(ctx).Err(); (aerr == nil) != (err == nil) {
			t.Errorf("%s: NewClient's PING %v, AsynqConnOpt's %v", c, err, aerr)
		}
		return err
	}
	if err := ping(deploy.RedisConfig{URL: url}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a private CA's certificate was accepted without HOOKLANE_REDIS_TLS_CA: %v", err)
	}
	if err := ping(deploy.RedisConfig{URL: url, TLSCAFile: caFile}); err != nil {
		t.Errorf("with the CA: %v", err)
	}
	if err := ping(deploy.RedisConfig{URL: url + "?skip_verify=true"}); err != nil {
		t.Errorf("with ?skip_verify=true: %v", err)
	}
	if err := ping(deploy.RedisConfig{URL: url, TLSSkipVerify: true}); err != nil {
		t.Errorf("with TLSSkipVerify: %v", err)
	}
	// The certificate names 127.0.0.1, so verification is of the host too.
	if err := ping(deploy.RedisConfig{URL: fmt.Sprintf("rediss://localhost:%d/0", tlsPort), TLSCAFile: caFile}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a certificate for 127.0.0.1 was accepted for localhost: %v", err)
	}
}

// writeCA writes a self-signed CA certificate and returns its path.
func writeCA(t *testing.T) string {
	caFile, _, _ := writeServerCert(t, t.TempDir())
	return caFile
}

// writeServerCert writes a CA and a server certificate for 127.0.0.1 it
// signed, with the server's key, into dir.
func writeServerCert(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hooklane test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", der), write("server.key", "EC PRIVATE KEY", keyDER)
}
