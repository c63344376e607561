package deploy

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// RedisConfig says which Redis every hooklane process uses: one server
// (URL), a Redis Cluster (ClusterAddrs) or a Sentinel-managed master
// (SentinelAddrs and SentinelMaster). At most one mode may be set; none
// means the default URL. RedisFromEnv reads each field from the variable
// named beside it; the worker, the web process, `hooklane dev` and the
// producer all take this one type.
type RedisConfig struct {
	// URL (REDIS_URL) is one server: redis://[user:password@]host:port/db,
	// or rediss://… for TLS (certificate verified; ?skip_verify=true skips
	// that). Its own userinfo is its auth. Default, when no mode is set,
	// redis://127.0.0.1:6379/0.
	URL string
	// ClusterAddrs (HOOKLANE_REDIS_CLUSTER_ADDRS, comma-separated host:port)
	// are seed nodes of a Redis Cluster; one is enough, the client learns
	// the rest. Default none.
	ClusterAddrs []string
	// SentinelAddrs (HOOKLANE_REDIS_SENTINEL_ADDRS, comma-separated
	// host:port) are the sentinels that name the current master of
	// SentinelMaster (HOOKLANE_REDIS_SENTINEL_MASTER). Both or neither.
	// Default none.
	SentinelAddrs  []string
	SentinelMaster string
	// Username and Password (HOOKLANE_REDIS_USERNAME,
	// HOOKLANE_REDIS_PASSWORD) authenticate to the data nodes of a Cluster
	// or of Sentinel's master. Not with URL, whose userinfo says it: two
	// places for one password would leave a reader guessing which wins.
	// Default none.
	Username, Password string
	// SentinelUsername and SentinelPassword
	// (HOOKLANE_REDIS_SENTINEL_USERNAME, HOOKLANE_REDIS_SENTINEL_PASSWORD)
	// authenticate to the sentinels themselves. Default none.
	SentinelUsername, SentinelPassword string
	// TLS (HOOKLANE_REDIS_TLS=true) connects to Cluster nodes, or to the
	// sentinels and their master, over TLS, verifying each node's
	// certificate for the host it is dialed by. With URL use rediss://
	// instead. Default false.
	TLS bool
	// TLSSkipVerify (HOOKLANE_REDIS_TLS_SKIP_VERIFY=true) accepts any
	// certificate, for providers whose certificates are self-signed (with
	// URL, ?skip_verify=true says the same). Needs TLS. Default false.
	TLSSkipVerify bool
	// TLSCAFile (HOOKLANE_REDIS_TLS_CA) is a PEM file of the CA
	// certificates to trust instead of the system's, for a private CA.
	// Needs TLS (or rediss://). Default none: the system's roots.
	TLSCAFile string
}

// The environment variables RedisFromEnv reads, in the order Env writes them.
const (
	EnvRedisURL              = "REDIS_URL"
	EnvRedisClusterAddrs     = "HOOKLANE_REDIS_CLUSTER_ADDRS"
	EnvRedisSentinelAddrs    = "HOOKLANE_REDIS_SENTINEL_ADDRS"
	EnvRedisSentinelMaster   = "HOOKLANE_REDIS_SENTINEL_MASTER"
	EnvRedisUsername         = "HOOKLANE_REDIS_USERNAME"
	EnvRedisPassword         = "HOOKLANE_REDIS_PASSWORD"
	EnvRedisSentinelUsername = "HOOKLANE_REDIS_SENTINEL_USERNAME"
	EnvRedisSentinelPassword = "HOOKLANE_REDIS_SENTINEL_PASSWORD"
	EnvRedisTLS              = "HOOKLANE_REDIS_TLS"
	EnvRedisTLSSkipVerify    = "HOOKLANE_REDIS_TLS_SKIP_VERIFY"
	EnvRedisTLSCA            = "HOOKLANE_REDIS_TLS_CA"
)

// RedisEnvVars lists every variable RedisFromEnv reads, so that a parent
// process can drop its own before handing a child RedisConfig.Env: a
// child seeing two modes refuses to start.
var RedisEnvVars = []string{
	EnvRedisURL, EnvRedisClusterAddrs, EnvRedisSentinelAddrs, EnvRedisSentinelMaster,
	EnvRedisUsername, EnvRedisPassword, EnvRedisSentinelUsername, EnvRedisSentinelPassword,
	EnvRedisTLS, EnvRedisTLSSkipVerify, EnvRedisTLSCA,
}

// DefaultRedisURL is the Redis used when no mode is set.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// Modes, as Mode returns them.
const (
	ModeSingle   = "single"
	ModeCluster  = "cluster"
	ModeSentinel = "sentinel"
)

// RedisFromEnv reads a RedisConfig from the variables named on its fields
// and validates it. Unset variables stay zero; errors name the variable.
func RedisFromEnv(getenv func(string) string) (RedisConfig, error) {
	c := RedisConfig{
		URL:              getenv(EnvRedisURL),
		SentinelMaster:   getenv(EnvRedisSentinelMaster),
		Username:         getenv(EnvRedisUsername),
		Password:         getenv(EnvRedisPassword),
		SentinelUsername: getenv(EnvRedisSentinelUsername),
		SentinelPassword: getenv(EnvRedisSentinelPassword),
		TLSCAFile:        getenv(EnvRedisTLSCA),
	}
	var errs []error
	list := func(name string) []string {
		v := getenv(name)
		if v == "" {
			return nil
		}
		var out []string
		for a := range strings.SplitSeq(v, ",") {
			out = append(out, strings.TrimSpace(a))
		}
		return out // empty entries are left for Validate to name
	}
	flag := func(name string, dst *bool) {
		if v := getenv(name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not true or false", name, v))
			}
			*dst = b
		}
	}
	c.ClusterAddrs = list(EnvRedisClusterAddrs)
	c.SentinelAddrs = list(EnvRedisSentinelAddrs)
	flag(EnvRedisTLS, &c.TLS)
	flag(EnvRedisTLSSkipVerify, &c.TLSSkipVerify)
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.Validate()
}

// redisField names a field in errors: its Go name and its variable.
func redisField(goName, env string) string { return "deploy: RedisConfig." + goName + " (" + env + ")" }

// Validate checks what RedisFromEnv checks, for a RedisConfig built in Go.
// Its errors name the field and its variable and never hold a password.
func (c RedisConfig) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	var set []string
	if c.URL != "" {
		set = append(set, EnvRedisURL)
	}
	if len(c.ClusterAddrs) > 0 {
		set = append(set, EnvRedisClusterAddrs)
	}
	if len(c.SentinelAddrs) > 0 || c.SentinelMaster != "" {
		set = append(set, EnvRedisSentinelAddrs+"/"+EnvRedisSentinelMaster)
	}
	if len(set) > 1 {
		// Nothing else is worth saying until the mode is clear.
		both := "both"
		if len(set) > 2 {
			both = "all"
		}
		return fmt.Errorf("deploy: Redis: %s are %s set: choose one Redis mode (one server, Cluster or Sentinel)", strings.Join(set, " and "), both)
	}

	addrs := func(goName, env string, list []string) {
		for _, a := range list {
			if err := checkAddr(a); err != nil {
				add("%s: %q: %v", redisField(goName, env), a, err)
			}
		}
	}
	addrs("ClusterAddrs", EnvRedisClusterAddrs, c.ClusterAddrs)
	addrs("SentinelAddrs", EnvRedisSentinelAddrs, c.SentinelAddrs)
	switch {
	case len(c.SentinelAddrs) > 0 && c.SentinelMaster == "":
		add("%s: Sentinel needs the master's name too (%s)", redisField("SentinelAddrs", EnvRedisSentinelAddrs), EnvRedisSentinelMaster)
	case len(c.SentinelAddrs) == 0 && c.SentinelMaster != "":
		add("%s: Sentinel needs the sentinels' addresses too (%s)", redisField("SentinelMaster", EnvRedisSentinelMaster), EnvRedisSentinelAddrs)
	}

	mode := c.Mode()
	tlsOn := c.TLS
	if mode == ModeSingle {
		u := cmp.Or(c.URL, DefaultRedisURL)
		scheme, err := checkURL(u)
		if err != nil {
			add("%s: %v", redisField("URL", EnvRedisURL), err)
		}
		for _, f := range []struct{ goName, env, v string }{{"Username", EnvRedisUsername, c.Username}, {"Password", EnvRedisPassword, c.Password}} {
			if f.v != "" {
				add("%s: for Cluster and Sentinel only; a single server's user and password go in the URL (%s=redis://user:password@host:6379/0)",
					redisField(f.goName, f.env), EnvRedisURL)
			}
		}
		switch {
		case c.TLS && c.URL == "":
			add("%s: TLS to a single server is a rediss:// URL in %s, which is not set", redisField("TLS", EnvRedisTLS), EnvRedisURL)
		case c.TLS && scheme != "rediss" && err == nil:
			add("%s: with a %s:// URL: use rediss:// for TLS instead", redisField("TLS", EnvRedisTLS), scheme)
		}
		tlsOn = scheme == "rediss"
	}
	if mode != ModeSingle && c.Username != "" && c.Password == "" {
		add("%s: a user name needs its password (%s)", redisField("Username", EnvRedisUsername), EnvRedisPassword)
	}
	for _, f := range []struct{ goName, env, v string }{
		{"SentinelUsername", EnvRedisSentinelUsername, c.SentinelUsername}, {"SentinelPassword", EnvRedisSentinelPassword, c.SentinelPassword},
	} {
		if f.v != "" && mode != ModeSentinel {
			add("%s: authenticates to sentinels, and no %s is set", redisField(f.goName, f.env), EnvRedisSentinelAddrs)
		}
	}
	if c.SentinelUsername != "" && c.SentinelPassword == "" {
		add("%s: a user name needs its password (%s)", redisField("SentinelUsername", EnvRedisSentinelUsername), EnvRedisSentinelPassword)
	}
	if !tlsOn && c.TLSSkipVerify {
		add("%s: there is no TLS to skip the verification of (set %s=true, or use rediss://)", redisField("TLSSkipVerify", EnvRedisTLSSkipVerify), EnvRedisTLS)
	}
	if c.TLSCAFile != "" {
		if !tlsOn {
			add("%s: a CA is for TLS, which is off (set %s=true, or use rediss://)", redisField("TLSCAFile", EnvRedisTLSCA), EnvRedisTLS)
		} else if _, err := loadCA(c.TLSCAFile); err != nil {
			add("%s: %v", redisField("TLSCAFile", EnvRedisTLSCA), err)
		}
	}
	return errors.Join(errs...)
}

// checkAddr accepts host:port with a host and a port in 1-65535.
func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" {
		return errors.New("want host:port")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return errors.New("want host:port with a port from 1 to 65535")
	}
	return nil
}

// checkURL parses u as go-redis does and returns its scheme. The error
// leaves the URL out: url.Parse's own would repeat it, password included.
func checkURL(u string) (string, error) {
	_, err := redis.ParseURL(u)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("not a redis:// or rediss:// URL: %v", err)
	}
	scheme, _, _ := strings.Cut(u, "://")
	return scheme, nil
}

// WithDefaults returns c with the default URL when no mode is set.
func (c RedisConfig) WithDefaults() RedisConfig {
	if !c.IsSet() {
		c.URL = DefaultRedisURL
	}
	return c
}

// IsSet reports whether a mode is set; if not, WithDefaults picks the
// local default (and `hooklane dev` starts a redis-server there).
func (c RedisConfig) IsSet() bool {
	return c.URL != "" || len(c.ClusterAddrs) > 0 || len(c.SentinelAddrs) > 0 || c.SentinelMaster != ""
}

// Mode is "cluster", "sentinel" or "single" (also when no mode is set: the
// default is one server).
func (c RedisConfig) Mode() string {
	switch {
	case len(c.ClusterAddrs) > 0:
		return ModeCluster
	case len(c.SentinelAddrs) > 0 || c.SentinelMaster != "":
		return ModeSentinel
	}
	return ModeSingle
}

// IsCluster reports whether c is a Redis Cluster, where a script or a
// transaction may touch one hash slot only.
func (c RedisConfig) IsCluster() bool { return c.Mode() == ModeCluster }

// ClientTuning is how a process wants its client to behave while Redis is
// slow or away. Zero fields keep go-redis' defaults; a URL's query
// parameters (?max_retries=…) give way to non-zero fields.
type ClientTuning struct {
	// MaxRetries of a failed command (go-redis: 3; -1: none).
	MaxRetries int
	// MinRetryBackoff and MaxRetryBackoff bound the wait between retries
	// (go-redis: 8ms and 512ms).
	MinRetryBackoff, MaxRetryBackoff time.Duration
	// DialerRetries of a failed dial (go-redis: 5).
	DialerRetries int
	// PoolSize is the connections per node (go-redis: 10 per CPU).
	PoolSize int
}

// NewClient builds the client for c's mode: a *redis.Client for one
// server, a *redis.ClusterClient for a Cluster (even from one seed
// address, which redis.NewUniversalClient would take for one server), and
// a Sentinel-backed failover *redis.Client that follows the master
// through a failover. It does not contact Redis.
func (c RedisConfig) NewClient(t ClientTuning) (redis.UniversalClient, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tlsConf, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	switch c.Mode() {
	case ModeCluster:
		o := &redis.ClusterOptions{Addrs: c.ClusterAddrs, Username: c.Username, Password: c.Password, TLSConfig: tlsConf}
		tune(&o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff, &o.DialerRetries, &o.PoolSize, t)
		return redis.NewClusterClient(o), nil
	case ModeSentinel:
		o := &redis.FailoverOptions{
			MasterName: c.SentinelMaster, SentinelAddrs: c.SentinelAddrs,
			SentinelUsername: c.SentinelUsername, SentinelPassword: c.SentinelPassword,
			Username: c.Username, Password: c.Password, TLSConfig: tlsConf,
		}
		tune(&o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff, &o.DialerRetries, &o.PoolSize, t)
		return redis.NewFailoverClient(o), nil
	}
	o, err := c.urlOptions(tlsConf)
	if err != nil {
		return nil, err
	}
	tune(&o.MaxRetries, &o.MinRetryBackoff, &o.MaxRetryBackoff, &o.DialerRetries, &o.PoolSize, t)
	return redis.NewClient(o), nil
}

func tune(retries *int, minB, maxB *time.Duration, dials, pool *int, t ClientTuning) {
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	setD := func(dst *time.Duration, v time.Duration) {
		if v != 0 {
			*dst = v
		}
	}
	set(retries, t.MaxRetries)
	setD(minB, t.MinRetryBackoff)
	setD(maxB, t.MaxRetryBackoff)
	set(dials, t.DialerRetries)
	set(pool, t.PoolSize)
}

// urlOptions parses URL (already validated) and lays the CA over its TLS
// settings; rediss:// already verifies the host name.
func (c RedisConfig) urlOptions(tlsConf *tls.Config) (*redis.Options, error) {
	o, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("%s: not a redis:// or rediss:// URL", redisField("URL", EnvRedisURL))
	}
	if o.TLSConfig != nil && tlsConf != nil {
		o.TLSConfig.RootCAs = tlsConf.RootCAs
		o.TLSConfig.InsecureSkipVerify = o.TLSConfig.InsecureSkipVerify || tlsConf.InsecureSkipVerify
	}
	return o, nil
}

// tlsConfig is the TLS configuration for Cluster and Sentinel (nil: no
// TLS), and what a rediss:// URL adds to its own. ServerName stays empty:
// crypto/tls then checks each node's certificate against the host it was
// dialed by, which differs from node to node.
func (c RedisConfig) tlsConfig() (*tls.Config, error) {
	if !c.TLS && c.TLSCAFile == "" && !c.TLSSkipVerify {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.TLSSkipVerify} // the operator's choice, off by default
	if c.TLSCAFile != "" {
		pool, err := loadCA(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", redisField("TLSCAFile", EnvRedisTLSCA), err)
		}
		conf.RootCAs = pool
	}
	return conf, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// AsynqConnOpt is the same connection as asynq wants it, for asynqmon,
// which builds its own client. c should be valid (Validate): an invalid
// URL gives an option that cannot dial, and an unreadable CA file one that
// trusts no certificate, so a mistake fails closed.
func (c RedisConfig) AsynqConnOpt() asynq.RedisConnOpt {
	c = c.WithDefaults()
	tlsConf, err := c.tlsConfig()
	if err != nil {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool()}
	}
	switch c.Mode() {
	case ModeCluster:
		return asynq.RedisClusterClientOpt{Addrs: c.ClusterAddrs, Username: c.Username, Password: c.Password, TLSConfig: tlsConf}
	case ModeSentinel:
		return asynq.RedisFailoverClientOpt{
			MasterName: c.SentinelMaster, SentinelAddrs: c.SentinelAddrs,
			SentinelUsername: c.SentinelUsername, SentinelPassword: c.SentinelPassword,
			Username: c.Username, Password: c.Password, TLSConfig: tlsConf,
		}
	}
	o, err := c.urlOptions(tlsConf)
	if err != nil {
		return asynq.RedisClientOpt{Network: "invalid REDIS_URL"} // net.Dial refuses it without I/O
	}
	return asynq.RedisClientOpt{
		Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		PoolSize: o.PoolSize, TLSConfig: o.TLSConfig,
	}
}

// String describes c for logs, passwords redacted.
func (c RedisConfig) String() string {
	var b strings.Builder
	switch c.Mode() {
	case ModeCluster:
		b.WriteString("cluster " + strings.Join(c.ClusterAddrs, ","))
	case ModeSentinel:
		fmt.Fprintf(&b, "sentinel master=%s sentinels=%s", c.SentinelMaster, strings.Join(c.SentinelAddrs, ","))
	default:
		b.WriteString("single " + redactURL(cmp.Or(c.URL, DefaultRedisURL)))
	}
	auth := func(label, user, pass string) {
		if user != "" {
			fmt.Fprintf(&b, " %suser=%s", label, user)
		}
		if pass != "" {
			fmt.Fprintf(&b, " %spassword=[redacted]", label)
		}
	}
	auth("", c.Username, c.Password)
	auth("sentinel_", c.SentinelUsername, c.SentinelPassword)
	if c.TLS {
		b.WriteString(" tls")
	}
	if c.TLSSkipVerify {
		b.WriteString(" tls_skip_verify")
	}
	if c.TLSCAFile != "" {
		b.WriteString(" tls_ca=" + c.TLSCAFile)
	}
	return b.String()
}

// GoString keeps %#v from printing the fields, passwords among them.
func (c RedisConfig) GoString() string { return "deploy.RedisConfig{" + c.String() + "}" }

// LogValue keeps slog's JSON handler from printing the fields.
func (c RedisConfig) LogValue() slog.Value { return slog.StringValue(c.String()) }

// redactURL hides a URL's password; a URL that does not parse is not
// shown at all, since where its password is cannot be told.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparseable URL)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "REDACTED")
		return strings.Replace(u.String(), ":REDACTED@", ":[redacted]@", 1)
	}
	return u.String()
}

// Env renders c as the environment variables RedisFromEnv reads, for a
// child process. It holds the passwords: hand it to exec.Cmd.Env only,
// never to a log.
func (c RedisConfig) Env() []string {
	var env []string
	add := func(name, v string) {
		if v != "" {
			env = append(env, name+"="+v)
		}
	}
	flag := func(name string, v bool) {
		if v {
			env = append(env, name+"=true")
		}
	}
	add(EnvRedisURL, c.URL)
	add(EnvRedisClusterAddrs, strings.Join(c.ClusterAddrs, ","))
	add(EnvRedisSentinelAddrs, strings.Join(c.SentinelAddrs, ","))
	add(EnvRedisSentinelMaster, c.SentinelMaster)
	add(EnvRedisUsername, c.Username)
	add(EnvRedisPassword, c.Password)
	add(EnvRedisSentinelUsername, c.SentinelUsername)
	add(EnvRedisSentinelPassword, c.SentinelPassword)
	flag(EnvRedisTLS, c.TLS)
	flag(EnvRedisTLSSkipVerify, c.TLSSkipVerify)
	add(EnvRedisTLSCA, c.TLSCAFile)
	return env
}
