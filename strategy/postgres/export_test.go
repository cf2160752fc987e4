package postgres

// LockKey is the advisory lock Allow takes for (namespace, key) on table
// schema.table.
func LockKey(schema, table, ns, key string) int64 { return lockKey(schema+"."+table, ns, key) }
