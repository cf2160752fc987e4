package cassandra

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/limiterd/limiterd/internal/confval"
	"github.com/limiterd/limiterd/ratelimit"
)

// Defaults of Config, as DefaultConfig sets them. A zero Port, Timeout,
// ConnectTimeout, ProtoVersion, Concurrency or BatchRows, an empty
// Keyspace, Table, Replication or consistency also means its default.
const (
	DefaultKeyspace         = "limiterd"
	DefaultTable            = "windows"
	DefaultPort             = 9042
	DefaultConsistency      = "LOCAL_QUORUM"
	DefaultProtoVersion     = 4
	DefaultConcurrency      = 64
	DefaultBatchRows        = 32
	DefaultTimeout          = 5 * time.Second
	DefaultConnectTimeout   = 5 * time.Second
	maxBatchRows            = 100
	maxIdentifierLen        = 48 // Cassandra's limit for keyspace and table names
	defaultReplicationClass = "SimpleStrategy"
)

// Config is a Cassandra store's configuration, as written under a store of
// type cassandra in limiterd's YAML config. Start from DefaultConfig: the
// zero value of CreateSchema is false.
type Config struct {
	// Hosts are contact points, "host" or "host:port" (a host without a
	// port uses Port). The driver discovers the other nodes of the
	// cluster from them.
	Hosts []string `yaml:"hosts"`
	// Port is the native transport (CQL) port of every node: used for
	// hosts listed without a port and for the nodes the driver discovers.
	// Default 9042.
	Port int `yaml:"port"`
	// Keyspace holds the table. Lower-case letters, digits and '_',
	// starting with a letter, at most 48 characters. Default "limiterd".
	Keyspace string `yaml:"keyspace"`
	// Table is the table of windows, named like Keyspace. Default
	// "windows". Several limiterd clusters may share a keyspace with
	// tables of their own. Buckets are kept in Table + "_buckets"
	// (Cassandra before 5.0 takes table names of at most 48 characters).
	Table string `yaml:"table"`
	// LocalDC is the data center whose nodes the driver sends requests
	// to (DC-aware round robin; other data centers are never
	// coordinators). Empty: every node, round robin. Set it on a
	// multi-data-center cluster, together with LOCAL_* consistencies.
	LocalDC string `yaml:"local_dc"`
	// Replication is the replication of the keyspace when CreateSchema
	// creates it (an existing keyspace is left as it is). Default
	// {class: SimpleStrategy, replication_factor: 1}, which suits a
	// single test node only: production wants NetworkTopologyStrategy
	// with a replication factor per data center, e.g.
	// {class: NetworkTopologyStrategy, dc1: 3}.
	Replication Replication `yaml:"replication"`
	// WriteConsistency is the consistency level of Push: ANY, ONE, TWO,
	// THREE, QUORUM, ALL, LOCAL_QUORUM, EACH_QUORUM or LOCAL_ONE
	// (case-insensitive). Default LOCAL_QUORUM. A push is visible to the
	// other nodes' fetches when write and read replicas overlap
	// (W + R > replication factor): LOCAL_QUORUM both ways does that in
	// each data center.
	WriteConsistency string `yaml:"write_consistency"`
	// ReadConsistency is the consistency level of Fetch and Window: ONE,
	// TWO, THREE, QUORUM, ALL, LOCAL_QUORUM or LOCAL_ONE. Default
	// LOCAL_QUORUM.
	ReadConsistency string `yaml:"read_consistency"`
	// Username and Password authenticate with PasswordAuthenticator when
	// Username is set.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// TLS configures encrypted connections.
	TLS TLSConfig `yaml:"tls"`
	// ConnectTimeout bounds establishing each connection. Creating the
	// session dials the hosts in turn and then, with CreateSchema, runs
	// two CREATE ... IF NOT EXISTS (at most 30 s); a call waits for that
	// only as long as its context allows. Default 5s.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// Timeout bounds one request when the caller's context allows more
	// (the Syncer's contexts are shorter: its tick timeout and 250 ms
	// synchronous calls). Default 5s.
	Timeout Duration `yaml:"timeout"`
	// ProtoVersion is the native protocol version: 3, 4 or 5. Default 4,
	// which every Cassandra since 2.2 speaks (the driver's negotiation of
	// v5 has had bugs).
	ProtoVersion int `yaml:"proto_version"`
	// CreateSchema creates the keyspace and the table when they are
	// missing (CREATE ... IF NOT EXISTS) when the session is created.
	// Turn it off where limiterd may not alter the schema, and apply
	// `limiterd schema cassandra` (SchemaCQL) instead. Default true.
	CreateSchema bool `yaml:"create_schema"`
	// Concurrency is the most requests in flight per Push, Fetch or
	// PushFetch call. Default 64.
	Concurrency int `yaml:"concurrency"`
	// BatchRows is the most windows per request: Push sends up to this
	// many rows per unlogged batch (fewer when they would exceed about
	// 4 KiB, under Cassandra's batch_size_warn_threshold) and Fetch reads
	// up to this many keys of one window size and start per SELECT ...
	// key IN. Larger values save round trips and per-request work on the
	// server (measured on one node: 32 does about three times the keys
	// per second of 1); 1 sends one request per window, routed to a replica
	// of its partition (token-aware), which spares the coordinators of a
	// large cluster the forwarding. Cassandra logs a warning, at most
	// once a minute, for unlogged batches over more than 10 partitions
	// (unlogged_batch_across_partitions_warn_threshold). Default 32, at
	// most 100.
	BatchRows int `yaml:"batch_rows"`

	// Logger receives the driver's warnings and errors (at Debug: its
	// informational messages). Nil discards them. Not part of the YAML.
	Logger *slog.Logger `yaml:"-"`
}

// TLSConfig configures TLS towards Cassandra (client_encryption_options
// on the server).
type TLSConfig = confval.TLS

// DefaultConfig returns the defaults for a single node on
// 127.0.0.1:9042.
func DefaultConfig() Config {
	return Config{
		Hosts:            []string{"127.0.0.1"},
		Port:             DefaultPort,
		Keyspace:         DefaultKeyspace,
		Table:            DefaultTable,
		Replication:      Replication{"class": defaultReplicationClass, "replication_factor": "1"},
		WriteConsistency: DefaultConsistency,
		ReadConsistency:  DefaultConsistency,
		ConnectTimeout:   Duration(DefaultConnectTimeout),
		Timeout:          Duration(DefaultTimeout),
		ProtoVersion:     DefaultProtoVersion,
		CreateSchema:     true,
		Concurrency:      DefaultConcurrency,
		BatchRows:        DefaultBatchRows,
	}
}

// withDefaults fills the zero fields that have a default (all but
// CreateSchema, whose zero value is meaningful).
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Port == 0 {
		c.Port = d.Port
	}
	if c.Keyspace == "" {
		c.Keyspace = d.Keyspace
	}
	if c.Table == "" {
		c.Table = d.Table
	}
	if len(c.Replication) == 0 {
		c.Replication = d.Replication
	}
	if c.WriteConsistency == "" {
		c.WriteConsistency = d.WriteConsistency
	}
	if c.ReadConsistency == "" {
		c.ReadConsistency = d.ReadConsistency
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.ProtoVersion == 0 {
		c.ProtoVersion = d.ProtoVersion
	}
	if c.Concurrency == 0 {
		c.Concurrency = d.Concurrency
	}
	if c.BatchRows == 0 {
		c.BatchRows = d.BatchRows
	}
	return c
}

var identifier = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("cassandra: invalid config")

// Validate reports the first invalid field: its error wraps a
// *ratelimit.FieldError naming the field (as written in YAML) and the reason,
// which wraps ErrInvalidConfig. Zero fields that have a default are valid.
func (c Config) Validate() error {
	c = c.withDefaults()
	// The package prefix, then a *ratelimit.FieldError, so a caller can name
	// the field without parsing text.
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("cassandra: %w", &ratelimit.FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidConfig})
	}
	if len(c.Hosts) == 0 {
		return bad("hosts", "at least one host is required")
	}
	for i, h := range c.Hosts {
		if err := checkHost(h); err != nil {
			return bad(fmt.Sprintf("hosts[%d]", i), "%v", err)
		}
	}
	if c.Port < 1 || c.Port > 65535 {
		return bad("port", "must be 1-65535, got %d", c.Port)
	}
	for field, name := range map[string]string{"keyspace": c.Keyspace, "table": c.Table} {
		if !identifier.MatchString(name) || len(name) > maxIdentifierLen {
			return bad(field, "%q must be lower-case letters, digits and '_', starting with a letter, at most %d characters", name, maxIdentifierLen)
		}
	}
	if err := c.Replication.validate(); err != nil {
		return bad("replication", "%v", err)
	}
	if _, err := writeConsistency(c.WriteConsistency); err != nil {
		return bad("write_consistency", "%v", err)
	}
	if _, err := readConsistency(c.ReadConsistency); err != nil {
		return bad("read_consistency", "%v", err)
	}
	switch {
	case c.Password != "" && c.Username == "":
		return bad("username", "is required when password is set")
	case !c.TLS.Enabled && (c.TLS.CAFile != "" || c.TLS.ServerName != "" || c.TLS.InsecureSkipVerify):
		return bad("tls.enabled", "must be true when other tls fields are set")
	case c.ConnectTimeout < 0:
		return bad("connect_timeout", "must not be negative, got %s", c.ConnectTimeout)
	case c.Timeout < 0:
		return bad("timeout", "must not be negative, got %s", c.Timeout)
	case c.ProtoVersion < 3 || c.ProtoVersion > 5:
		return bad("proto_version", "must be 3, 4 or 5, got %d", c.ProtoVersion)
	case c.Concurrency < 1:
		return bad("concurrency", "must be at least 1, got %d", c.Concurrency)
	case c.BatchRows < 1 || c.BatchRows > maxBatchRows:
		return bad("batch_rows", "must be 1-%d, got %d", maxBatchRows, c.BatchRows)
	}
	return nil
}

func checkHost(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port (or a bare IPv6 address).
		if strings.ContainsAny(h, "/ ") {
			return fmt.Errorf("%q is not a host or host:port", h)
		}
		return nil
	}
	if host == "" {
		return fmt.Errorf("%q has no host", h)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port must be 1-65535", h)
	}
	return nil
}

var writeLevels = []string{"ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"}

func writeConsistency(name string) (gocql.Consistency, error) {
	return consistency(name, writeLevels)
}

func readConsistency(name string) (gocql.Consistency, error) {
	// ANY is for writes only; EACH_QUORUM reads are not supported by
	// Cassandra.
	return consistency(name, slices.DeleteFunc(slices.Clone(writeLevels), func(s string) bool { return s == "ANY" || s == "EACH_QUORUM" }))
}

func consistency(name string, allowed []string) (gocql.Consistency, error) {
	up := strings.ToUpper(strings.TrimSpace(name))
	if !slices.Contains(allowed, up) {
		return 0, fmt.Errorf("unknown consistency level %q: want one of %s", name, strings.Join(allowed, ", "))
	}
	return gocql.ParseConsistencyWrapper(up)
}

// tlsConfig builds the TLS configuration, nil when TLS is off.
func (c Config) tlsConfig() (*tls.Config, error) {
	tc, err := c.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("cassandra: %w", err)
	}
	return tc, nil
}

// Replication is a keyspace's replication map: "class" names the
// strategy (SimpleStrategy, NetworkTopologyStrategy), the other entries
// its options (replication_factor, or a replication factor per data
// center). In YAML it is either a mapping,
//
//	replication: {class: NetworkTopologyStrategy, dc1: 3, dc2: 3}
//
// or a string in CQL map syntax, as CREATE KEYSPACE takes it:
//
//	replication: "{'class': 'NetworkTopologyStrategy', 'dc1': 3}"
type Replication map[string]string

var (
	replKey   = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	replValue = regexp.MustCompile(`^[A-Za-z0-9_./:-]+$`)
)

// UnmarshalYAML reads a mapping or a CQL map literal (yaml.v3 and v2).
func (r *Replication) UnmarshalYAML(unmarshal func(any) error) error {
	var m map[string]string
	if err := unmarshal(&m); err == nil {
		*r = m
		return nil
	}
	var s string
	if err := unmarshal(&s); err != nil {
		return errors.New("replication: want a mapping such as {class: NetworkTopologyStrategy, dc1: 3} or a string such as \"{'class': 'SimpleStrategy', 'replication_factor': 1}\"")
	}
	p, err := ParseReplication(s)
	if err != nil {
		return err
	}
	*r = p
	return nil
}

// ParseReplication parses a replication map in CQL syntax,
// "{'class': 'SimpleStrategy', 'replication_factor': 1}" (braces and
// quotes optional).
func ParseReplication(s string) (Replication, error) {
	body := strings.TrimSpace(s)
	body = strings.TrimSuffix(strings.TrimPrefix(body, "{"), "}")
	r := Replication{}
	if strings.TrimSpace(body) == "" {
		return nil, fmt.Errorf("replication %q: empty", s)
	}
	for _, entry := range strings.Split(body, ",") {
		k, v, ok := strings.Cut(entry, ":")
		if !ok {
			return nil, fmt.Errorf("replication %q: entry %q is not 'key': 'value'", s, strings.TrimSpace(entry))
		}
		k, v = unquote(k), unquote(v)
		if _, dup := r[k]; dup {
			return nil, fmt.Errorf("replication %q: %q given twice", s, k)
		}
		r[k] = v
	}
	if err := r.validate(); err != nil {
		return nil, fmt.Errorf("replication %q: %w", s, err)
	}
	return r, nil
}

func unquote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && (s[0] == '\'' && s[len(s)-1] == '\'' || s[0] == '"' && s[len(s)-1] == '"') {
		s = s[1 : len(s)-1]
	}
	return s
}

func (r Replication) validate() error {
	class := r["class"]
	if class == "" {
		return errors.New("\"class\" is required (SimpleStrategy or NetworkTopologyStrategy)")
	}
	for k, v := range r {
		if !replKey.MatchString(k) {
			return fmt.Errorf("key %q: want letters, digits, '_', '.' or '-'", k)
		}
		if !replValue.MatchString(v) {
			return fmt.Errorf("%s: value %q: want letters, digits, '_', '.', '/', ':' or '-'", k, v)
		}
	}
	switch strings.TrimPrefix(class, "org.apache.cassandra.locator.") {
	case "SimpleStrategy":
		rf, ok := r["replication_factor"]
		if !ok {
			return errors.New("SimpleStrategy needs replication_factor")
		}
		if len(r) != 2 {
			return errors.New("SimpleStrategy takes replication_factor only")
		}
		if n, err := strconv.Atoi(rf); err != nil || n < 1 {
			return fmt.Errorf("replication_factor: want a positive integer, got %q", rf)
		}
	case "NetworkTopologyStrategy":
		if len(r) < 2 {
			return errors.New("NetworkTopologyStrategy needs a replication factor per data center, e.g. dc1: 3")
		}
	}
	return nil
}

// CQL renders the map in CQL syntax, class first, then the options in
// name order.
func (r Replication) CQL() string {
	var b strings.Builder
	b.WriteString("{'class': '")
	b.WriteString(r["class"])
	b.WriteByte('\'')
	for _, k := range slices.Sorted(maps.Keys(r)) {
		if k == "class" {
			continue
		}
		fmt.Fprintf(&b, ", '%s': '%s'", k, r[k])
	}
	b.WriteByte('}')
	return b.String()
}

// Duration is a time.Duration written in config as a Go duration string
// ("250ms", "1s") or a bare number of seconds (1, 0.5).
type Duration = confval.Duration

// SchemaCQL returns the CQL that creates cfg's keyspace and table, as
// CreateSchema runs it (printed by `limiterd schema cassandra`). Empty
// fields take their defaults.
func SchemaCQL(cfg Config) string {
	cfg = cfg.withDefaults()
	return createKeyspaceCQL(cfg) + ";\n\n" + createTableCQL(cfg) + ";\n\n" + createBucketTableCQL(cfg) + ";\n\n" + addBucketWasteCQL(cfg) + ";\n\n" + createLeaseTableCQL(cfg) + ";\n"
}

func createKeyspaceCQL(cfg Config) string {
	return fmt.Sprintf("CREATE KEYSPACE IF NOT EXISTS %s\n  WITH replication = %s", cfg.Keyspace, cfg.Replication.CQL())
}

// createTableCQL is the table: one partition per window of one key, one
// row per incarnation, so no partition grows with the namespace or with
// time (a window's partition lives for about two window sizes) and a busy
// namespace's partitions spread over the whole ring. The key is a blob:
// text would reject invalid UTF-8, and a blob keeps any two distinct keys
// distinct. Totals are plain bigints, not counters: a counter increment
// that times out cannot be retried safely, and counters cannot expire.
func createTableCQL(cfg Config) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  namespace   text,
  size_ns     bigint,
  start_ns    bigint,
  key         blob,
  incarnation text,
  total       bigint,
  PRIMARY KEY ((namespace, size_ns, start_ns, key), incarnation)
) WITH %s`, cfg.Keyspace, cfg.Table, tableOptions)
}

// tableOptions: time-window compaction (1 h windows), so whole SSTables
// of expired windows are dropped; LZ4 in 4 KiB chunks, as reads are point
// reads of a few rows; gc_grace_seconds of 3 h, the default hint window,
// as no row is ever deleted, only overwritten or expired.
const tableOptions = `compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'HOURS', 'compaction_window_size': '1'}
  AND compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': '4'}
  AND gc_grace_seconds = 10800
  AND comment = 'limiterd sliding-window totals per node incarnation; rows expire by TTL'`
