package observer

import "database/sql"

// DB returns the store's database, for tests that count rows.
func (s *Store) DB() *sql.DB { return s.db }
