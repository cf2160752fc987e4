package cassandra

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

// precheck fails after Close and on an incarnation Cassandra's text type
// cannot hold.
func (s *Store) precheck(inc string) error {
	if s.isClosed() {
		return fmt.Errorf("cassandra: %w", clustersync.ErrClosed)
	}
	if inc == "" || !utf8.ValidString(inc) {
		return fmt.Errorf("cassandra: incarnation %q: must be non-empty valid UTF-8", inc)
	}
	return nil
}

func checkNamespace(ns string) error {
	if !utf8.ValidString(ns) {
		return fmt.Errorf("cassandra: namespace %q: must be valid UTF-8", ns)
	}
	return nil
}

// wrap adds the package prefix and classifies err: ErrClosed after
// Close, ErrUnavailable for a done ctx and for anything that is not a
// permanent error (a bad request, a missing table, bad credentials).
func (s *Store) wrap(op string, ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, clustersync.ErrClosed):
		return fmt.Errorf("cassandra: %s: %w", op, clustersync.ErrClosed)
	case s.isClosed():
		return fmt.Errorf("cassandra: %s: %w: %v", op, clustersync.ErrClosed, err)
	case errors.Is(err, clustersync.ErrUnavailable):
		return fmt.Errorf("cassandra: %s: %w", op, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("cassandra: %s: %w: %w (%v)", op, clustersync.ErrUnavailable, ctx.Err(), err)
	case isPermanent(err):
		return fmt.Errorf("cassandra: %s: %w", op, err)
	default:
		return fmt.Errorf("cassandra: %s: %w: %w", op, clustersync.ErrUnavailable, err)
	}
}

// isPermanent reports errors that retrying will not cure: the request
// or the schema or the credentials are wrong.
func isPermanent(err error) bool {
	if err == nil {
		return false
	}
	var (
		syntax   *gocql.RequestErrSyntax
		invalid  *gocql.RequestErrInvalid
		unauth   *gocql.RequestErrUnauthorized
		config   *gocql.RequestErrConfig
		creds    *gocql.RequestErrCredentials
		marshal  gocql.MarshalError
		umarshal gocql.UnmarshalError
	)
	return errors.As(err, &syntax) || errors.As(err, &invalid) || errors.As(err, &unauth) ||
		errors.As(err, &config) || errors.As(err, &creds) || errors.As(err, &marshal) ||
		errors.As(err, &umarshal) || errors.Is(err, gocql.ErrQueryArgLength)
}
