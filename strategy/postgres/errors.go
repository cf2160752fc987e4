package postgres

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	clustersync "github.com/limiterd/limiterd/sync"
)

// fail wraps err from operation op: clustersync.ErrClosed once the store
// is closed; a server error that retrying cannot cure (a missing table,
// refused credentials, bad data) as is; anything else — no connection, a
// timeout, ctx done, a server starting, shutting down, out of connections
// or cancelling the statement — with clustersync.ErrUnavailable.
func (s *Store) fail(op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w: %w", op, clustersync.ErrClosed, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Code == "42P01" || pe.Code == "3F000" || pe.Code == "42883" {
			// The table, schema or bucket or lease function is gone (dropped,
			// restored from an old backup): create it again on the next
			// call.
			s.ready.Store(false)
		}
		if !transient(pe.Code) {
			return fmt.Errorf("postgres: %s: %w", op, err)
		}
	}
	return fmt.Errorf("postgres: %s: %w: %w", op, clustersync.ErrUnavailable, err)
}

// transient reports whether a SQLSTATE is one a later retry may not see.
func transient(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "53"),    // insufficient resources: too many connections, disk full, out of memory
		strings.HasPrefix(code, "57P"),   // admin or crash shutdown, cannot connect now, database dropped
		strings.HasPrefix(code, "40"),    // serialization failure, deadlock detected (not expected, but retryable)
		code == "57014",                  // query canceled: statement_timeout or a cancel request
		code == "55P03",                  // lock not available (lock_timeout)
		code == "25006",                  // read-only transaction: a standby, mid-failover
		code == "58000", code == "58030", // system or I/O error
		code == "XX000": // internal error
		return true
	}
	return false
}
