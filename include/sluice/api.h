// sluice/api.h — what the shared library exports.
//
// libsluice is built with hidden visibility: only declarations marked SLUICE_API (the public
// classes and functions of these headers) are exported, so nothing internal is part of the
// ABI and calls inside the library bind directly.
#pragma once

// Every public header includes this one before any use of C++20 (std::span, concepts): a
// program compiled in an older standard stops here first, saying what it needs.
#if __cplusplus < 202002L
#error "Sluice's headers need C++20: -std=c++20 (in pkg-config --cflags sluice and Sluice::sluice)"
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SLUICE_API __attribute__((visibility("default")))
#else
#define SLUICE_API
#endif
