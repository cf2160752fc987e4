package redis

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/limiterd/limiterd/internal/confval"
	"github.com/limiterd/limiterd/ratelimit"
)

// DefaultKeyPrefix starts every Redis key unless Config.KeyPrefix says
// otherwise.
const DefaultKeyPrefix = "limiterd"

// Config is a Redis store's configuration, as written under a store of
// type redis in limiterd's YAML config. Start from DefaultConfig.
type Config struct {
	// Addrs are host:port addresses. One address is a standalone server
	// (or, with Cluster, a cluster's configuration endpoint); several are
	// seed nodes of a Redis Cluster; with MasterName they are Sentinels.
	Addrs []string `yaml:"addrs"`
	// Cluster forces cluster mode with a single address, for managed
	// clusters reached through one configuration endpoint.
	Cluster bool `yaml:"cluster"`
	// MasterName is the Sentinel master name; set it to use Sentinel.
	MasterName string `yaml:"master_name"`
	// Username is the ACL user (Redis 6+); empty means "default".
	Username string `yaml:"username"`
	// Password authenticates Username (or the legacy requirepass).
	Password string `yaml:"password"`
	// DB is the database number of a standalone or Sentinel server. It must
	// be 0 on a cluster.
	DB int `yaml:"db"`
	// TLS configures encrypted connections.
	TLS TLSConfig `yaml:"tls"`
	// PoolSize is the most connections per server; 0 means go-redis's
	// default, 10 per GOMAXPROCS.
	PoolSize int `yaml:"pool_size"`
	// DialTimeout bounds establishing a connection. Default 5s.
	DialTimeout Duration `yaml:"dial_timeout"`
	// ReadTimeout bounds reading a reply when the caller's context has no
	// deadline. Default 3s.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a command when the caller's context has
	// no deadline. Default 3s.
	WriteTimeout Duration `yaml:"write_timeout"`
	// KeyPrefix starts every Redis key this store writes, so several
	// clusters (or other applications) can share one Redis. It must not
	// contain '{' or '}'. Default "limiterd".
	KeyPrefix string `yaml:"key_prefix"`
}

// TLSConfig configures TLS towards Redis.
type TLSConfig = confval.TLS

// DefaultConfig returns a configuration for a standalone server on
// 127.0.0.1:6379.
func DefaultConfig() Config {
	return Config{
		Addrs:        []string{"127.0.0.1:6379"},
		DialTimeout:  Duration(5 * time.Second),
		ReadTimeout:  Duration(3 * time.Second),
		WriteTimeout: Duration(3 * time.Second),
		KeyPrefix:    DefaultKeyPrefix,
	}
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("redis: invalid config")

// Validate reports the first invalid field: its error wraps a
// *ratelimit.FieldError naming the field (as written in YAML) and the reason,
// which wraps ErrInvalidConfig.
func (c Config) Validate() error {
	if len(c.Addrs) == 0 {
		return configErr("addrs", "at least one address is required")
	}
	for i, a := range c.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return configErr(fmt.Sprintf("addrs[%d]", i), "%q is not host:port", a)
		}
	}
	cluster := c.MasterName == "" && (len(c.Addrs) > 1 || c.Cluster)
	switch {
	case c.DB < 0:
		return configErr("db", "must not be negative, got %d", c.DB)
	case c.DB != 0 && cluster:
		return configErr("db", "a cluster has only db 0, got %d", c.DB)
	case c.PoolSize < 0:
		return configErr("pool_size", "must not be negative, got %d", c.PoolSize)
	case c.DialTimeout < 0:
		return configErr("dial_timeout", "must not be negative, got %s", c.DialTimeout)
	case c.ReadTimeout < 0:
		return configErr("read_timeout", "must not be negative, got %s", c.ReadTimeout)
	case c.WriteTimeout < 0:
		return configErr("write_timeout", "must not be negative, got %s", c.WriteTimeout)
	case c.KeyPrefix == "":
		return configErr("key_prefix", "must not be empty")
	case strings.ContainsAny(c.KeyPrefix, "{}"):
		return configErr("key_prefix", "must not contain '{' or '}' (they would break the hash tag), got %q", c.KeyPrefix)
	case !c.TLS.Enabled && (c.TLS.CAFile != "" || c.TLS.ServerName != "" || c.TLS.InsecureSkipVerify):
		return configErr("tls.enabled", "must be true when other tls fields are set")
	}
	return nil
}

// configErr is an error of Validate: the package prefix, then a
// *ratelimit.FieldError, so a caller can name the field without parsing text.
func configErr(field, format string, args ...any) error {
	return fmt.Errorf("redis: %w", &ratelimit.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidConfig})
}

// Open validates cfg and returns a Store on a new client. It does not
// contact the server: a node must start while its store is down, so
// connection errors surface on the Store's calls (wrapping
// clustersync.ErrUnavailable). Close closes the client.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := &redis.UniversalOptions{
		Addrs:                 cfg.Addrs,
		IsClusterMode:         cfg.Cluster,
		MasterName:            cfg.MasterName,
		Username:              cfg.Username,
		Password:              cfg.Password,
		DB:                    cfg.DB,
		PoolSize:              cfg.PoolSize,
		DialTimeout:           time.Duration(cfg.DialTimeout),
		ReadTimeout:           time.Duration(cfg.ReadTimeout),
		WriteTimeout:          time.Duration(cfg.WriteTimeout),
		ContextTimeoutEnabled: true,
		// RESP2: the store needs no push notifications, and with RESP3
		// go-redis looks for pending ones on the socket around every round
		// trip; nor the CLIENT MAINT_NOTIFICATIONS handshake.
		Protocol:                 2,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	tc, err := cfg.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	opts.TLSConfig = tc
	c := redis.NewUniversalClient(opts)
	s := New(c, cfg.KeyPrefix)
	s.closer = c
	return s, nil
}

// Duration is a time.Duration written in config as a Go duration string
// ("250ms", "1s") or a bare number of seconds (1, 0.5).
type Duration = confval.Duration
