package cassandra

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

const (
	// retryConnectAfter is how long after a failed attempt to create the
	// session calls fail at once (with that attempt's error) before one
	// of them starts the next attempt: during an outage a busy node does
	// not dial for every call.
	retryConnectAfter = time.Second
	// schemaTimeout bounds creating the keyspace and the table.
	schemaTimeout = 30 * time.Second
	// defaultReplaceSessionAfter is how long a session may answer every
	// call with "no hosts available" before it is closed and the next
	// call creates a new one from the configured hosts: a safety net for
	// a driver that stops re-dialling its known nodes (it normally
	// reconnects within a second of a node's return).
	defaultReplaceSessionAfter = 30 * time.Second
)

// session returns the session, creating it when there is none. One
// attempt runs at a time, in the background (NewSession takes no
// context; ConnectTimeout bounds each dial and schemaTimeout the DDL);
// callers wait for it until their ctx is done, and a later call finds
// the session the attempt made.
func (s *Store) session(ctx context.Context) (*gocql.Session, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, clustersync.ErrClosed
	case s.sess != nil:
		sess := s.sess
		s.mu.Unlock()
		return sess, nil
	case s.connecting == nil && s.lastErr != nil && time.Since(s.lastFail) < retryConnectAfter:
		err := s.lastErr
		s.mu.Unlock()
		if isPermanent(err) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", clustersync.ErrUnavailable, err)
	case s.connecting == nil:
		s.connecting = make(chan struct{})
		go s.connect(s.connecting)
	}
	ch := s.connecting
	s.mu.Unlock()

	select {
	case <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: connecting: %w", clustersync.ErrUnavailable, ctx.Err())
	case <-s.done:
		return nil, clustersync.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, clustersync.ErrClosed
	case s.sess != nil:
		return s.sess, nil
	case isPermanent(s.lastErr):
		return nil, s.lastErr
	default:
		return nil, fmt.Errorf("%w: %w", clustersync.ErrUnavailable, s.lastErr)
	}
}

// connect makes one attempt to create the session and the schema.
func (s *Store) connect(ch chan struct{}) {
	sess, err := s.newSession()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(ch)
	s.connecting = nil
	if s.closed {
		if sess != nil {
			sess.Close()
		}
		return
	}
	if err != nil {
		level := slog.LevelWarn // the first failure of a run; then Debug
		if s.lastErr != nil {
			level = slog.LevelDebug
		}
		s.log.Log(context.Background(), level, "cassandra: cannot create session; will retry", "hosts", s.cfg.Hosts, "err", err)
		s.lastErr, s.lastFail = err, time.Now()
		return
	}
	s.sess, s.lastErr, s.noHostsSince = sess, nil, time.Time{}
	s.connects.Add(1)
}

// observe notes the outcome of a request on sess and replaces the session
// when it has had no host for s.replaceSessionAfter.
func (s *Store) observe(sess *gocql.Session, err error) {
	noHosts := errors.Is(err, gocql.ErrNoConnections)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != sess {
		return
	}
	switch {
	case !noHosts:
		if err == nil {
			s.noHostsSince = time.Time{}
		}
	case s.noHostsSince.IsZero():
		s.noHostsSince = time.Now()
	case time.Since(s.noHostsSince) > s.replaceSessionAfter:
		s.log.Warn("cassandra: no host reachable for a while; creating a new session", "hosts", s.cfg.Hosts, "since", s.noHostsSince)
		s.sess, s.noHostsSince = nil, time.Time{}
		go sess.Close() // calls still in flight on it fail as unavailable
	}
}

func (s *Store) newSession() (*gocql.Session, error) {
	c := s.cluster
	// A policy belongs to one session: a new one per attempt.
	var fallback gocql.HostSelectionPolicy = gocql.RoundRobinHostPolicy()
	if s.cfg.LocalDC != "" {
		fallback = gocql.DCAwareRoundRobinPolicy(s.cfg.LocalDC)
	}
	// Token-aware, replicas shuffled: the session has no keyspace (it
	// must be able to create it), and driver v2, unlike gocql v1, computes
	// the replicas of statements naming their keyspace, so reads spread
	// over every replica of a partition.
	c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(fallback, gocql.ShuffleReplicas())
	sess, err := gocql.NewSession(c)
	if err != nil {
		return nil, fmt.Errorf("create session with %v: %w", s.cfg.Hosts, err)
	}
	if !s.cfg.CreateSchema {
		return sess, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), schemaTimeout)
	defer cancel()
	go func() { // Close ends the attempt
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, stmt := range []string{createKeyspaceCQL(s.cfg), createTableCQL(s.cfg), createBucketTableCQL(s.cfg), addBucketWasteCQL(s.cfg), createLeaseTableCQL(s.cfg)} {
		// DDL is idempotent (IF NOT EXISTS) and waits for schema agreement.
		if err := sess.Query(stmt).Consistency(gocql.One).ExecContext(ctx); err != nil {
			sess.Close()
			return nil, fmt.Errorf("create schema: %w", err)
		}
	}
	return sess, nil
}

// slogLogger passes the driver's log to slog: errors and warnings as
// such, its informational and debug messages at Debug.
type slogLogger struct{ l *slog.Logger }

func (g slogLogger) Error(msg string, fields ...gocql.LogField) {
	g.log(slog.LevelError, msg, fields)
}

func (g slogLogger) Warning(msg string, fields ...gocql.LogField) {
	g.log(slog.LevelWarn, msg, fields)
}

func (g slogLogger) Info(msg string, fields ...gocql.LogField) {
	g.log(slog.LevelDebug, msg, fields)
}

func (g slogLogger) Debug(msg string, fields ...gocql.LogField) {
	g.log(slog.LevelDebug, msg, fields)
}

func (g slogLogger) log(level slog.Level, msg string, fields []gocql.LogField) {
	ctx := context.Background()
	if !g.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(fields)+1)
	attrs = append(attrs, slog.String("component", "gocql"))
	for _, f := range fields {
		attrs = append(attrs, slog.Any(f.Name, f.Value.Any()))
	}
	g.l.LogAttrs(ctx, level, msg, attrs...)
}
