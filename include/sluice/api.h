// sluice/api.h — what the shared library exports.
//
// libsluice is built with hidden visibility: only declarations marked SLUICE_API (the public
// classes and functions of these headers) are exported, so nothing internal is part of the
// ABI and calls inside the library bind directly.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define SLUICE_API __attribute__((visibility("default")))
#else
#define SLUICE_API
#endif
