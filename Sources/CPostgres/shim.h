#ifndef C_POSTGRES_SHIM_H
#define C_POSTGRES_SHIM_H

// The system's libpq, the C client of PostgreSQL, for TetherPostgres only.
#include <libpq-fe.h>

#endif
