#ifndef C_ZLIB_SHIM_H
#define C_ZLIB_SHIM_H

// The system's zlib, for compressed frame bodies and CRC-32. zlib spells its init calls as
// macros that pass the library version and stream size, which Swift cannot call: the
// inline functions below give them a callable form.
#include <zlib.h>

static inline int tether_deflate_init(z_streamp stream, int level) {
    return deflateInit(stream, level);
}

static inline int tether_inflate_init(z_streamp stream) {
    return inflateInit(stream);
}

#endif
