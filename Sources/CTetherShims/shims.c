// The shim target is header-only; this file gives SwiftPM a translation unit to build.
#include "CTetherShims.h"
