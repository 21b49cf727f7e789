#ifndef C_SQLITE_SHIM_H
#define C_SQLITE_SHIM_H

// The system's SQLite, for SQLiteMailboxStore.
#include <sqlite3.h>

#endif
